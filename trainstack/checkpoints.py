"""Find a run's latest *complete* checkpoint in slime's layout.

slime resumes from whatever `latest_checkpointed_iteration.txt` names. trainstack trusts that
iteration only if its `iter_XXXXXXX/` is complete: Megatron torch_dist writes `.metadata`
(and `common.pt`) last; the tiny trainer writes `meta.json` last. Lookup is O(1) in the
number of `iter_*` directories: the tracker names the candidate.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from trainstack.rundir.layout import TRACKER, iter_name

# Files whose presence means an iteration directory was written to the end, per writer.
TINY_COMPLETE = ("meta.json", "model.pt")  # the tiny trainer writes meta.json last
COMPLETION_MARKERS = ((".metadata",), TINY_COMPLETE, ("common.pt",))

__all__ = ["TRACKER", "iter_name", "is_complete", "inspect", "CheckpointState", "COMPLETION_MARKERS", "TINY_COMPLETE"]


@dataclass(frozen=True)
class CheckpointState:
    save_dir: str
    tracker: int | None  # what the tracker file says (None: absent/unreadable)
    latest_complete: int | None  # the tracker's iteration when its directory is complete
    problem: str = ""  # why the tracker cannot be trusted, if it cannot

    @property
    def resumable(self) -> bool:
        return self.latest_complete is not None


def is_complete(save_dir: str, rollout_id: int | str, markers: tuple[tuple[str, ...], ...] = COMPLETION_MARKERS) -> bool:
    """The one "complete checkpoint" test (the tiny trainer passes its own marker only)."""
    d = os.path.join(save_dir, rollout_id if isinstance(rollout_id, str) else iter_name(rollout_id))
    try:
        names = set(os.listdir(d))
    except OSError:
        return False
    return any(all(m in names for m in marker) for marker in markers)


def inspect(save_dir: str) -> CheckpointState:
    try:
        with open(os.path.join(save_dir, TRACKER), encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return CheckpointState(save_dir, None, None)
    if not text.isdigit():
        return CheckpointState(save_dir, None, None, f"tracker file holds {text!r}, not an iteration number")
    n = int(text)
    if not is_complete(save_dir, n):
        return CheckpointState(save_dir, n, None, f"tracker names {iter_name(n)}, which is missing or incomplete")
    return CheckpointState(save_dir, n, n)
