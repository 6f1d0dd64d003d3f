"""The upstream contract: every slime internal trainstack relies on is still in the `slime/` submodule.

trainstack never imports slime (it needs GPUs), so nothing else notices when slime renames a module,
changes a plugin signature, drops a `Sample` field or moves a file. This test reads slime's source with
`ast` and checks, each with a message naming the symbol and what in trainstack relies on it:

- the submodule is at the argument table's commit;
- entrypoints (`train.py`, `train_async.py`), `tools/convert_hf_to_torch_dist.py` (docs/models.md), the
  model scripts the presets were generated from (`scripts/models/<name>.sh`);
- every `slime.*` plugin path trainstack's configs and the tiny trainer's defaults name (module and name);
- how slime calls plugins: `load_function`, the custom generate function `(args, sample,
  sampling_params[, evaluation=])`, the reward function `(args, sample, **kwargs)`, sample hooks,
  `--custom-config-path` setting each top-level YAML key on `args` (the HTTP env's settings);
- `Sample`: every field and method the tiny trainer's mirror (trainstack/tiny/sample.py) and the HTTP env
  plugin use, and the status values;
- the files slime writes that trainstack reads: the checkpoint tracker, the data cursor, the rollout dumps;
- the metric keys trainstack reads (`rollout/raw_reward`, the step keys);
- what `sync_slime` builds the argument table from, and the formulas the tiny loss mirrors.

It runs in CI against the submodule `.ci/run` fills from the bundle; it skips (with the reason) only when
`slime/` is empty outside CI (`CI` unset), and fails when it is empty in CI.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
from dataclasses import fields
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import ROOT
from trainstack.upstream.argtable import load_table

# the checkout under test: the submodule (the pin), or another version of the window (.ci/run sets it)
SLIME = Path(os.environ.get("TRAINSTACK_CONTRACT_SLIME") or ROOT / "slime").resolve()
AT_PIN = SLIME == (ROOT / "slime").resolve()


def home(*paths: str) -> str:
    """The first of `paths` (`pkg.module.name`, newest home first) whose module exists in the checkout: slime
    moves things between versions (the pin's slime.observability was slime.ray.rollout / slime.utils)."""
    for path in paths:
        parts = path.split(".")
        for i in (len(parts) - 1, len(parts) - 2):  # module.name or module.Class.method
            base = SLIME.joinpath(*parts[:i])
            if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
                return path
    return paths[0]


def since(module: str, what: str) -> None:
    """Skip, naming the version range, where the checkout predates `module` (what trainstack's use of it
    needs holds from the slime that added it)."""
    base = SLIME.joinpath(*module.split("."))
    if not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
        pytest.skip(f"slime at {SLIME} predates {module}: {what} holds from the slime that added it")


def when_empty(root: Path, env: dict[str, str]) -> tuple[str, str] | None:
    """None when `root` holds slime's source; else ("skip" | "fail", why): empty is a failure in CI."""
    if (root / "slime" / "__init__.py").is_file():
        return None
    why = (f"the slime/ submodule ({root}) is empty: fill it with `git submodule update --init slime` (or from the "
           "bundle, README 'Quick start'); the upstream contract is checked against its source")
    if env.get("CI", "").lower() in ("1", "true", "yes"):
        return "fail", f"CI: {why} (.ci/run fills it from ../shared/upstream)"
    return "skip", why


@pytest.fixture(autouse=True, scope="module")
def slime_checkout() -> Path:
    verdict = when_empty(SLIME, dict(os.environ))
    if verdict is not None:
        (pytest.fail if verdict[0] == "fail" else pytest.skip)(verdict[1])
    return SLIME


def test_an_empty_submodule_skips_outside_ci_and_fails_in_ci(tmp_path):
    assert when_empty(SLIME, {}) is None
    assert when_empty(tmp_path, {})[0] == "skip"
    kind, why = when_empty(tmp_path, {"CI": "true"})
    assert kind == "fail" and "git submodule update --init slime" in why


def test_a_missing_symbol_fails_naming_it():
    with pytest.raises(AssertionError, match=r"slime symbol slime.utils.types.Sampel is missing .*no 'Sampel'"):
        symbol("slime.utils.types.Sampel", "a test")
    with pytest.raises(pytest.fail.Exception, match="slime module slime.utils.typos is missing"):
        module("slime.utils.typos")


@lru_cache(maxsize=None)
def module(dotted: str) -> ast.Module:
    """slime's module `dotted` (`slime.utils.types`), parsed; fails naming it when missing."""
    base = SLIME.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    pytest.fail(f"slime module {dotted} is missing from slime/ ({base}.py)")


def top_level(tree: ast.Module) -> dict[str, ast.AST]:
    """Names a module defines at top level (functions, classes, assignments, imports)."""
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                out[(alias.asname or alias.name).split(".")[0]] = node
    return out


def symbol(path: str, why: str) -> ast.AST:
    """`pkg.module.name` in slime's source: the module exists and defines the name."""
    mod, _, name = path.rpartition(".")
    found = top_level(module(mod)).get(name)
    assert found is not None, f"slime symbol {path} is missing ({mod} defines no {name!r}); trainstack relies on it: {why}"
    return found


def params(fn: ast.AST) -> list[str]:
    assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)), fn
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return names + ([f"*{a.vararg.arg}"] if a.vararg else []) + ([f"**{a.kwarg.arg}"] if a.kwarg else [])


