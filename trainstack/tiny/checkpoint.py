"""slime's checkpoint layout, written so that a kill at any instant never yields a loadable half,
and a writer that lost its run's lease never publishes.

    <save>/latest_checkpointed_iteration.txt         rollout_id of the last PUBLISHED save (written last)
    <save>/iter_{rollout_id:07d}/model.pt            weights
                                 optimizer.pt        optimizer state (absent with --no-save-optim)
                                 scheduler.pt        LR scheduler state
                                 rng.pt              python / numpy / torch RNG states
                                 meta.json           arch + rollout_id
                                 manifest.json       every file of the checkpoint: size, sha256, writer epoch,
                                                     and the run's training identity (<save>/identity.json)
    <save>/rollout/global_dataset_state_dict_{rollout_id}.pt   data cursor (listed in the manifest)
    <save>/publish.jsonl                             one line per publish: iteration, lease epoch, pid

A save writes the iter dir and the data cursor under staging names, checks the fence
(trainstack/fencing/fence.py), writes the manifest (sizes and SHA-256 of every file), checks the fence,
renames the staging dir into place, checks the fence, renames the cursor into place and only then
moves the tracker: the tracker is the commit point, and only the current lease holder moves it.
A writer that stalls after its last check can still land a late rename: readers then decide by
the lease epochs in publish.jsonl (trainstack/storage/checkpoints.py), and the checksums catch a cursor
rewritten under them. What complete means is trainstack/storage/checkpoints.py's one test.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any, Optional

from trainstack.fencing.fence import Fence
from trainstack.storage import checkpoints as ck
from trainstack.storage.layout import MANIFEST, PUBLISH_LOG, TRACKER, iter_name

RELEASE = "release"
WRITER = "trainstack-tiny/1"
LEGACY_FILES = ("model.pt", "meta.json")  # a `release` dir (init_model) carries no manifest


def iter_dir(save_dir: str, rollout_id: int | str) -> str:
    name = RELEASE if rollout_id == RELEASE else iter_name(int(rollout_id))
    return os.path.join(save_dir, name)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _slow_hook() -> None:
    """TRAINSTACK_TINY_SLOW_SAVE=<seconds>: sleep between files so tests can kill mid-save."""
    delay = float(os.environ.get("TRAINSTACK_TINY_SLOW_SAVE", "0") or 0)
    if delay > 0:
        time.sleep(delay)


def atomic_write_bytes(data: bytes, path: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")


def torch_bytes(obj: Any) -> bytes:
    import io

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def atomic_torch_save(obj: Any, path: str) -> None:
    atomic_write_bytes(torch_bytes(obj), path)


def read_tracker(save_dir: str | None) -> Optional[str]:
    return ck.read_tracker(save_dir) if save_dir else None


def is_complete(save_dir: str, rollout_id: int | str) -> bool:
    if rollout_id == RELEASE:
        d = iter_dir(save_dir, RELEASE)
        return all(os.path.exists(os.path.join(d, f)) for f in LEGACY_FILES)
    return ck.is_complete(save_dir, int(rollout_id))


def latest_complete(save_dir: str | os.PathLike) -> int | None:
    """The rollout_id the tracker names, if that ``iter_*`` is complete; else None.

    Reusable by launchers: ``None`` means "a fresh start", an int N means "resume at N+1".
    """
    t = read_tracker(os.fspath(save_dir))
    if t is None or not t.isdigit():
        return None
    n = int(t)
    return n if is_complete(os.fspath(save_dir), n) else None


@dataclass
class TrainState:
    """Everything a resume restores besides the data cursor."""

    model: dict
    optimizer: Optional[dict]
    scheduler: Optional[dict]
    rng: Optional[dict]
    meta: dict


def capture_rng() -> dict:
    import random

    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def restore_rng(state: dict) -> None:
    import random

    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def _write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _state_files(state: TrainState) -> list[tuple[str, bytes]]:
    files = [("model.pt", torch_bytes(state.model))]
    if state.optimizer is not None:
        files.append(("optimizer.pt", torch_bytes(state.optimizer)))
    if state.scheduler is not None:
        files.append(("scheduler.pt", torch_bytes(state.scheduler)))
    if state.rng is not None:
        files.append(("rng.pt", torch_bytes(state.rng)))
    # meta.json names the other files: without a manifest, the completeness test still knows them
    meta = {**state.meta, "files": sorted(name for name, _ in files)}
    files.append(("meta.json", json.dumps(meta, indent=1, sort_keys=True).encode()))
    return files


def save_checkpoint(save_dir: str, rollout_id: int | str, state: TrainState, cursor: bytes | None = None,
                    fence: Fence | None = None) -> str:
    """Stage, fence, publish (see the module docstring). Raises trainstack.fencing.fence.Fenced, having
    published nothing, when the run's lease was lost."""
    os.makedirs(save_dir, exist_ok=True)
    final = iter_dir(save_dir, rollout_id)
    staging = os.path.join(save_dir, f".{os.path.basename(final)}.staging.{os.getpid()}.{secrets.token_hex(3)}")
    os.makedirs(staging)
    files = _state_files(state)
    for name, data in files:
        _write_file(os.path.join(staging, name), data)
        _slow_hook()
    if rollout_id == RELEASE:  # initial weights (init_model): no run, no lease
        os.replace(staging, final)
        atomic_write_bytes(RELEASE.encode(), os.path.join(save_dir, TRACKER))
        return final
    n = int(rollout_id)
    hashes = {f"{iter_name(n)}/{name}": hashlib.sha256(data).hexdigest() for name, data in files}
    sizes = {f"{iter_name(n)}/{name}": len(data) for name, data in files}
    cursor_tmp = None
    if cursor is not None:  # staged like the iter dir: renamed into place only after the last fence check
        cursor_tmp = os.path.join(save_dir, f"{ck.data_cursor(n)}.staging.{os.getpid()}.{secrets.token_hex(3)}")
        atomic_write_bytes(cursor, cursor_tmp)
        sizes[ck.data_cursor(n)] = len(cursor)
        hashes[ck.data_cursor(n)] = hashlib.sha256(cursor).hexdigest()
    _check(fence, cursor_tmp)
    manifest = ck.Manifest(n, dict(sorted(sizes.items())), WRITER, fence.epoch if fence else None,
                           dict(sorted(hashes.items())), ck.read_identity(save_dir))
    _write_file(os.path.join(staging, MANIFEST), manifest.to_json().encode())
    _fsync_dir(staging)
    _slow_hook()
    _check(fence, cursor_tmp)
    if os.path.exists(final):  # an unpublished leftover of this id (a killed save): never mixed with this one
        ck.move_aside(save_dir, [os.path.basename(final)])
    os.replace(staging, final)
    _fsync_dir(save_dir)
    _slow_hook()
    _check(fence, cursor_tmp)
    if cursor_tmp is not None:
        os.replace(cursor_tmp, os.path.join(save_dir, ck.data_cursor(n)))
    _stall_hook(save_dir, n)
    atomic_write_bytes(str(n).encode(), os.path.join(save_dir, TRACKER))
    with open(os.path.join(save_dir, PUBLISH_LOG), "a", encoding="utf-8") as f:
        f.write(json.dumps({"iter": n, "epoch": fence.epoch if fence else None, "pid": os.getpid(),
                            "time": time.time()}) + "\n")
    return final


