"""What relaunching a run_id does: start fresh, resume from the latest complete checkpoint,
report it finished, or refuse (changed training config, partial checkpoint, policy).

slime decides resume by the tracker file in --load; trainstack checks, before launching, that
what slime will load is complete (else the newest complete checkpoint is used: the lifecycle
points the tracker at it) and belongs to the same training config.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainstack.checkpoints import CheckpointState, inspect
from trainstack import binding, hooks
from trainstack.errors import ConfigError, ConfigErrors
from trainstack.resolve import NON_TRAINING_DESTS
from trainstack.identity import input_changes, inputs_of
from trainstack.rundir import RunDir, layout
from trainstack.schema import HubSpec, ResumeSpec


class PlannedRun(Protocol):
    """What the plan reads: a stored RunSpec, or a ResolvedRun before its spec is written."""

    run_id: str
    run_dir: str
    args: dict[str, Any]
    resume: ResumeSpec
    hub: HubSpec

    @property
    def inputs(self) -> dict[str, Any]: ...  # input paths + content fingerprints (trainstack/identity.py)

FRESH, RESUME, FINISHED = "fresh", "resume", "finished"


@dataclass
class ResumePlan:
    action: str  # fresh | resume | finished
    checkpoint: CheckpointState
    from_rollout: int = 0  # the first rollout the trainer will run
    num_rollout: int | None = None
    changes: dict[str, tuple[Any, Any]] | None = None  # allowed training-config changes
    source: str = "local"  # where the checkpoint is: local (the run dir) | a remote's source, e.g. hub
    remotes: dict[str, hooks.RemoteCheckpoint] = field(default_factory=dict)  # what each remote holds, by source

    def suggested_num_rollout(self) -> int:
        """A num_rollout that continues this run: twice what it has trained (its last checkpoint, not
        the count a relaunch asked for), so the hint never points below the checkpoint."""
        done = (self.checkpoint.latest_complete + 1) if self.checkpoint.latest_complete is not None else 0
        return max(2 * done, done + 1, 2 * (self.num_rollout or 0) if done < (self.num_rollout or 0) else 0)

    def describe(self) -> str:
        where = f" on {self.remotes[self.source].where_at}" if self.source in self.remotes else ""
        if self.action == FRESH:
            return "fresh start (no checkpoint yet)"
        if self.action == FINISHED:
            return (f"finished: checkpoint at rollout {self.checkpoint.latest_complete}{where} covers num_rollout "
                    f"{self.num_rollout}")
        return f"resuming from rollout {self.checkpoint.latest_complete}{where} (next: {self.from_rollout})"


def training_relevant(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items()
            if k not in NON_TRAINING_DESTS and v is not None}


def config_changes(stored: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    a, b = training_relevant(stored), training_relevant(current)
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def plan(run: PlannedRun, rundir: RunDir, *, dry: bool = False) -> ResumePlan:
    """What launching `run` now would do. `dry`: a dry run, whose remote lookups (the resume.lookup
    hooks, e.g. the Hub's) read nothing over the network unless the run asks them to."""
    save = run.args.get("save") or str(rundir.checkpoints)
    state = inspect(save, verify=True)  # content checksums: a corrupt file falls back, never loads
    mode = run.resume.mode
    num_rollout = run.args.get("num_rollout")
    recorded = rundir.read(layout.SPEC)
    recorded = recorded if isinstance(recorded, dict) else {}
    # the args of what last ran: args.json and spec.json both (a deleted or edited one must not
    # let a changed config resume silently)
    stored_sets = [a for a in (rundir.stored_args(), recorded.get("args")) if isinstance(a, dict)]
    stored = stored_sets[0] if stored_sets else None
    stored_inputs = recorded.get("inputs")
    remotes = lookup_remotes(run, state.latest_complete, dry)
    source = "local"
    for remote in remotes.values():  # a newer complete checkpoint held elsewhere wins over the run dir's
        if remote.record is not None and remote.latest is not None and (
                state.latest_complete is None or remote.latest > state.latest_complete):
            state, source = CheckpointState(save, remote.latest, remote.latest), remote.source
            stored, stored_inputs = remote.record["args"], remote.record.get("inputs")
            stored_sets = [stored]
    binding.check(run, rundir.read(layout.SPEC), state.resumable)  # launcher and spec (trainstack/binding.py)
    changes: dict[str, tuple[Any, Any]] = {}
    if stored is not None and state.resumable:
        for earlier in reversed(stored_sets):  # args.json's view wins where both name a change
            changes.update(config_changes(earlier, run.args))
        if isinstance(stored_inputs, dict):  # specs (and Hub pointers) of older trainstacks have none
            changes.update(input_changes(stored_inputs, run.inputs))
        refused = {k: v for k, v in changes.items() if k not in run.resume.allow_changes}
        if refused and mode != "never":
            rows = {f"{k}": f"{old!r} -> {new!r}" for k, (old, new) in refused.items()}
            keys = ",".join(refused)
            raise ConfigErrors([ConfigError(
                "run_id", f"run {run.run_id} has checkpoints up to rollout {state.latest_complete} from a different "
                "training config; resuming would mix the two", f"allow it with resume.allow_changes=[{keys}], or "
                "start a new run (run_id=<new id>, or drop run_id to get one derived from the config)",
                value=run.run_id, source=run.run_dir, related=rows)])
    if mode == "never" and state.resumable:
        raise ConfigErrors([ConfigError(
            "resume.mode", f"run {run.run_id} already has checkpoints up to rollout {state.latest_complete} and "
            "resume=never refuses to reuse them", "use resume=auto to continue it, or run_id=<new id> for a new run",
            value="never", source=run.run_dir)])
    if mode == "must" and not state.resumable:
        raise ConfigErrors([ConfigError(
            "resume.mode", f"resume=must but run {run.run_id} has no complete checkpoint in {save}"
            + "".join(f" nor on {r.where}" for r in remotes.values()),
            "check run_id and paths.runs_root, or use resume=auto", value="must", source=run.run_dir)])
    if not state.resumable:
        refuse_lost_checkpoints(run, rundir, save)
        return ResumePlan(FRESH, state, 0, num_rollout, remotes=remotes)
    assert state.latest_complete is not None  # resumable
    start = state.latest_complete + 1
    if isinstance(num_rollout, int) and num_rollout <= start:
        return ResumePlan(FINISHED, state, start, num_rollout, changes, source, remotes)
    return ResumePlan(RESUME, state, start, num_rollout, changes, source, remotes)


LOST_CONSENT = "checkpoints"  # resume.allow_changes=[checkpoints]: start over although the run recorded some


def recorded_checkpoint(rundir: RunDir) -> int | None:
    """The newest checkpoint status.json or events.jsonl say this run had (None: none recorded)."""
    seen = [rundir.status().get("last_checkpoint")]
    seen += [e.get("latest_checkpoint", e.get("checkpoint")) for e in rundir.events()
             if e.get("event") in ("resume", "finished")]
    found = [n for n in seen if isinstance(n, int) and not isinstance(n, bool)]
    return max(found) if found else None


def refuse_lost_checkpoints(run: PlannedRun, rundir: RunDir, save: str) -> None:
    """A save dir that is gone while the run recorded checkpoints is a lost disk or a wrong mount,
    not a new run: a silent fresh start would retrain from zero under the same run_id."""
    if LOST_CONSENT in run.resume.allow_changes or os.path.isdir(save):
        return
    last = recorded_checkpoint(rundir)
    if last is None:
        return
    raise ConfigErrors([ConfigError(
        "resume", f"run {run.run_id} recorded checkpoints up to rollout {last}, but its checkpoint dir {save} is "
        "gone; starting now would silently retrain from zero under the same run_id",
        f"restore {save} (or its Hub copy), or start over knowingly with resume.allow_changes=[{LOST_CONSENT}]",
        value=save, source=run.run_dir)])


def lookup_remotes(run: PlannedRun, local_latest: int | None, dry: bool) -> dict[str, hooks.RemoteCheckpoint]:
    """What each remote copy (a feature's resume.lookup hook) holds of the run, by source."""
    found: dict[str, hooks.RemoteCheckpoint] = {}
    for lookup in hooks.get(hooks.RESUME_LOOKUP):
        remote = lookup(run, local_latest, dry)
        if remote is not None:
            found.setdefault(remote.source, remote)
    return found


def check_inputs_here(run: PlannedRun, resuming: bool) -> None:
    """On the host that executes: the inputs must still be what the spec was resolved with (a data
    file edited while a job waited in the queue would silently change a resumed run)."""
    if not resuming or not run.inputs:
        return
    here = {d: rec for d, rec in inputs_of({d: r["path"] for d, r in run.inputs.items()}).items()
            if rec["fingerprint"] is not None}
    recorded = {d: r for d, r in run.inputs.items() if d in here and r.get("fingerprint") is not None}
    changed = input_changes(recorded, {d: here[d] for d in recorded})
    refused = {k: v for k, v in changed.items() if k not in run.resume.allow_changes}
    if refused:
        raise ConfigErrors([ConfigError(
            "run_id", f"the inputs of run {run.run_id} changed since it was submitted; resuming would continue "
            "training on other data or weights", f"restore them, or allow it with "
            f"resume.allow_changes=[{','.join(refused)}] (relaunch from the config)", value=run.run_id,
            source=run.run_dir, related={k: f"{a} -> {b}" for k, (a, b) in refused.items()})])