def calls(tree: ast.AST, func_name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (isinstance(n.func, ast.Name) and n.func.id == func_name
                 or isinstance(n.func, ast.Attribute) and n.func.attr == func_name)]


def strings(tree: ast.AST) -> set[str]:
    """Every string constant, and the literal parts of f-strings joined with `{}` for each field."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.add(n.value)
        elif isinstance(n, ast.JoinedStr):
            out.add("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in n.values))
    return out


def package_strings(package: str) -> set[str]:
    out: set[str] = set()
    for path in sorted(SLIME.joinpath(*package.split(".")).rglob("*.py")):
        out |= strings(ast.parse(path.read_text(encoding="utf-8")))
    return out


# --- the commit ---------------------------------------------------------------------------------------


def test_the_submodule_is_at_the_argument_tables_commit():
    from trainstack.upstream.slime_version import head_commit
    from trainstack.upstream.versions import identify

    known = identify(SLIME)
    assert known is not None, f"{SLIME} matches no argument table by content (trainstack slime sync --slime-root)"
    table = known.commit
    git = subprocess.run(["git", "-C", str(SLIME), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert git.returncode == 0, git.stderr
    assert git.stdout.strip() == table, (f"slime/ is at {git.stdout.strip()} but the argument table was read from "
                                         f"{table}: pin the submodule to it, or regenerate the table "
                                         "(`python -m trainstack.upstream.sync_slime args --slime-root slime`)")
    assert head_commit(SLIME) == table  # the launch's own reading (no git) agrees with git


# --- files --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rel,why", [
    ("train.py", "the synchronous entrypoint (slime.entrypoint / algo meta `train.py`)"),
    ("train_async.py", "the asynchronous entrypoint (algo meta `train_async.py`, conf/algo/sft.yaml)"),
    ("tools/convert_hf_to_torch_dist.py", "docs/models.md: converting HF checkpoints to torch_dist"),
])
def test_entrypoints_and_tools_exist(rel, why):
    assert (SLIME / rel).is_file(), f"slime/{rel} is missing; trainstack relies on it: {why}"


def test_every_model_preset_has_its_upstream_script():
    if not AT_PIN:
        pytest.skip("the packaged presets are generated from the pin's scripts/models/")
    models = json.loads((ROOT / "trainstack" / "data" / "slime_models.json").read_text())["models"]
    missing = [name for name in models if not (SLIME / "scripts" / "models" / f"{name}.sh").is_file()]
    assert not missing, f"slime scripts/models/<name>.sh missing for presets {missing} (conf/model/*.yaml)"


# --- plugin paths ----------------------------------------------------------------------------------------


def plugin_paths() -> list[tuple[str, str]]:
    """(`slime.x.y.fn`, where trainstack names it) over the config tree and the tiny trainer's defaults."""
    import yaml

    from trainstack.tiny import flags

    out = []

    def walk(node, where: str) -> None:
        if isinstance(node, dict):
            for v in node.values():
                walk(v, where)
        elif isinstance(node, list):
            for v in node:
                walk(v, where)
        elif isinstance(node, str) and re.fullmatch(r"slime(\.\w+)+", node):
            out.append((node, where))

    for path in sorted((ROOT / "conf").rglob("*.yaml")):
        walk(yaml.safe_load(path.read_text()) or {}, str(path.relative_to(ROOT)))
    for name in dir(flags):
        value = getattr(flags, name)
        if name.startswith("_DEFAULT_") and isinstance(value, str) and value.startswith("slime."):
            out.append((value, f"trainstack/tiny/flags.py {name}"))
    return out


