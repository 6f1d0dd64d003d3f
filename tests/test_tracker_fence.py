"""slime's Megatron checkpoints under the fencing rule: trainstack's wrapper around Megatron's
tracker write (trainstack/fencing/tracker_fence.py).

Against Megatron's own code: where Megatron-LM's `megatron/training/checkpointing.py` at the pinned
commit is present (TRAINSTACK_MEGATRON_SRC: that file, or a Megatron-LM checkout), its real
`save_checkpoint` finalizer, the code that writes `latest_checkpointed_iteration.txt`, is extracted
with `ast` and run with the patched `open_file`. CI cannot fetch Megatron: there the recorded contract
(MEGATRON_CONTRACT) is checked against the wrapper, and a finalizer of the recorded shape is run
instead (docs/resume.md says so).
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from trainstack.storage.checkpoints import inspect, plan_recovery
from trainstack.fencing.fence import Fence, Fenced
from trainstack.fencing.lease import Lease
from trainstack.storage.layout import PUBLISH_LOG, TRACKER
from trainstack.fencing.tracker_fence import MEGATRON_CONTRACT, patch, trainer_pythonpath

C = MEGATRON_CONTRACT


def _megatron_source() -> str | None:
    where = os.environ.get("TRAINSTACK_MEGATRON_SRC", "")
    if not where:
        return None
    p = Path(where)
    if p.is_dir():
        p = p / "megatron" / "training" / "checkpointing.py"
    return p.read_text(encoding="utf-8")


def _finalizer_from(src: str) -> ast.FunctionDef:
    """Megatron's finalizer that writes the tracker: the iter_finalize_fn of save_checkpoint that calls
    the opener with the tracker's name."""
    tree = ast.parse(src)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == C["function"])
    found = [n for n in ast.walk(fn) if isinstance(n, ast.FunctionDef) and n.name == C["finalizer"]
             and any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == C["opener"]
                     for c in ast.walk(n))]
    assert len(found) == 1, f"{C['function']} has {len(found)} tracker-writing {C['finalizer']}s"
    return found[0]


RECORDED_SHAPE = f'''
def {C["finalizer"]}():
    prev_iteration = 0
    with {C["opener"]}(tracker_filename, {C["write_mode"]!r}) as f:
        f.write("release" if release else str(iteration))
'''


def _finalizer(save_dir: Path, iteration: int, namespace_patch) -> Any:
    """Megatron's finalizer (the real one where its source is here, else the recorded shape) compiled
    as a module-level function whose free names (the closure of save_checkpoint) are globals."""
    src = _megatron_source()
    node = _finalizer_from(src) if src is not None else ast.parse(RECORDED_SHAPE).body[0]
    ns: dict[str, Any] = {
        C["opener"]: lambda path, mode="r", *a, **k: open(path, mode, *a, **k),  # msc_utils.open_file, local fs
        "tracker_filename": os.path.join(str(save_dir), C["tracker_file"]),  # get_checkpoint_tracker_filename
        "release": False, "iteration": iteration, "args": _Args(), "tensor_rank": 0, "pipeline_rank": 0,
        "mpu": _Mpu(), "print_rank_0": lambda *a, **k: None, "append_to_progress_log": lambda *a, **k: None,
        "os": os, "shutil": None, "threading": None, "get_checkpoint_name": None,
    }
    import datetime

    ns["datetime"] = datetime.datetime
    namespace_patch(ns)
    exec(compile(ast.Module([node], []), "<megatron finalizer>", "exec"), ns)  # noqa: S102 - Megatron's code
    return ns[C["finalizer"]]


class _Args:
    save = "<save>"
    save_retain_interval = None
    log_progress = False
    async_save = False


class _Mpu:
    @staticmethod
    def get_tensor_model_parallel_rank() -> int:
        return 0

    get_pipeline_model_parallel_rank = get_tensor_model_parallel_rank

    @staticmethod
    def get_tensor_model_parallel_world_size() -> int:
        return 1

    get_pipeline_model_parallel_world_size = get_tensor_model_parallel_world_size


def _fence(lease: Lease) -> Fence:
    return Fence(str(lease.path), lease.record.token, lease.record.epoch, 0.1)


def _complete(save: Path, n: int) -> None:
    d = save / f"iter_{n:07d}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "common.pt").write_bytes(b"x")  # Megatron's last-written file (torch format)
    (d / ".metadata").write_bytes(b"x")


