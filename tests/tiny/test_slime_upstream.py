"""What the tiny backend stands in below slime's code to keep a CPU run fast (trainstack/tiny/slime_upstream.py):
the in-process transport to the tiny server, deferred third-party imports, transformers' processor names
resolved on first use. Each keeps slime's code path above it and the results a socket / eager import gives."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import urllib.request

import pytest
from conftest import ROOT


def _rollouts(data_dir):
    from test_slime_loop import _argv, _rollouts as make

    return make(_argv(data_dir))


def _http(url: str, body: dict | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, json.loads(r.read())


def test_slime_reaches_the_tiny_server_in_process_and_http_gives_the_same_answer(data_dir):
    ro, _ = _rollouts(data_dir)
    from slime.utils import http_utils
    from slime.utils.async_utils import run

    try:
        res = ro.generate(0)
        assert ro.server.requests == len(res.samples) > 0
        assert ro.server.http_requests == 0  # slime's post/get never opened a socket to the tiny server
        body = {"input_ids": [4, 5, 13, 6, 14], "return_logprob": True,
                "sampling_params": {"temperature": 1.0, "max_new_tokens": 3, "sampling_seed": 7}}
        ro.server.begin(99, "train")
        local = run(http_utils.post(f"{ro.server.url}/generate", body))  # slime's own post, in-process
        ro.server.begin(99, "train")  # same scope again: the same request draws the same tokens
        status, remote = _http(f"{ro.server.url}/generate", body)
        assert status == 200 and ro.server.http_requests == 1
        for out in (local, remote):
            out["meta_info"].pop("id")  # a request counter
        assert local == remote and local["output_ids"]
        assert run(http_utils.get(f"{ro.server.url}/v1/loads?include=core")) == _http(f"{ro.server.url}/v1/loads")[1]
        with pytest.raises(TypeError, match="JSON serializable"):  # what would not cross a socket does not cross here
            run(http_utils._post(http_utils._http_client, f"{ro.server.url}/generate", {"input_ids": {1, 2}},
                                 max_retries=1))
    finally:
        ro.close()


def test_in_process_client_goes_over_http_for_other_urls_and_other_loops(data_dir):
    ro, _ = _rollouts(data_dir)
    from slime.utils import http_utils

    try:
        client = http_utils._http_client
        url = f"{ro.server.url}/health"
        assert asyncio.run(client.get(url)).status_code == 200  # another event loop: a real request
        assert ro.server.http_requests == 1
        assert client._route(url.replace(ro.server.url, "http://127.0.0.1:9")) is None
    finally:
        ro.close()


PKG = '''
import os
open(os.environ["DEFER_LOG"], "a").write("pkg\\n")
VALUE = 42
'''
SUB = '''
import os
import {name}
open(os.environ["DEFER_LOG"], "a").write("sub %s\\n" % {name}.VALUE)
'''


@pytest.fixture
def package(tmp_path, monkeypatch):
    name = f"deferpkg_{abs(hash(str(tmp_path)))}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text(textwrap.dedent(PKG))
    (tmp_path / name / "sub.py").write_text(textwrap.dedent(SUB.format(name=name)))
    monkeypatch.syspath_prepend(str(tmp_path))
    log = tmp_path / "log"
    log.write_text("")
    monkeypatch.setenv("DEFER_LOG", str(log))
    yield name, log
    for m in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[m]


def test_a_deferred_module_runs_on_first_use_once(package):
    from trainstack.tiny.slime_upstream import defer_import

    name, log = package
    assert defer_import(name) and not defer_import(name)
    mod = __import__(name)
    __import__(name)  # a second import statement reads __spec__: still not run
    assert log.read_text() == ""
    assert mod.VALUE == 42 and type(mod).__name__ == "module"
    assert getattr(mod, "VALUE") == 42 and log.read_text() == "pkg\n"  # once
    assert sys.modules[name] is mod


def test_a_deferred_package_runs_before_its_submodule(package):
    from trainstack.tiny.slime_upstream import defer_import

    name, log = package
    defer_import(name)
    __import__(f"{name}.sub")
    assert log.read_text() == "pkg\nsub 42\n"
    assert not defer_import("trainstack_no_such_module_xyz")


CIRCLE = {  # sympy's shape: the package imports its subpackage's name, which its child module defines
    "__init__.py": "import os\nopen(os.environ['DEFER_LOG'], 'a').write('pkg\\n')\nBASE = 1\n"
                   "from .parsing import parse\n",
    "parsing/__init__.py": "from .parser import parse\n",
    "parsing/parser.py": "import os\nimport {name}\nopen(os.environ['DEFER_LOG'], 'a').write('parser\\n')\n"
                         "def parse(s):\n    return {name}.BASE + int(s)\n",
}
USER = """import {name}
from {name}.parsing import parser
def names():  # slime's math_utils copies `sympy.__dict__` before its first parse
    return sorted(k for k in {name}.__dict__ if not k.startswith('_'))