def test_plugin_paths_trainstack_names_exist_in_slime():
    paths = plugin_paths()
    assert len(paths) >= 4, paths  # sft rollout, dapo filter, the default rollout and data source
    for path, where in paths:
        symbol(path, f"named in {where}")


def test_how_slime_loads_and_calls_plugins():
    fn = symbol("slime.utils.misc.load_function", "every `*_path` plugin is imported by it (pkg.module.attr)")
    assert params(fn) == ["path"] and 'rpartition' in ast.unparse(fn), "slime.utils.misc.load_function changed"
    # the custom generate function: (args, sample, sampling_params[, evaluation=])
    rollout = module("slime.rollout.sglang_rollout")
    assert params(symbol("slime.rollout.sglang_rollout.generate", "the default generate function")) == \
        ["args", "sample", "sampling_params"]
    custom = calls(rollout, "custom_generate_func")
    assert any(len(c.args) == 3 and any(k.arg == "evaluation" for k in c.keywords) for c in custom) and \
        any(len(c.args) == 3 and not c.keywords for c in custom), \
        "slime.rollout.sglang_rollout no longer calls --custom-generate-function-path as (args, sample, " \
        "sampling_params[, evaluation=]) (plugins/http_env/generate.py.generate)"
    assert "custom_generate_function_path" in ast.unparse(rollout)
    # the reward function: await rm(args, sample, **kwargs)
    rm = symbol("slime.rollout.rm_hub.async_rm", "--custom-rm-path dispatch (trainstack/tiny/arithmetic.reward)")
    assert params(rm)[:2] == ["args", "sample"]
    assert any(len(c.args) == 2 and any(k.arg is None for k in c.keywords) for c in calls(rm, "rm_function")), \
        "slime.rollout.rm_hub.async_rm no longer calls --custom-rm-path as (args, sample, **kwargs)"
    if not (SLIME / "slime" / "rollout" / "sample_hooks.py").is_file():
        return  # slime before --rollout-sample-hook-path (v0.3.0)
    hooks = symbol("slime.rollout.sample_hooks.apply_rollout_sample_hooks", "--rollout-sample-hook-path")
    assert params(hooks)[:2] == ["args", "value"] and "rollout_sample_hook_path" in ast.unparse(hooks)


def test_custom_config_path_sets_each_top_level_key_on_args():
    """The HTTP env's settings reach its generate function as `args.http_env` (trainstack writes the YAML)."""
    from trainstack.http_env.settings import CONFIG_KEY

    tree = module("slime.utils.arguments")
    blocks = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "args.custom_config_path"]
    assert blocks, "slime.utils.arguments no longer reads --custom-config-path"
    body = ast.Module(body=blocks[0].body, type_ignores=[])
    assert calls(body, "safe_load") and any(ast.unparse(c.args[0]) == "args" for c in calls(body, "setattr")), \
        f"--custom-config-path no longer sets each top-level YAML key on args (args.{CONFIG_KEY} for the HTTP env)"


