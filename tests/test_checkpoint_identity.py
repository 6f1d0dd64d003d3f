"""A checkpoint's identity and proof travel with it (issue #36): no checkpoint loads without its
manifest, a changed config is refused even when the run's records are gone, a run that ever
published a checkpoint never restarts from zero without resume.mode=fresh, and a checkpoint that
fails to load is set aside once, never a crash loop (docs/resume.md)."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, SMALL_BATCH, run_py
from trainstack.storage.checkpoints import Manifest, inspect, problem_of, record_load_failure, write_identity
from trainstack.errors import ConfigErrors
from trainstack.run.resume import FRESH, RESUME, plan, training_identity
from trainstack.run.rundir import RunDir
from trainstack.storage.layout import LOAD_FAILURES, PUBLISH_LOG, TRACKER
from trainstack.config.schema import HubSpec, ResumeSpec

ARGS = {"num_rollout": 10, "lr": 1e-3, "seed": 1}


class Run:
    def __init__(self, run_dir: Path, mode: str = "auto", allow=(), **args):
        self.run_id, self.run_dir, self.inputs = "r1", str(run_dir), {}
        self.args = {"save": str(run_dir / "checkpoints"), **ARGS, **args}
        self.resume, self.hub = ResumeSpec(mode=mode, allow_changes=list(allow)), HubSpec()


def train(run_dir: Path, n: int, epoch: int = 1) -> Path:
    """What the tiny trainer leaves after n checkpoints, under a launcher that wrote the records."""
    from trainstack.tiny.checkpoint import TrainState, save_checkpoint

    save = run_dir / "checkpoints"
    run = Run(run_dir)
    write_identity(str(save), training_identity(run))

    class Epoch:
        def __init__(self, e):
            self.epoch = e

        def check(self):
            pass

    for i in range(n):
        state = TrainState(model={"w": [i] * 64}, optimizer={"o": i}, scheduler={"s": i}, rng={"r": i}, meta={"i": i})
        save_checkpoint(str(save), i, state, cursor=f"cursor{i}".encode(), fence=Epoch(epoch))  # type: ignore[arg-type]
    rd = RunDir(run_dir)
    (run_dir / "args.json").write_text(json.dumps(run.args))
    (run_dir / "spec.json").write_text(json.dumps({"run_id": "r1", "args": run.args}))
    rd.event("resume", from_rollout=n - 1, checkpoint=n - 2)
    rd.update_status(state="finished", last_checkpoint=n - 1)
    return save


def flip(path: Path, where: str = "middle", n: int = 16) -> None:
    data = bytearray(path.read_bytes())
    start = {"middle": len(data) // 2, "end": max(len(data) - n, 0), "start": 0}[where]
    for i in range(start, min(start + n, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def it(save: Path, n: int) -> Path:
    return save / f"iter_{n:07d}"


def test_a_corrupt_checkpoint_whose_manifest_is_gone_is_never_loaded(tmp_path):
    """Issue: flip 64 bytes of the newest model.pt, delete its manifest -> "resuming from rollout 3"."""
    save = train(tmp_path, 4)
    flip(it(save, 3) / "model.pt", n=64)
    (it(save, 3) / "manifest.json").unlink()
    rp = plan(Run(tmp_path), RunDir(tmp_path))
    assert rp.action == RESUME and rp.checkpoint.latest_complete == 2
    assert "has no manifest.json, so its files cannot be verified" in rp.checkpoint.problem


def test_the_crash_loop_case_falls_back_and_the_tiny_loader_verifies(tmp_path):
    """Issue: publish.jsonl and a manifest deleted, 16 bytes flipped near the end of rng.pt: every
    relaunch loaded it and died in torch.load."""
    from trainstack.tiny.checkpoint import load_checkpoint

    save = train(tmp_path, 3)
    (save / PUBLISH_LOG).unlink()
    (it(save, 2) / "manifest.json").unlink()
    flip(it(save, 2) / "rng.pt", "end")
    assert plan(Run(tmp_path), RunDir(tmp_path)).checkpoint.latest_complete == 1
    with pytest.raises(FileNotFoundError, match="cannot be verified"):  # the loader itself verifies too
        load_checkpoint(str(save), 2)


def test_a_changed_config_is_refused_from_the_checkpoint_alone(tmp_path):
    """Issue: delete args.json spec.json config.yaml command.*, relaunch with another lr -> it resumed."""
    save = train(tmp_path, 2)
    for name in ("args.json", "spec.json"):
        (tmp_path / name).unlink()
    m = Manifest.read(str(save), 1)
    assert m is not None and m.identity is not None and m.identity["args"]["lr"] == 1e-3
    with pytest.raises(ConfigErrors) as exc:
        plan(Run(tmp_path, lr=5e-3), RunDir(tmp_path))
    err = exc.value.errors[0]
    assert err.related == {"lr": "0.001 -> 0.005"} and "resume.allow_changes=[lr]" in err.fix
    assert plan(Run(tmp_path, allow=["lr"], lr=5e-3), RunDir(tmp_path)).action == RESUME
    assert plan(Run(tmp_path), RunDir(tmp_path)).action == RESUME  # the same config resumes


@pytest.mark.parametrize("damage", ["rm iter_*", "truncate every rng.pt"])
def test_a_run_that_published_never_restarts_from_zero(tmp_path, damage):
    save = train(tmp_path, 3)
    for n in range(3):
        if damage == "rm iter_*":
            for f in it(save, n).iterdir():
                f.unlink()
            it(save, n).rmdir()
        else:
            os.truncate(it(save, n) / "rng.pt", 10)
    with pytest.raises(ConfigErrors) as exc:
        plan(Run(tmp_path), RunDir(tmp_path))
    err = exc.value.errors[0]
    found = " | ".join(err.related.values())
    assert "no checkpoint in" in err.problem and "resume.mode=fresh" in err.fix
    assert "publish.jsonl lists 3 publishes" in found and "up to rollout 2" in found
    if damage != "rm iter_*":
        assert "iter_0000002: iter_0000002/rng.pt has 10 bytes" in found
    rp = plan(Run(tmp_path, mode="fresh"), RunDir(tmp_path))
    assert rp.action == FRESH and rp.discard and "moved aside" in rp.describe()


def test_resume_mode_fresh_moves_everything_aside_and_later_launches_resume_the_new_run(tmp_path):
    from trainstack.storage.checkpoints import discard_all
    from trainstack.run.published_history import FRESH_START, evidence

    save = train(tmp_path, 2)
    moved = discard_all(str(save))
    assert {Path(m).name.split(".")[0] for m in moved} >= {"iter_0000000", "iter_0000001", "publish", "rollout"}
    rd = RunDir(tmp_path)
    rd.event("launch", **{FRESH_START: True})
    rd.update_status(state="running", last_checkpoint=None)
    assert evidence(rd, str(save), inspect(str(save), verify=True)) == []  # the old run's records are history
    assert plan(Run(tmp_path), rd).action == FRESH


def test_a_checkpoint_that_fails_to_load_is_set_aside_once(tmp_path):
    save = train(tmp_path, 4)
    record_load_failure(str(save), 3, "RuntimeError: bad pickle")
    rp = plan(Run(tmp_path), RunDir(tmp_path))
    assert rp.action == RESUME and rp.checkpoint.latest_complete == 2 and "failed to load" in rp.checkpoint.problem
    record_load_failure(str(save), 2, "RuntimeError: out of memory")  # the previous one fails too
    with pytest.raises(ConfigErrors) as exc:
        plan(Run(tmp_path), RunDir(tmp_path))
    assert "failed to load one after the other" in exc.value.errors[0].problem
    assert LOAD_FAILURES in exc.value.errors[0].fix


def test_a_publish_after_a_load_failure_makes_it_history(tmp_path):
    save = train(tmp_path, 2)
    record_load_failure(str(save), 1, "x")
    with open(save / PUBLISH_LOG, "a") as f:  # training went on from iter 0 and published again
        f.write(json.dumps({"iter": 1, "epoch": 2, "pid": 1, "time": 4e9}) + "\n")
    assert inspect(str(save), verify=True).load_failed == ()


def test_megatron_checkpoints_get_a_manifest_with_identity_when_published(tmp_path):
    """The fenced tracker write (trainstack/fencing/tracker_fence.py) describes what Megatron finalized."""
    from trainstack.fencing.tracker_fence import publish_tracker

    save = tmp_path / "checkpoints"
    write_identity(str(save), training_identity(Run(tmp_path)))
    d = it(save, 19)
    (d / "mp_rank_00").mkdir(parents=True)
    (d / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"w" * 100)
    (d / ".metadata").write_bytes(b"m")
    (d / "common.pt").write_bytes(b"c")
    assert problem_of(str(save), 19, verify=True) is not None  # no manifest: unverifiable
    publish_tracker(str(save / TRACKER), "19", None)
    m = Manifest.read(str(save), 19)
    assert m is not None and m.writer == "megatron" and m.identity["args"]["lr"] == 1e-3
    assert set(m.files) == set(m.sha256) == {"iter_0000019/mp_rank_00/model_optim_rng.pt", "iter_0000019/.metadata",
                                            "iter_0000019/common.pt"}
    assert problem_of(str(save), 19, verify=True) is None
    flip(d / "mp_rank_00" / "model_optim_rng.pt")
    assert "does not match its checksum" in problem_of(str(save), 19, verify=True)


# -------------------------------------------------------------------------------------------------
# Property: corruption kind x which record is missing
# -------------------------------------------------------------------------------------------------
KINDS = ["flip", "truncate", "delete", "no manifest", "rmdir", "none"]
FILES = ["model.pt", "optimizer.pt", "scheduler.pt", "rng.pt", "meta.json", "cursor"]
RECORDS = ["publish.jsonl", "tracker", "status.json", "events.jsonl", "args.json", "spec.json", "identity.json"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    base = tmp_path_factory.mktemp("trained")
    train(base, 3)
    return base


def _damage(save: Path, n: int, kind: str, victim: str) -> bool:
    """Damage iter_n; True when it can no longer be trusted."""
    path = save / "rollout" / f"global_dataset_state_dict_{n}.pt" if victim == "cursor" else it(save, n) / victim
    if kind == "flip":
        flip(path, "start", 4)
    elif kind == "truncate":
        os.truncate(path, max(path.stat().st_size - 3, 0))
    elif kind == "delete":
        path.unlink()
    elif kind == "no manifest":
        (it(save, n) / "manifest.json").unlink()
    elif kind == "rmdir":
        for f in it(save, n).iterdir():
            f.unlink()
        it(save, n).rmdir()
    return kind != "none"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(KINDS), st.sampled_from(FILES)), max_size=4),
       missing=st.sets(st.sampled_from(RECORDS)), lr=st.sampled_from([1e-3, 2e-3]))
def test_any_corruption_with_any_record_missing(trained, tmp_path_factory, damage, missing, lr):
    """Whatever is damaged and whichever records are gone: the plan resumes only from an undamaged,
    verified checkpoint of the same config, refuses with what it found, or starts fresh only when no
    record of a publish is left."""
    import shutil

    run_dir = tmp_path_factory.mktemp("run")
    shutil.copytree(trained, run_dir, dirs_exist_ok=True)
    save = run_dir / "checkpoints"
    bad: set[int] = set()
    for n, kind, victim in damage:
        if it(save, n).exists() and n not in bad and _damage(save, n, kind, victim):
            bad.add(n)
    paths = {"publish.jsonl": save / PUBLISH_LOG, "tracker": save / TRACKER, "identity.json": save / "identity.json"}
    for rec in missing:
        paths.get(rec, run_dir / rec).unlink(missing_ok=True)
    try:
        rp = plan(Run(run_dir, lr=lr), RunDir(run_dir))
    except ConfigErrors as exc:
        err = exc.errors[0]
        if err.key == "run_id":  # a changed config: refused from any surviving record, the checkpoint's own first
            assert lr != 1e-3 and "lr" in err.related
        else:
            assert err.key == "resume" and err.related and "resume.mode=fresh" in err.fix
        return
    assert lr == 1e-3 or rp.action == FRESH  # a changed lr never resumes
    if rp.action == RESUME:
        n = rp.checkpoint.latest_complete
        assert n not in bad and problem_of(str(save), n, verify=True) is None
    else:  # a fresh start: nothing says the run ever published
        assert rp.action == FRESH
        assert {"publish.jsonl", "tracker", "status.json", "events.jsonl"} <= missing
        assert not any((it(save, n) / "manifest.json").exists() for n in range(3))


@pytest.mark.slow
def test_end_to_end_load_failure_fallback_then_no_silent_restart(tmp_path):
    """Through `python run.py`: a published checkpoint that passes verification but will not load is
    set aside in the same launch and the previous one trains on; then, every iter_* deleted, the
    relaunch is refused naming what it found; resume=fresh starts over with the old ones kept."""
    def launch(*extra):
        return run_py(f"paths.runs_root={tmp_path}/runs", f"paths.data_root={tmp_path}/data", "run_id=e2e",
                      "args.save_interval=1", *SMALL_BATCH, *extra, cwd=tmp_path)

    assert launch("env.num_rollout=2").returncode == 0
    rd = tmp_path / "runs" / "e2e"
    save = rd / "checkpoints"
    assert Manifest.read(str(save), 1).identity["run_id"] == "e2e"
    d = it(save, 1)
    (d / "rng.pt").write_bytes(b"not a torch file")  # written wrong, manifest and all: only loading can tell
    m = json.loads((d / "manifest.json").read_text())
    m["sha256"]["iter_0000001/rng.pt"] = hashlib.sha256(b"not a torch file").hexdigest()
    m["files"]["iter_0000001/rng.pt"] = 16
    (d / "manifest.json").write_text(json.dumps(m))
    res = launch("env.num_rollout=3")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "cannot load checkpoint iter_0000001" in res.stdout + res.stderr and "resuming from rollout 0" in res.stderr
    events = [json.loads(x) for x in (rd / "events.jsonl").read_text().splitlines()]
    assert {"event": "checkpoint_load_failed", "checkpoint": 1, "fallback": 0}.items() <= \
        next(e for e in events if e["event"] == "checkpoint_load_failed").items()
    assert (save / TRACKER).read_text() == "2" and Manifest.read(str(save), 1).sha256["iter_0000001/rng.pt"] != \
        hashlib.sha256(b"not a torch file").hexdigest()  # iter 1 trained again, good this time
    for p in save.glob("iter_*"):
        for f in p.iterdir():
            f.unlink()
        p.rmdir()
    refused = launch("env.num_rollout=3")
    assert refused.returncode == 2 and "publish.jsonl lists" in refused.stderr and "Traceback" not in refused.stderr
    fresh = launch("env.num_rollout=1", "resume=fresh")
    assert fresh.returncode == 0 and "resume.mode=fresh: starting over" in fresh.stderr
    assert (save / TRACKER).read_text() == "0" and any((save / ".incomplete").glob("publish.jsonl.*"))


def test_a_megatron_load_failure_is_recorded_for_the_run_s_own_checkpoint_only(tmp_path):
    """The site hook also wraps Megatron's load_checkpoint; slime binds the wrapped one because it
    imports the name from Megatron's module (checked in slime's own source, the submodule)."""
    import ast
    import types

    from trainstack.storage.checkpoints import load_failures
    from trainstack.fencing.tracker_fence import MEGATRON_CONTRACT, MEGATRON_MODULE, patch

    src = (ROOT / "slime" / "slime" / "backends" / "megatron_utils" / "checkpoint.py").read_text()
    imports = {(n.module, a.name) for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert (MEGATRON_MODULE, MEGATRON_CONTRACT["loader"]) in imports

    save = tmp_path / "checkpoints"
    save.mkdir()
    (save / TRACKER).write_text("7")
    margs = types.SimpleNamespace(load=str(save), save=str(save), ref_load=str(tmp_path / "base"))

    def load_checkpoint(ddp_model, optimizer, opt_param_scheduler, load_arg="load", **kw):
        raise RuntimeError("PytorchStreamReader failed reading zip archive")

    ns = {"open_file": open, "load_checkpoint": load_checkpoint, "get_args": lambda: margs}
    assert patch(ns) and patch(ns)  # idempotent: wrapped once
    with pytest.raises(RuntimeError, match="zip archive"):
        ns["load_checkpoint"](None, None, None, load_arg="ref_load")  # the base weights: not ours
    assert load_failures(str(save)) == {}
    with pytest.raises(RuntimeError, match="zip archive"):
        ns["load_checkpoint"](ddp_model=None, optimizer=None, opt_param_scheduler=None)
    assert load_failures(str(save)) == {7: "RuntimeError: PytorchStreamReader failed reading zip archive"}