def _publishes(save: Path) -> list[dict]:
    return [json.loads(x) for x in (save / PUBLISH_LOG).read_text().splitlines()]


def test_megatron_finalizer_publishes_atomically_with_its_epoch(tmp_path):
    lease = Lease.acquire(tmp_path / "lease.json", ttl_s=600)
    save = tmp_path / "checkpoints"
    _complete(save, 4)
    fin = _finalizer(save, 4, lambda ns: patch(ns, _fence(lease)))
    fin()
    assert (save / TRACKER).read_text() == "4"
    assert _publishes(save) == [{**_publishes(save)[0], "iter": 4, "epoch": lease.record.epoch, "writer": "megatron"}]
    assert [p.name for p in save.iterdir() if ".tmp." in p.name] == []  # written by rename: no temp left


def test_a_superseded_megatron_writer_publishes_nothing(tmp_path):
    old = Lease.acquire(tmp_path / "lease.json", ttl_s=600)
    save = tmp_path / "checkpoints"
    _complete(save, 39)
    fin_old = _finalizer(save, 7, lambda ns: patch(ns, _fence(old)))
    old.release()
    new = Lease.acquire(tmp_path / "lease.json", ttl_s=600)
    _finalizer(save, 39, lambda ns: patch(ns, _fence(new)))()
    with pytest.raises(Fenced):  # unpatched, Megatron would have written 7 over 39
        fin_old()
    assert (save / TRACKER).read_text() == "39"
    assert [p["epoch"] for p in _publishes(save)] == [new.record.epoch]


def test_unpatched_megatron_rolls_the_tracker_back(tmp_path):
    """The failure the wrapper exists for: Megatron's own write, after the lease moved on, lands."""
    save = tmp_path / "checkpoints"
    save.mkdir()
    (save / TRACKER).write_text("39")
    _finalizer(save, 7, lambda ns: None)()
    assert (save / TRACKER).read_text() == "7"


def test_a_stalled_megatron_rename_that_lands_late_is_repaired_never_followed(tmp_path):
    """The race of the issue, deterministic: epoch 1's last fence check passes, its rename stalls
    while epoch 2 takes over and publishes 8..39 through the same Megatron code, then it lands."""
    save = tmp_path / "checkpoints"
    for n in (6, 7, 8, 39):
        _complete(save, n)
    old = Lease.acquire(tmp_path / "lease.json", ttl_s=600)
    _finalizer(save, 6, lambda ns: patch(ns, _fence(old)))()
    holder: dict[str, Lease] = {}

    class StallingFence(Fence):
        calls = 0

        def check(self) -> None:
            super().check()
            StallingFence.calls += 1
            if StallingFence.calls == 2:  # after the last check, before the rename: the NFS hang
                old.release()
                holder["new"] = Lease.acquire(tmp_path / "lease.json", ttl_s=600)
                for n in (8, 39):
                    _finalizer(save, n, lambda ns: patch(ns, _fence(holder["new"])))()
                assert (save / TRACKER).read_text() == "39"

    stalled = StallingFence(str(old.path), old.record.token, old.record.epoch, 0.1)
    _finalizer(save, 7, lambda ns: patch(ns, stalled))()
    assert (save / TRACKER).read_text() == "7"  # the race happened: the late rename landed
    assert [p["epoch"] for p in _publishes(save)] == [1, 2, 2, 1]
    state = inspect(str(save))
    assert state.latest_complete == 39 and state.unpublished == ()
    assert "epoch 2 published iter_0000039" in state.problem
    rec = plan_recovery(state)
    assert rec is not None and rec.move_aside == () and rec.tracker == 39
    assert rec.apply(str(save)) == []  # nothing moved aside
    assert (save / TRACKER).read_text() == "39"


def test_other_opens_pass_through(tmp_path):
    seen: list[tuple[str, str]] = []
    ns: dict[str, Any] = {"open_file": lambda p, mode="r", *a, **k: seen.append((str(p), mode)) or open(p, mode)}
    assert patch(ns) and patch(ns)  # idempotent: wrapped once
    (tmp_path / TRACKER).write_text("3")
    with ns["open_file"](tmp_path / TRACKER, "r") as f:  # save_retain_interval reads the old tracker
        assert f.read() == "3"
    with ns["open_file"](tmp_path / "other.txt", "w") as f:
        f.write("x")
    assert seen == [(str(tmp_path / TRACKER), "r"), (str(tmp_path / "other.txt"), "w")]
    assert not patch({})  # nothing to wrap: the caller says the writes are unfenced