# --- Sample ------------------------------------------------------------------------------------------


def slime_sample() -> ast.ClassDef:
    node = symbol("slime.utils.types.Sample", "custom generate/reward functions and the tiny trainer's mirror")
    assert isinstance(node, ast.ClassDef)
    return node


def test_sample_fields_and_status_values():
    from trainstack.tiny.sample import Sample as Mirror

    cls = slime_sample()
    upstream = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    mirror = {f.name for f in fields(Mirror)}
    missing = sorted(mirror - upstream) if AT_PIN else []  # the mirror follows the pin's Sample
    assert not missing, f"slime's Sample has no field(s) {missing} (trainstack/tiny/sample.py mirrors them)"
    # what the HTTP env plugin reads and writes (plugins/http_env/generate.py)
    used = {"prompt", "label", "metadata", "tokens", "response", "response_length", "loss_mask",
            "rollout_log_probs", "reward", "status", "remove_sample"}
    assert used <= upstream, f"slime's Sample has no field(s) {sorted(used - upstream)} (plugins/http_env)"
    status = next(n for n in cls.body if isinstance(n, ast.ClassDef) and n.name == "Status")
    values = {t.id: n.value.value for n in status.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
              for t in n.targets if isinstance(t, ast.Name)}
    assert values == {s.name: s.value for s in Mirror.Status}, f"Sample.Status changed: {values}"


@pytest.mark.parametrize("method", ["append_response_tokens", "get_reward_value"])
def test_sample_methods_the_mirror_offers(method):
    from trainstack.tiny.sample import Sample as Mirror

    node = next((n for n in slime_sample().body if isinstance(n, ast.FunctionDef) and n.name == method), None)
    if node is None and not AT_PIN:
        pytest.skip(f"slime at {SLIME} predates Sample.{method} (the tiny mirror follows the pin's Sample)")
    assert node is not None, f"slime's Sample.{method} is missing (trainstack/tiny/sample.py offers it to plugins)"
    import inspect

    ours = [p for p in inspect.signature(getattr(Mirror, method)).parameters if p != "self"]
    theirs = params(node)
    assert set(ours) <= set(theirs), f"Sample.{method}: slime takes {theirs}, the tiny mirror {ours}"


# --- files slime writes, metrics it logs ---------------------------------------------------------------


def test_checkpoint_and_rollout_files_trainstack_reads():
    from trainstack.storage import layout

    assert layout.TRACKER in package_strings("slime.utils"), \
        f"slime no longer reads the checkpoint tracker {layout.TRACKER} (trainstack/storage/checkpoints.py decides resume on it)"
    cursor = re.sub(r"\{[^}]*\}", "{}", layout.DATA_CURSOR)
    assert cursor in strings(module("slime.rollout.data_source")), \
        f"slime.rollout.data_source no longer saves the data cursor as {layout.DATA_CURSOR} under --save"
    dump = member(home("slime.observability.rollout_data_utils.save_debug_rollout_data",
                       "slime.ray.rollout.RolloutManager._save_debug_rollout_data"),
                  f"hub.push_rollouts reads {layout.ROLLOUT_DATA_FILE}")
    assert any(isinstance(c.func, ast.Attribute) and c.func.attr == "format" and [k.arg for k in c.keywords] ==
               ["rollout_id"] for c in calls(dump, "format")), \
        "--save-debug-rollout-data is no longer formatted with rollout_id= (trainstack/run/rundir/layout.ROLLOUT_DATA_FILE)"


