"""No tracebacks, nothing written on refusal (property-based, hypothesis).

1. Random values of the wrong type and range (NaN, inf, 0, negative, huge, empty, lists, maps,
   unicode, interpolations) at every schema key and at a sample of slime dests of each argparse kind:
   composing, validating and running the launch checks either accepts the value or refuses it with
   ConfigErrors (key, problem); never another exception, and nothing is written.
2. Random corruptions of each run-dir file (and the sweep manifest): status, compare, diff, cancel,
   the relaunch's checks and exec's checks answer exit 0/1 or one message with exit 2; never a
   traceback, and nothing is written when they refuse.
3. A few of each through the real entry points (`python run.py`, `python -m trainstack`).

In-process where possible, so a few hundred examples take seconds.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, run_py
from tests.fakes import write_checkpoint
from trainstack.upstream import argtable as at
from trainstack.errors import ConfigErrors
from trainstack.storage import layout

SETTINGS = settings(max_examples=int(os.environ.get("TS_PROPERTY_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# ------------------------------------------------------------------------------------------
# what is thrown
# ------------------------------------------------------------------------------------------
def schema_keys() -> list[str]:
    from trainstack.config.schema import ROOT_SCALARS, ROOT_SECTIONS

    keys = [k for k in ROOT_SCALARS if k != "dry_run"]
    for section, cls in ROOT_SECTIONS.items():
        keys += [f"{section}.{f.name}" for f in dataclasses.fields(cls)]
    return keys


def dest_sample() -> list[str]:
    """Up to 3 dests of every (action, type, nargs, choices) kind, plus the ones the tiny run uses."""
    table = at.load_table()
    by_kind: dict[tuple, list[str]] = {}
    for dest, spec in table.specs.items():
        by_kind.setdefault((spec.kind, spec.value_kind, bool(spec.nargs), bool(spec.choice_values())), []).append(dest)
    picked = [d for dests in by_kind.values() for d in dests[:3]]
    return sorted(set(picked) | {"lr", "num_rollout", "rollout_batch_size", "n_samples_per_prompt", "eval_prompt_data",
                                 "prompt_data", "train_env_vars", "rollout_global_dataset", "custom_rm_path",
                                 "advantage_estimator", "rollout_stop", "save_interval", "ref_load", "seed",
                                 "rollout_temperature", "use_kl_loss", "entropy_coef"})


def quoted(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


WEIRD = st.sampled_from([
    "nan", "inf", "-inf", "NaN", "0", "-1", "-0.0", "1e308", "1e400", "-1e400", str(10 ** 30), str(-(10 ** 30)),
    "''", "null", "[]", "{}", "[1,2]", "[[1],[2]]", "{a:1}", "{a:{b:[1,nan]}}", "[nan]", "[inf,-1]", "true",
    "false", "${paths.runs_root}", "${nope}", "${model.lr}", "${oc.env:TS_SURELY_UNSET}", "${oc.env:HOME}",
    "'${nope}'", "../../etc", "/", "x" * 5000, "[" + ",".join(["1"] * 200) + "]", "a,b", "'a,b'", "\\n",
])
VALUES = st.one_of(
    WEIRD,
    st.integers(min_value=-(10 ** 25), max_value=10 ** 25).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=30).map(quoted),
    st.lists(st.sampled_from(["1", "-1", "nan", "'x'", "{}", "[]", "null"]), max_size=4).map(lambda v: f"[{','.join(v)}]"),
)


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def snapshot(root: Path) -> dict[str, str]:
    """Every file and directory under root with a hash of its content (a write shows up here)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink() or not p.is_file():
            out[rel] = "dir" if p.is_dir() else "other"
        else:
            out[rel] = hashlib.sha1(p.read_bytes()).hexdigest()
    return out


