"""Has this run ever published a checkpoint? Every record that can say so, read before a launch
would start from zero (docs/resume.md, "never a silent restart").

A fresh start of a run that once published a checkpoint would retrain from zero under the same
run_id, overwrite its curves and push a rollback to its Hub copy. Whatever removed the checkpoints
(a deleted `iter_*`, every checkpoint corrupt, a lost mount), one of these records usually survives:

- `status.json`'s `last_checkpoint`, and the `resume`/`finished`/`exit` events of `events.jsonl`
  (after the last knowing fresh start: a `launch` event with `fresh_start`);
- `checkpoints/publish.jsonl` (one line per publish) and the tracker naming an iteration;
- the checkpoints' own records: an `iter_*` with a manifest (written just before its publish) that
  failed verification.

The run then stops with what it found, unless `resume.mode=fresh` (or the older consent
`resume.allow_changes=[checkpoints]`) says to start over: the old checkpoints are moved aside, never
deleted. A Hub copy is not listed here: the resume plan already resumes from it when it is newer.
"""
from __future__ import annotations

import json
import os

from trainstack.run.rundir import RunDir
from trainstack.storage import checkpoints as ck
from trainstack.storage.layout import MANIFEST, PUBLISH_LOG, iter_name

FRESH_START = "fresh_start"  # the field of a `launch` event that started over knowingly
SHOWN = 3  # damaged checkpoints named one by one in the message
LOST_CONSENT = "checkpoints"  # resume.allow_changes=[checkpoints]: the older spelling of resume.mode=fresh


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def recorded_checkpoint(rundir: RunDir) -> int | None:
    """The newest checkpoint status.json or events.jsonl say this run had since its last knowing
    fresh start (None: none recorded)."""
    seen: list[int | None] = []
    for e in rundir.events():
        if e.get("event") == "launch" and e.get(FRESH_START):
            seen = []
        elif e.get("event") in ("resume", "finished", "exit"):
            seen.append(_int(e.get("latest_checkpoint", e.get("checkpoint"))))
    seen.append(_int(rundir.status().get("last_checkpoint")))  # a fresh start resets it to null
    found = [n for n in seen if n is not None]
    return max(found) if found else None


def publishes(save: str) -> list[int]:
    """The iterations publish.jsonl lists (torn or foreign lines skipped)."""
    out: list[int] = []
    try:
        with open(os.path.join(save, PUBLISH_LOG), encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    it = _int(json.loads(line).get("iter"))
                except (ValueError, AttributeError):
                    continue
                if it is not None:
                    out.append(it)
    except OSError:
        pass
    return out


def evidence(rundir: RunDir, save: str, state: ck.CheckpointState) -> list[str]:
    """What says this run published a checkpoint, one finding a line (empty: nothing does)."""
    found: list[str] = []
    last = recorded_checkpoint(rundir)
    if last is not None:
        found.append(f"status.json/events.jsonl record checkpoints up to rollout {last}")
    pubs = publishes(save)
    if pubs:
        found.append(f"{PUBLISH_LOG} lists {len(pubs)} publish{'es' if len(pubs) != 1 else ''} (newest "
                     f"{iter_name(max(pubs))})")
    if state.tracker is not None:
        found.append(f"the tracker names {iter_name(state.tracker)}")
    damaged = [n for n in ck.iterations(save) if os.path.exists(os.path.join(save, iter_name(n), MANIFEST))]
    for n in damaged[:SHOWN]:
        why = ck.problem_of(save, n, verify=True) or ("failed to load" if n in state.load_failed else "intact")
        found.append(f"{iter_name(n)}: {why}")
    if len(damaged) > SHOWN:
        found.append(f"... and {len(damaged) - SHOWN} older iter_* with a manifest")
    return found


def consents_to_start_over(resume: object) -> bool:
    return getattr(resume, "mode", "") == "fresh" or LOST_CONSENT in (getattr(resume, "allow_changes", None) or [])