def test_metric_keys_trainstack_reads():
    from trainstack.metrics import STEP_KEYS
    from trainstack.run.rundir.progress import REWARD

    logged = package_strings("slime")
    missing = [k for k in STEP_KEYS if k not in logged]
    assert not missing, f"slime no longer logs the step key(s) {missing} (trainstack/metrics STEP_KEYS)"
    prefix, _, key = REWARD.partition("/")
    train_metrics = module(home("slime.observability.train_metric_utils.gather_log_data",
                                "slime.backends.megatron_utils.data.gather_log_data").rpartition(".")[0])
    assert any(c.args and isinstance(c.args[0], ast.Constant) and c.args[0].value == prefix
               for c in calls(train_metrics, "gather_log_data")), f"slime no longer logs the {prefix}/ metrics"
    assert key in strings(module("slime.ray.rollout")), f"slime's rollout data has no {key!r} ({REWARD})"


# --- what the table and the tiny loss are built from --------------------------------------------------


@pytest.mark.parametrize("path,why", [
    ("slime.utils.arguments._pre_parse_mode", "sync_slime args: the pre-parse flags"),
    ("slime.utils.arguments.get_slime_extra_args_provider", "sync_slime args: slime's own flags"),
    ("slime.backends.sglang_utils.arguments.add_sglang_arguments", "sync_slime args: the --sglang-* flags"),
    ("slime.utils.ppo_utils.compute_approx_kl", "trainstack/tiny/loss.py kl (--kl-loss-type)"),
    ("slime.utils.ppo_utils.compute_policy_loss", "trainstack/tiny/loss.py policy_loss"),
    ("slime.utils.ppo_utils.get_grpo_returns", "trainstack/tiny/loss.py advantages (grpo)"),
    ("slime.utils.ppo_utils.get_reinforce_plus_plus_returns", "trainstack/tiny/loss.py advantages (reinforce++)"),
    ("slime.rollout.data_source.RolloutDataSourceWithBuffer", "the default --data-source-path"),
])
def test_functions_trainstack_builds_on(path, why):
    symbol(path, why)


def test_args_the_http_env_plugin_reads_are_slime_dests():
    table = load_table()
    for dest in ("sglang_router_ip", "sglang_router_port", "hf_checkpoint", "custom_config_path",
                 "custom_generate_function_path"):
        assert dest in table, f"{dest} is not a slime dest (plugins/http_env/generate.py reads args.{dest})"


# --- the tiny backend runs slime's rollout code (trainstack/tiny/rollout.py, server.py, slime_upstream.py) ---


def member(path: str, why: str) -> ast.AST:
    """`pkg.module.Class.method` (or a plain top-level name) in slime's source."""
    head, _, name = path.rpartition(".")
    mod, _, cls = head.rpartition(".")
    if cls[:1].isupper():
        node = symbol(f"{mod}.{cls}", why)
        found = next((n for n in getattr(node, "body", []) if getattr(n, "name", None) == name), None)
        assert found is not None, f"slime symbol {path} is missing ({mod}.{cls} defines no {name!r}); " \
                                  f"trainstack relies on it: {why}"
        return found
    return symbol(path, why)


@pytest.mark.parametrize("path", __import__("trainstack.tiny.rollout", fromlist=["x"]).SLIME_FUNCTIONS)
def test_the_slime_functions_the_tiny_run_log_names_exist(path):
    from trainstack.tiny.slime_upstream import where_called

    path = where_called(path, SLIME)  # moved between versions: found where this slime keeps it
    if path.startswith("slime.rollout.sample_hooks."):
        since("slime.rollout.sample_hooks", "the tiny backend's use of sample hooks")
    member(path, "the tiny backend calls it on every rollout (trainstack/tiny/rollout.py SLIME_FUNCTIONS)")


