"""The two facts the Hub sync relies on, each behind one function so that a stronger implementation
(checkpoint manifests, a stdlib epoch check) replaces it in one place."""
from __future__ import annotations

from typing import Any

from trainstack.checkpoints import is_complete


def checkpoint_complete(save_dir: str, iteration: int) -> bool:
    """Is `iter_<iteration>` under --save written to the end (never push, or resume from, a partial one)."""
    return is_complete(save_dir, iteration)


def epoch_is_current(lease: Any) -> bool:
    """Does this process still hold the run (a superseded writer must not push)."""
    try:
        return bool(lease.holds())
    except OSError:
        return False
