"""slime's checkpoint layout, written so that a kill at any instant never yields a loadable half.

    <save>/latest_checkpointed_iteration.txt         rollout_id of the last COMPLETE save (written last)
    <save>/iter_{rollout_id:07d}/model.pt            weights
                                 optimizer.pt        optimizer state (absent with --no-save-optim)
                                 scheduler.pt        LR scheduler state
                                 rng.pt              python / numpy / torch RNG states
                                 meta.json           arch + rollout_id; written last inside the dir
    <save>/rollout/global_dataset_state_dict_{rollout_id}.pt   data cursor

Every file is tmp + fsync + os.replace + fsync(dir); the tracker is the commit point, so an
``iter_*`` newer than the tracker is never loaded. ``latest_complete`` needs only the stdlib.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Optional

from trainstack.checkpoints import TINY_COMPLETE, TRACKER, iter_name
from trainstack.checkpoints import is_complete as _is_complete

RELEASE = "release"


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


def atomic_torch_save(obj: Any, path: str) -> None:
    import io

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(buf.getvalue(), path)


def read_tracker(save_dir: str | None) -> Optional[str]:
    if not save_dir:
        return None
    try:
        with open(os.path.join(save_dir, TRACKER), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def is_complete(save_dir: str, rollout_id: int | str) -> bool:
    return _is_complete(save_dir, RELEASE if rollout_id == RELEASE else int(rollout_id), markers=(TINY_COMPLETE,))


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


def save_checkpoint(save_dir: str, rollout_id: int | str, state: TrainState, write_tracker: bool = True) -> str:
    """Write iter dir file by file (meta.json last), then the tracker atomically."""
    d = iter_dir(save_dir, rollout_id)
    os.makedirs(d, exist_ok=True)
    meta_path = os.path.join(d, "meta.json")
    if os.path.exists(meta_path):  # re-saving the same id: un-complete it first
        os.remove(meta_path)
    atomic_torch_save(state.model, os.path.join(d, "model.pt"))
    _slow_hook()
    if state.optimizer is not None:
        atomic_torch_save(state.optimizer, os.path.join(d, "optimizer.pt"))
        _slow_hook()
    if state.scheduler is not None:
        atomic_torch_save(state.scheduler, os.path.join(d, "scheduler.pt"))
    if state.rng is not None:
        atomic_torch_save(state.rng, os.path.join(d, "rng.pt"))
    _slow_hook()
    atomic_write_bytes(json.dumps(state.meta, indent=1, sort_keys=True).encode(), meta_path)
    if write_tracker:
        _slow_hook()
        atomic_write_bytes(str(rollout_id).encode(), os.path.join(save_dir, TRACKER))
    return d


def load_checkpoint(path: str, step: int | str | None = None, *, load_optim: bool = True,
                    load_rng: bool = True) -> tuple[int | str, TrainState]:
    """Load ``iter_{step}`` (default: the tracker's). Refuses anything incomplete."""
    import torch

    if step is None:
        step = read_tracker(path)
        if step is None:
            raise FileNotFoundError(f"{path}: no {TRACKER}")
        step = step if step == RELEASE else int(step)
    if not is_complete(path, step):
        raise FileNotFoundError(f"{iter_dir(path, step)} is missing or incomplete (no meta.json/model.pt)")
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