@contextlib.contextmanager
def cwd(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def check_refusal(err: ConfigErrors) -> None:
    assert err.errors, "ConfigErrors without errors"
    for e in err.errors:
        assert e.key and e.problem, e
    text = err.render()
    assert "Traceback" not in text


def launch_checks(overrides: list[str], where: Path) -> None:
    """What `python run.py <overrides>` does before it writes anything (compose, validate, preflight)."""
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.preflight.checks import preflight

    before = snapshot(where)
    with cwd(where):
        try:
            run, cmd = build_from_overrides(overrides)
            preflight(run, cmd, launching=False)
        except ConfigErrors as err:
            check_refusal(err)
    assert snapshot(where) == before, f"{overrides} wrote files"


@pytest.fixture(scope="module")
def scratch():
    d = Path(tempfile.mkdtemp(prefix="ts-prop-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------------------------------------
# 1. values of the wrong type and range
# ------------------------------------------------------------------------------------------
SCHEMA_KEYS = schema_keys()
DESTS = dest_sample()


def test_the_samples_cover_every_key_and_dest_kind():
    assert {"cluster.num_nodes", "resume.lease_ttl_s", "paths.runs_root", "slime.root", "tracking.tensorboard",
            "runtime_env.env_vars", "run_id", "output"} <= set(SCHEMA_KEYS)
    kinds = {(s.kind, s.value_kind) for s in (at.load_table()[d] for d in DESTS)}
    assert {("store_true", "bool"), ("store_false", "bool"), ("store", "int"), ("store", "float"), ("store", "str"),
            ("store", "json"), ("append", "str"), ("bool_optional", "bool")} <= kinds
    assert any(at.load_table()[d].nargs for d in DESTS) and any(at.load_table()[d].choice_values() for d in DESTS)


@SETTINGS
@given(key=st.sampled_from(SCHEMA_KEYS), value=VALUES)
def test_schema_keys_take_any_value_without_a_traceback(key, value, scratch):
    launch_checks([f"{key}={value}"], scratch)


@SETTINGS
@given(dest=st.sampled_from(DESTS), ns=st.sampled_from(["args", "model", "algo", "env"]), value=VALUES)
def test_slime_dests_take_any_value_without_a_traceback(dest, ns, value, scratch):
    launch_checks([f"{ns}.{dest}={value}"], scratch)


@SETTINGS
@given(pairs=st.lists(st.tuples(st.sampled_from(SCHEMA_KEYS + [f"args.{d}" for d in DESTS]), VALUES), min_size=2,
                      max_size=4, unique_by=lambda kv: kv[0]))
def test_several_bad_values_at_once(pairs, scratch):
    launch_checks([f"{k}={v}" for k, v in pairs], scratch)


# ------------------------------------------------------------------------------------------
# 2. corrupt run-dir files
# ------------------------------------------------------------------------------------------
def build_run_tree(root: Path) -> str:
    """Under `root`: a run dir with every file the lifecycle writes (spec and its views, events, status,
    metrics, lease, checkpoint, SLURM record) and a sweep manifest naming it; returns the run id.
    Built in place (never copied: the spec, the manifest and the views record absolute paths)."""
    from trainstack.fencing.lease import Lease
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.run.rundir import RunDir, manifest
    from trainstack.run.spec import RunSpec

    with cwd(root):
        run, cmd = build_from_overrides(RELAUNCH)
    spec = RunSpec.from_run(run, cmd)
    rd = RunDir(spec.run_dir)
    rd.write_spec(spec)
    rd.event("launch", lease_epoch=1, argv=["x"])
    rd.event("resume", from_rollout=2, checkpoint=1)
    rd.update_status(run_id=spec.run_id, state="finished", num_rollout=4, last_checkpoint=3,
                     last_metrics={"rollout/raw_reward": 0.5}, exit_code=0)
    with open(rd.metrics_file, "w") as f:
        for step in range(4):
            f.write(json.dumps({"step_key": "rollout/step", "step": step, "metrics": {"rollout/raw_reward": step / 4}})
                    + "\n")
    write_checkpoint(rd.checkpoints, 3)
    lease = Lease.acquire(rd.lease_file, ttl_s=30)
    lease.release()
    (rd.path / layout.SLURM).write_text(json.dumps({"run_id": spec.run_id, "job_id": "17", "job_name": spec.run_id,
                                                    "logs": {"stdout": "/x/17_0_log.out"}}))
    manifest.record(root / "multirun" / "sw", [manifest.SweepRun(run_id=spec.run_id, run_dir=spec.run_dir,
                                                                 overrides=["env.num_rollout=4"], job_num=0)],
                    scheduler="local")
    return spec.run_id


RELAUNCH = ["env.num_rollout=4", "args.save_interval=1"]


RUN_FILES = [layout.SPEC, layout.ARGS, layout.CONFIG, layout.OVERRIDES, layout.PROVENANCE, layout.CHOICES,
             layout.COMMAND, layout.STATUS, layout.LEASE, layout.SLURM, layout.EVENTS, layout.METRICS,
             f"{layout.CHECKPOINTS}/{layout.TRACKER}"]
JSON_JUNK = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                                   st.text(max_size=8)),
                         lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                 st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                         max_leaves=6)


@st.composite
def corruption(draw):
    """(file, how): garbage bytes, a cut file, another JSON type, a field of the wrong type, empty,
    a directory in its place."""
    name = draw(st.sampled_from(RUN_FILES + ["sweep"]))
    how = draw(st.sampled_from(["bytes", "cut", "json", "field", "empty", "dir", "line"]))
    payload = draw(st.one_of(st.binary(max_size=40), JSON_JUNK.map(lambda v: json.dumps(v).encode())))
    key_pick = draw(st.integers(min_value=0, max_value=50))
    field_value = draw(JSON_JUNK)
    cut = draw(st.floats(min_value=0.0, max_value=0.99))
    return name, how, payload, key_pick, field_value, cut


def corrupt(path: Path, how: str, payload: bytes, key_pick: int, field_value, cut: float) -> None:
    original = path.read_bytes() if path.is_file() else b"{}"
    if how == "dir":
        path.unlink(missing_ok=True)
        path.mkdir()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "cut":
        path.write_bytes(original[: int(len(original) * cut)])
    elif how == "bytes":
        path.write_bytes(payload + b"\xff\xfe")
    elif how == "line":  # a bad line in the middle of a JSON-lines file (or anywhere else)
        lines = original.split(b"\n")
        lines.insert(min(key_pick, len(lines) - 1) if len(lines) > 1 else 0, payload)
        path.write_bytes(b"\n".join(lines))
    elif how == "json":
        path.write_bytes(payload)
    else:  # a field of the wrong type
        try:
            data = json.loads(original)
        except ValueError:
            path.write_bytes(payload)
            return
        if isinstance(data, dict) and data:
            keys = sorted(data)
            key = keys[key_pick % len(keys)]
            if isinstance(data[key], dict) and data[key] and key_pick % 2:  # one level down
                sub = sorted(data[key])
                data[key][sub[key_pick % len(sub)]] = field_value
            else:
                data[key] = field_value
            path.write_text(json.dumps(data))
        else:
            path.write_bytes(payload)


def cli(*argv: str) -> int:
    from trainstack.cli import main as ts_cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = ts_cli.main(list(argv))
        except SystemExit as ex:
            code = ex.code if isinstance(ex.code, int) else 1
    assert "Traceback" not in err.getvalue() + out.getvalue()
    if code == 2:
        assert err.getvalue().startswith("trainstack"), err.getvalue()
    return code


@pytest.mark.slow  # ~0.7 s an example: six commands and a relaunch's checks on a fresh run tree
@settings(SETTINGS, max_examples=int(os.environ.get("TS_PROPERTY_EXAMPLES", "40")))
@given(case=corruption())
def test_corrupt_run_dir_files_are_named_never_a_traceback(case):
    name, how, payload, key_pick, field_value, cut = case
    root = Path(tempfile.mkdtemp(prefix="ts-corrupt-"))
    try:
        run_id = build_run_tree(root)
        run_dir = root / "runs" / run_id
        sweep = root / "multirun" / "sw"
        target = sweep / layout.SWEEP_MANIFEST if name == "sweep" else run_dir / name
        corrupt(target, how, payload, key_pick, field_value, cut)
        before = snapshot(root)
        with cwd(root):
            codes = {
                "status": cli("status", run_id, "--json"),
                "status-sweep": cli("status", str(sweep), "--wide"),
                "compare": cli("compare", str(sweep), "--source", "jsonl", "--json"),
                "compare-table": cli("compare", run_id, "--source", "jsonl"),
                "diff": cli("diff", run_id, "env.num_rollout=4 args.save_interval=1"),
                "cancel": cli("cancel", str(sweep), "--dry"),
            }
            assert snapshot(root) == before, (name, how)
            launch_checks(RELAUNCH, root)  # the relaunch's checks
            try:  # what `trainstack exec RUN` checks before the lifecycle writes anything
                from trainstack.run import spec as runspec
                from trainstack.preflight.checks import check_stored

                check_stored(runspec.load(run_dir))
            except ConfigErrors as err:
                check_refusal(err)
        assert snapshot(root) == before, (name, how)
        assert set(codes.values()) <= {0, 1, 2}, codes
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------------------
# 3. through the real entry points
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides", [
    ["args.lr=nan"], ["cluster.num_nodes=-1"], ["resume.lease_ttl_s=inf"], ["paths.runs_root=[1,2]"],
    ["run_id={a:1}"], ["algo.lr=${nope}"], ["args.rollout_batch_size=[1]"], ["output=/", "dry_run=true"],
    ["model=null"], ["cluster.gpus_per_node=1e400"], ["args.eval_prompt_data={}"], ["resume.grace_s=-inf"],
])
def test_run_py_refuses_in_one_message(overrides, tmp_path):
    res = run_py(*overrides, cwd=tmp_path)
    assert res.returncode == 2, (overrides, res.stdout[-500:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr and res.stderr.startswith("trainstack: ") and "error: " in res.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("file,content", [
    (layout.SPEC, "{not json"), (layout.SPEC, "[1, 2]"), (layout.STATUS, "[1, 2]"), (layout.LEASE, "garbage"),
    (layout.EVENTS, '{"event": "launch"}\nnot json\n'), (layout.ARGS, '"x"'),
])
def test_cli_subprocess_corrupt_file(file, content, tmp_path):
    run_id = build_run_tree(tmp_path)
    (tmp_path / "runs" / run_id / file).write_text(content)
    before = snapshot(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv in (["status", run_id], ["compare", run_id], ["exec", run_id]):
        res = subprocess.run([sys.executable, "-m", "trainstack", *argv], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 2, (argv, file, res.stdout[-500:], res.stderr[-1500:])
        assert "Traceback" not in res.stderr and file in res.stderr and "fix" in res.stderr
    res = run_py(*RELAUNCH, cwd=tmp_path)  # relaunching the run
    assert res.returncode == 2 and file in res.stderr and "Traceback" not in res.stderr, res.stderr[-1500:]
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------------------------------
# 4. numbers out of range: refused naming the key, or safe where they are used
# ------------------------------------------------------------------------------------------
def numeric_schema_keys() -> list[str]:
    from trainstack.config.schema import ROOT_SECTIONS, ClusterSpec

    keys = []
    for section, cls in ROOT_SECTIONS.items():
        if cls is ClusterSpec:  # its launcher fields move out of it (another change); numbers checked by rules
            continue
        hints = __import__("typing").get_type_hints(cls)
        keys += [f"{section}.{f.name}" for f in dataclasses.fields(cls)
                 if hints[f.name] in (int, float) or str(hints[f.name]) in ("typing.Optional[int]",
                                                                             "typing.Optional[float]")]
    return keys


NUMERIC_KEYS = numeric_schema_keys()
HUGE = st.one_of(st.sampled_from(["1e308", "1e400", "-1e400", "inf", "-inf", "nan", str(10 ** 30), "9.3e9", "-1",
                                  "0", "604801", "1e-320"]),
                 st.floats(allow_nan=True, allow_infinity=True).map(repr),
                 st.integers(min_value=-(10 ** 40), max_value=10 ** 40).map(str))


def test_numeric_sample_covers_the_timeouts():
    assert {"resume.lease_ttl_s", "resume.grace_s", "hub.final_timeout_s", "hub.retry_max_s", "hub.every",
            "hub.keep"} <= set(NUMERIC_KEYS)


@SETTINGS
@given(key=st.sampled_from(NUMERIC_KEYS), value=HUGE)
def test_numbers_out_of_range_are_refused_naming_the_key_or_safe(key, value, scratch):
    """A number the schema accepts must be usable where it is used: seconds become thread waits (at
    most threading.TIMEOUT_MAX) and wall-clock deadlines (time.localtime of now + value); anything
    else is a ConfigError naming the key, never an exception escaping (resume.lease_ttl_s=1e308
    overflowed the lease renewal thread)."""
    import threading
    import time

    from trainstack.fencing.lease import heartbeat_interval
    from trainstack.render.pipeline import build_from_overrides

    overrides = [f"{key}={value}"] + (["hub.repo_id=a/b"] if key.startswith("hub.") else [])
    with cwd(scratch):
        try:
            run, _cmd = build_from_overrides(overrides)
        except ConfigErrors as err:
            check_refusal(err)
            assert key in err.render(), (key, value, [e.key for e in err.errors])  # itself, or in a rule with it
            return
    section, name = key.split(".")
    got = getattr(getattr(run, section), name)
    if name.endswith("_s"):
        assert 0 <= got <= threading.TIMEOUT_MAX, (key, got)
        time.localtime(time.time() + got)  # a deadline that can be shown and compared
        if name == "lease_ttl_s":
            assert heartbeat_interval(got) <= threading.TIMEOUT_MAX
    elif got is not None:
        assert got >= 0, (key, got)


def test_unreadable_checkpoint_is_named_before_the_trainer_fails(tmp_path, monkeypatch):
    """A file of the checkpoint a resume loads that cannot be read here (its permissions) is one
    message naming the file and the fix, from the relaunch's and exec's checks; before, the
    completeness test (sizes only) passed it and the trainer failed with a traceback. Tests run as
    root, so the permission is taken away through os.access."""
    from trainstack.run import spec as runspec
    from trainstack.preflight.checks import check_stored

    run_id = build_run_tree(tmp_path)
    run_dir = tmp_path / "runs" / run_id
    victim = next(p for p in (run_dir / "checkpoints" / "iter_0000003").rglob("*") if p.is_file())
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == victim and mode & os.R_OK
                        else real_access(p, mode, **kw))
    before = snapshot(tmp_path)
    with pytest.raises(ConfigErrors) as exc:
        check_stored(runspec.load(run_dir))
    text = exc.value.render()
    assert str(victim) in text and "permission denied" in text and "chmod" in text
    with cwd(tmp_path), pytest.raises(ConfigErrors) as exc:
        from trainstack.render.pipeline import build_from_overrides
        from trainstack.preflight.checks import preflight

        run, cmd = build_from_overrides(RELAUNCH)
        preflight(run, cmd, launching=True)
    assert str(victim) in exc.value.render()
    assert snapshot(tmp_path) == before