@pytest.mark.parametrize("path,signature", [
    ("slime.rollout.sglang_rollout.generate_rollout", ["args", "rollout_id", "data_source", "evaluation"]),
    ("slime.rollout.sglang_rollout.generate_and_rm_group", ["args", "group", "sampling_params", "evaluation"]),
    ("slime.rollout.base_types.call_rollout_fn", ["fn", "evaluation", "*args", "**kwargs"]),
    ("slime.ray.rollout.RolloutManager._convert_samples_to_train_data", ["self", "samples"]),
    ("slime.ray.rollout.RolloutManager._post_process_rewards", ["self", "samples"]),
    ("slime.rollout.data_source.RolloutDataSource.load", ["self", "rollout_id"]),
    ("slime.rollout.sample_hooks.set_current_rollout_id", ["rollout_id"]),
    ("validate_rollout_ids", ["node", "depth"]),  # a FUNCTION_HOMES role: wherever this slime keeps it
    ("compute_metrics_from_samples", ["args", "samples"]),
    ("slime.utils.eval_config.build_eval_dataset_configs", ["args", "raw_config", "defaults"]),
    ("slime.utils.misc.should_run_periodic_action", ["rollout_id", "interval", "num_rollout_per_epoch", "num_rollout"]),
    ("slime.utils.http_utils.init_http_client", ["args"]),
    ("slime.utils.async_utils.get_async_loop", []),
    ("slime.utils.misc.SingletonMeta.clear_instances", ["cls"]),
])
def test_signatures_the_tiny_backend_calls(path, signature):
    from trainstack.tiny.slime_upstream import FUNCTION_HOMES, function_home

    if path in FUNCTION_HOMES:
        path = ".".join(function_home(path, SLIME))
    if path.startswith("slime.rollout.sample_hooks."):
        since("slime.rollout.sample_hooks", "the tiny backend's use of sample hooks")
    got = params(member(path, "called by trainstack/tiny (rollout.py, train.py)"))
    assert got == signature, f"slime's {path} takes {got}; trainstack/tiny calls it as {signature}"


def test_rollout_manager_methods_tiny_compiles_read_only_the_attributes_tiny_sets():
    """tiny compiles RolloutManager's two conversion methods from slime's source (no Ray) and sets only the
    attributes _convert_samples_to_train_data / _post_process_rewards read."""
    symbol("slime.ray.rollout.RolloutManager", "tiny converts samples with its _convert_samples_to_train_data")
    read = set()
    for name in ("_convert_samples_to_train_data", "_post_process_rewards"):
        fn = member(f"slime.ray.rollout.RolloutManager.{name}", "tiny's train data")
        read |= {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                 and n.value.id == "self"}
    called = {"_post_process_rewards"}
    assert read - called <= {"args", "custom_reward_post_process_func", "custom_convert_samples_to_train_data_func"}, \
        f"RolloutManager's conversion reads self.{sorted(read - called)}; trainstack/tiny/rollout.py sets only args " \
        "and the two custom function attributes"


# sha256 of ast.dump (no line numbers) of each method, at the pinned commit: a slime bump that changes one
# fails here, naming it, so whoever bumps re-reads it (the names it uses, what tiny trains on) and re-pins
# (one entry per version of the window, by its table's name; each ran the CPU default's 2 rollouts in CI)
MANAGER_METHOD_HASHES_BY_VERSION = {
    "624b824a": {"_post_process_rewards": "a5cbc88039e15e9f", "_convert_samples_to_train_data": "7233795ec97ba0f2"},
    "v0.3.1": {"_post_process_rewards": "a5cbc88039e15e9f", "_convert_samples_to_train_data": "14b88cd5128d1924"},
    "v0.3.0": {"_post_process_rewards": "6647472ea948114b", "_convert_samples_to_train_data": "32c3bb9724ca3dfb"},
}


def manager_method_hashes() -> dict[str, str]:
    from trainstack.upstream.versions import identify

    known = identify(SLIME)
    return MANAGER_METHOD_HASHES_BY_VERSION.get(known.name if known else "", {})