def use(s):
    return parser.parse(s)
"""


def test_a_deferred_package_whose_init_imports_its_deferred_child_runs_each_once_in_import_order(tmp_path,
                                                                                                  monkeypatch):
    from trainstack.tiny.slime_upstream import defer_import

    name = f"circlepkg_{abs(hash(str(tmp_path)))}"
    for rel, text in CIRCLE.items():
        (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name / rel).write_text(text.format(name=name))
    (tmp_path / f"{name}_user.py").write_text(USER.format(name=name))
    monkeypatch.syspath_prepend(str(tmp_path))
    log = tmp_path / "log"
    log.write_text("")
    monkeypatch.setenv("DEFER_LOG", str(log))
    try:
        for n in (name, f"{name}.parsing", f"{name}.parsing.parser"):
            assert defer_import(n)
        user = __import__(f"{name}_user")
        assert log.read_text() == ""  # `import pkg` and `from pkg.sub import child` ran nothing
        assert user.names() == ["BASE", "os", "parse", "parsing"]  # the namespace is the run module's
        assert log.read_text() == "pkg\nparser\n"
        assert user.use("41") == 42 and log.read_text() == "pkg\nparser\n"  # once each
    finally:
        for m in [m for m in sys.modules if m.startswith(name)]:
            del sys.modules[m]


SYMPY_CASES = [("\\frac{1}{2}", "0.5"), ("x+x", "2*x"), ("\\sqrt{4}", "2"), ("3", "3.0"), ("1/2", "\\frac12"),
               ("\\pi", "3.14159"), ("(1,2)", "(1, 2)"), ("2^{10}", "1024")]
GRADE = """import json, sys
from trainstack.tiny import slime_upstream as su
if sys.argv[1] == "eager":
    su.DEFERRED_IMPORTS = tuple(n for n in su.DEFERRED_IMPORTS if not n.startswith("sympy"))
su.load()
import slime.rollout.sglang_rollout  # what the tiny trainer imports: sympy is not run by it
deferred = type(sys.modules["sympy"]).__name__
from slime.rollout.rm_hub.math_utils import grade_answer_sympy, grade_answer_verl
from slime.rollout.rm_hub.deepscaler import get_deepscaler_rule_based_reward
cases = json.loads(sys.argv[2])
print(json.dumps([deferred, [grade_answer_sympy(a, b) for a, b in cases],
                  [get_deepscaler_rule_based_reward("<think>x</think> so \\\\boxed{%s}" % a, b) for a, b in cases]]))
"""


def test_deferred_sympy_grades_as_an_eager_import_does():
    """slime's math rewards (rm_hub.math_utils) with sympy deferred give what an eager import gives, from
    the first call on, and importing slime's rollout module runs none of sympy."""
    out = {}
    for mode in ("deferred", "eager"):
        r = subprocess.run([sys.executable, "-c", GRADE, mode, json.dumps(SYMPY_CASES)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        out[mode] = json.loads(r.stdout)
    assert out["deferred"][0] == "_Deferred" and out["eager"][0] == "module"
    assert out["deferred"][1:] == out["eager"][1:]
    assert any(out["eager"][1]) and not all(out["eager"][1])  # the cases tell right from wrong


def test_lazy_processor_names_import_nothing_until_used(tmp_path):
    from trainstack.tiny import hf_tokenizer
    from trainstack.tiny.slime_upstream import _LazyName

    absent = _LazyName("Thing", "trainstack_not_imported_module_xyz")
    assert not isinstance(object(), absent)  # nothing is an instance of a class never imported
    assert not issubclass(int, absent) and "trainstack_not_imported_module_xyz" not in sys.modules
    present = _LazyName("OrderedDict", "collections")
    import collections

    assert isinstance(collections.OrderedDict(), present) and not isinstance({}, present)
    assert present.fromkeys("a") == {"a": None}  # any other attribute: the real object's
    d = hf_tokenizer.write(tmp_path / "tok")
    proc = _LazyName("AutoProcessor", "transformers.models.auto.processing_auto").from_pretrained(str(d))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(d))
    assert type(proc) is type(tok) and proc.get_vocab() == tok.get_vocab()


def test_slime_processing_utils_holds_the_lazy_names_and_transformers_keeps_its_own():
    import transformers

    from trainstack.tiny import slime_upstream

    slime_upstream.load()
    from slime.utils import processing_utils

    for name in slime_upstream.LAZY_TRANSFORMERS:
        assert type(getattr(processing_utils, name)).__name__ in ("_LazyName", "type"), name
        assert "_LazyName" not in type(transformers.__dict__.get(name, transformers)).__name__