def _stall_hook(save_dir: str, rollout_id: int) -> None:
    """TRAINSTACK_TINY_STALL_PUBLISH=<rollout_id>: block after the last fence check, before the
    tracker rename, until `<save>/.release-stall` exists: a deterministic stalled write (a rename
    held up past the lease TTL) for tests of what readers do with its late landing."""
    if os.environ.get("TRAINSTACK_TINY_STALL_PUBLISH", "") != str(rollout_id):
        return
    open(os.path.join(save_dir, ".stalled"), "w").close()
    while not os.path.exists(os.path.join(save_dir, ".release-stall")):
        time.sleep(0.05)


def _check(fence: Fence | None, staged: str | None = None) -> None:
    if fence is None:
        return
    try:
        fence.check()
    except Exception:
        if staged is not None:  # a fenced writer leaves no staged cursor behind
            try:
                os.unlink(staged)
            except OSError:
                pass
        raise


def load_checkpoint(path: str, step: int | str | None = None, *, load_optim: bool = True,
                    load_rng: bool = True) -> tuple[int | str, TrainState]:
    """Load ``iter_{step}`` (default: the tracker's). Refuses anything that fails verification."""
    import torch

    if step is None:
        step = read_tracker(path)
        if step is None:
            raise FileNotFoundError(f"{path}: no {TRACKER}")
        step = step if step == RELEASE else int(step)
    # verified: a manifest with every file's size and SHA-256 (none is a failed verification, docs/resume.md)
    why = None if step == RELEASE else ck.problem_of(path, int(step), verify=True)
    if why is not None or not is_complete(path, step):
        raise FileNotFoundError(f"{iter_dir(path, step)} is not a complete checkpoint: {why or 'no model.pt/meta.json'}")
    d = iter_dir(path, step)

    def opt(name: str, want: bool):
        p = os.path.join(d, name)
        return torch.load(p, weights_only=False) if want and os.path.exists(p) else None

    with open(os.path.join(d, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    state = TrainState(model=torch.load(os.path.join(d, "model.pt"), weights_only=True),
                       optimizer=opt("optimizer.pt", load_optim), scheduler=opt("scheduler.pt", load_optim),
                       rng=opt("rng.pt", load_rng), meta=meta)
    return step, state