def test_the_rollout_manager_methods_tiny_runs_are_slimes_own():
    import hashlib

    from trainstack.tiny.slime_upstream import MANAGER_METHODS, manager_globals, manager_source

    path, _, cls, imports = manager_source(SLIME)
    nodes = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in MANAGER_METHODS}
    got = {name: hashlib.sha256(ast.dump(n).encode()).hexdigest()[:16] for name, n in nodes.items()}
    want = manager_method_hashes()
    assert got == want, (
        f"slime's RolloutManager methods {sorted(k for k in got if got[k] != want.get(k))} changed: "
        "check the names they use (trainstack/tiny/slime_upstream.rollout_manager_class imports them from where "
        "slime/ray/rollout.py does) and the train data keys trainstack/tiny/loss.py reads, then re-pin "
        f"MANAGER_METHOD_HASHES_BY_VERSION[<this version>] = {got}")
    names = manager_globals(list(nodes.values()))
    assert names <= set(imports), f"RolloutManager's conversion reads {sorted(names - set(imports))}, which " \
                                  "slime/ray/rollout.py does not import (tiny compiles the methods alone)"


@pytest.mark.slow
def test_the_compiled_conversion_equals_the_ray_actors_own(tmp_path):
    """Same samples through tiny's compiled methods and through slime.ray.rollout's class (Ray imported)."""
    import argparse

    from trainstack.tiny import slime_upstream

    slime_upstream.load(SLIME)
    from slime.ray.rollout import RolloutManager
    from slime.utils.types import Sample

    def samples():
        out = []
        for i in range(8):
            s = Sample(index=i, tokens=[4, 5, 6 + i % 3], response_length=1 + i % 2, reward=float(i % 3),
                       status=Sample.Status.COMPLETED if i % 4 else Sample.Status.TRUNCATED,
                       rollout_log_probs=[-0.5] * (1 + i % 2))
            s.loss_mask = None if i % 2 else [1]
            s.remove_sample = i == 5
            out.append(s)
        return out

    args = argparse.Namespace(advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True,
                              n_samples_per_prompt=4, rollout_batch_size=2, rollout_top_p=1.0, reward_key=None,
                              eval_reward_key=None)
    built = slime_upstream.rollout_manager_class(SLIME)
    path, _, node, _ = slime_upstream.manager_source(SLIME)
    for fn in (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name in slime_upstream.MANAGER_METHODS):
        code = getattr(built, fn.name).__code__
        assert (code.co_filename, code.co_firstlineno) == (str(path), fn.lineno)  # tracebacks point into slime
    results = []
    for cls in (RolloutManager.__ray_metadata__.modified_class, built):
        m = cls.__new__(cls)
        m.args, m.custom_reward_post_process_func, m.custom_convert_samples_to_train_data_func = args, None, None
        results.append(m._convert_samples_to_train_data(samples()))
    assert results[0] == results[1] and results[0]["rewards"] != results[0]["raw_reward"]


def test_train_data_keys_the_tiny_trainer_reads():
    fn = member("slime.ray.rollout.RolloutManager._convert_samples_to_train_data", "tiny trains on its output")
    keys = strings(fn)
    want = {"tokens", "response_lengths", "rewards", "raw_reward", "truncated", "loss_masks", "rollout_log_probs"}
    assert want <= keys, f"slime's train data has no {sorted(want - keys)} (trainstack/tiny/loss.py make_batch, train.py)"


def test_data_source_state_the_tiny_checkpoint_saves():
    fn = member("slime.rollout.data_source.RolloutDataSource.save", "tiny saves the same cursor with each checkpoint")
    keys = strings(fn)
    want = {"sample_offset", "epoch_id", "sample_group_index", "sample_index", "metadata"}
    assert want <= keys, f"slime's data cursor has no {sorted(want - keys)} (trainstack/tiny/rollout.py save_state)"


def test_http_client_methods_the_aiohttp_stand_in_offers():
    from trainstack.tiny.slime_upstream import AiohttpClient, InProcessClient, _Response

    assert any(isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "_http_client"
               for n in module("slime.utils.http_utils").body), "slime.utils.http_utils._http_client is gone"
    for fn_name, obj_names in (("_post", ("client", "response")), ("get", ("_http_client", "response"))):
        fn = symbol(f"slime.utils.http_utils.{fn_name}", "tiny swaps the httpx pool for AiohttpClient")
        used = {(n.value.id, n.attr) for n in ast.walk(fn) if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name) and n.value.id in obj_names}
        for owner, attr in used:
            for target in ((AiohttpClient, InProcessClient) if owner in ("client", "_http_client") else (_Response,)):
                assert hasattr(target, attr), f"slime.utils.http_utils.{fn_name} uses {owner}.{attr}; " \
                                              f"trainstack/tiny/slime_upstream.{target.__name__} lacks it"