def test_a_failed_write_publishes_nothing(tmp_path):
    ns: dict[str, Any] = {"open_file": open}
    patch(ns)
    (tmp_path / TRACKER).write_text("5")
    with pytest.raises(RuntimeError):
        with ns["open_file"](str(tmp_path / TRACKER), "w") as f:
            f.write("6")
            raise RuntimeError("disk full")
    assert (tmp_path / TRACKER).read_text() == "5" and not (tmp_path / PUBLISH_LOG).exists()


def test_recorded_contract_matches_the_wrapper():
    """What CI checks in place of Megatron's source: the wrapper patches the recorded opener, matches
    the recorded tracker name and mode, and the recorded shape of the finalizer is fenced by it."""
    from trainstack.fencing import tracker_fence

    assert C["opener"] == tracker_fence.PATCHED_GLOBAL and C["tracker_file"] == TRACKER
    assert C["module"] == tracker_fence.MEGATRON_MODULE == "megatron.training.checkpointing"
    node = ast.parse(RECORDED_SHAPE).body[0]
    assert isinstance(node, ast.FunctionDef) and node.name == C["finalizer"]


def test_the_pinned_megatron_source_still_matches_the_contract():
    src = _megatron_source()
    if src is None:
        pytest.skip("TRAINSTACK_MEGATRON_SRC is not set (Megatron-LM is not fetched in CI; the recorded "
                    "contract is checked by test_recorded_contract_matches_the_wrapper)")
    tree = ast.parse(src)
    imported = {a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert imported.get(C["opener"]) == C["opener_imported_from"]
    fin = _finalizer_from(src)
    assert hashlib.sha256(ast.unparse(fin).encode()).hexdigest() == C["finalizer_sha256"], \
        "Megatron's tracker finalizer changed: re-read it and update MEGATRON_CONTRACT"
    calls = [ast.unparse(c) for c in ast.walk(fin) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
             and c.func.id == C["opener"]]
    assert f"{C['opener']}(tracker_filename, {C['write_mode']!r})" in calls
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == C["function"])
    assigns = [ast.unparse(a) for a in ast.walk(fn) if isinstance(a, ast.Assign)]
    assert f"tracker_filename = {C['tracker_name_function']}(save_dir)" in assigns
    name_fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == C["tracker_name_function"])
    assert repr(C["tracker_file"]) in ast.unparse(name_fn)


FAKE_MEGATRON = '''
import os
def open_file(path, mode="r"):  # megatron.core.msc_utils.open_file on a local filesystem
    return open(path, mode)
def save(save_dir, iteration):
    with open_file(os.path.join(save_dir, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))
'''


def test_the_site_hook_fences_megatron_in_a_trainer_process(tmp_path):
    """The path into the trainer: PYTHONPATH as the guard sets it, a process that imports
    megatron.training.checkpointing (here a stand-in with the same global) and saves."""
    pkg = tmp_path / "lib" / "megatron" / "training"
    pkg.mkdir(parents=True)
    for d in (pkg.parent, pkg):
        (d / "__init__.py").write_text("")
    (pkg / "checkpointing.py").write_text(FAKE_MEGATRON)
    save = tmp_path / "checkpoints"
    save.mkdir()
    lease = Lease.acquire(tmp_path / "lease.json", ttl_s=600)
    code = textwrap.dedent(f"""
        from megatron.training.checkpointing import save
        save({str(save)!r}, 12)
        """)
    env = {**os.environ, "PYTHONPATH": trainer_pythonpath(str(tmp_path / "lib")), **_fence(lease).to_env()}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    assert (save / TRACKER).read_text() == "12" and _publishes(save)[-1]["epoch"] == lease.record.epoch
    lease.release()
    Lease.acquire(tmp_path / "lease.json", ttl_s=600)  # superseded: the same process now publishes nothing
    out = subprocess.run([sys.executable, "-c", code.replace("12", "13")], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0 and "Fenced" in out.stderr
    assert (save / TRACKER).read_text() == "12" and len(_publishes(save)) == 1
    env.pop("TRAINSTACK_LEASE_FILE")  # no lease: Megatron's own write, unchanged
    subprocess.run([sys.executable, "-c", code.replace("12", "14")], env=env, check=True, timeout=60)
    assert (save / TRACKER).read_text() == "14" and len(_publishes(save)) == 1