def test_what_slime_sends_and_reads_the_tiny_server_answers():
    src = package_strings("slime.rollout") | package_strings("slime.backends.sglang_utils") | package_strings("slime.ray")
    newer = {"return_top_p_token_ids", "/v1/loads?include=core"}  # the pin's; v0.3.0 never asks (the answer goes unused)
    for s in ("/generate", "output_token_logprobs", "meta_info", "return_logprob", "input_ids", "sampling_seed",
              "return_top_p_token_ids", "/workers", "/abort_request", "/v1/loads?include=core"):
        if s in newer and not AT_PIN and not any(s in x for x in src):
            continue
        assert any(s in x for x in src), f"slime's rollout no longer uses {s!r} (trainstack/tiny/server.py answers it)"
    methods = {n.name for n in slime_sample().body if isinstance(n, ast.FunctionDef)}
    reader = "_apply_meta_info" if AT_PIN or "_apply_meta_info" in methods else "update_from_meta_info"  # v0.3.0's
    meta = strings(member(f"slime.utils.types.Sample.{reader}", "status from finish_reason"))
    assert {"finish_reason", "type", "length", "abort", "stop"} <= meta, "Sample._apply_meta_info reads other keys"


def _module_imports(dotted: str) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """(slime modules `dotted` imports at module level, {sglang module: names} it imports at module level)."""
    tree = module(dotted)
    is_pkg = SLIME.joinpath(*dotted.split("."), "__init__.py").is_file()
    base = dotted.split(".") if is_pkg else dotted.split(".")[:-1]
    slime_mods, sglang = [], {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(base[:len(base) - node.level + 1] + ([mod] if mod else []))
            if mod.split(".")[0] in ("sglang", "sglang_router"):
                sglang[mod] = tuple(sorted(a.name for a in node.names))
            elif mod.startswith("slime"):
                slime_mods.append(mod)
                slime_mods += [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ("sglang", "sglang_router"):
                    sglang[a.name] = ()
                elif a.name.startswith("slime"):
                    slime_mods.append(a.name)
    return slime_mods, sglang


def test_sglang_standins_are_exactly_slimes_module_level_sglang_imports():
    """slime_upstream.SGLANG_STANDINS stands in for what the rollout path imports from SGLang at module level."""
    from trainstack.tiny.slime_upstream import SGLANG_STANDINS

    roots = ["slime.rollout.sglang_rollout", "slime.ray.rollout", "slime.rollout.data_source",
             "slime.utils.eval_config", "slime.observability.rollout_metrics", "slime.rollout.sample_hooks",
             "slime.utils.arguments"]  # slime's own parser: the tests build `args` with it
    seen, todo, found = set(), list(roots), {}
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        base = SLIME.joinpath(*mod.split("."))
        if not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
            continue  # a name imported from a module, not a module
        mods, sg = _module_imports(mod)
        todo += mods
        for k, v in sg.items():
            found[k] = tuple(sorted(set(found.get(k, ())) | set(v)))
    declared = {k: tuple(sorted(v)) for k, v in SGLANG_STANDINS.items() if v}
    assert set(found) <= set(SGLANG_STANDINS), f"slime imports {sorted(set(found) - set(SGLANG_STANDINS))}"
    found = {k: v for k, v in found.items() if v}  # `import sglang_router` (v0.3.0): the module alone
    assert declared == found, (f"slime's rollout path imports {found} from SGLang at module level; "
                               f"trainstack/tiny/slime_upstream.SGLANG_STANDINS stands in for {declared}")
