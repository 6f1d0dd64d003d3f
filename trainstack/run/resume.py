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

from trainstack.storage.checkpoints import CheckpointState, checkpoint_identity, inspect
from trainstack.run import binding, published_history
from trainstack import hooks
from trainstack.run.binding import config_changes, training_relevant
from trainstack.errors import ConfigError, ConfigErrors
from trainstack.config.input_identity import input_changes, inputs_of
from trainstack.run.rundir import RunDir
from trainstack.storage import layout
from trainstack.storage.layout import LOAD_FAILURES, iter_name
from trainstack.config.schema import HubSpec, ResumeSpec


class PlannedRun(Protocol):
    """What the plan reads: a stored RunSpec, or a ResolvedRun before its spec is written."""

    run_id: str
    run_dir: str
    args: dict[str, Any]
    resume: ResumeSpec
    hub: HubSpec

    @property
    def inputs(self) -> dict[str, Any]: ...  # input paths + content fingerprints (trainstack/config/input_identity.py)

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
    discard: tuple[str, ...] = ()  # resume.mode=fresh: what says the run had checkpoints (moved aside, kept)

    def suggested_num_rollout(self) -> int:
        """A num_rollout that continues this run: twice what it has trained (its last checkpoint, not
        the count a relaunch asked for), so the hint never points below the checkpoint."""
        done = (self.checkpoint.latest_complete + 1) if self.checkpoint.latest_complete is not None else 0
        return max(2 * done, done + 1, 2 * (self.num_rollout or 0) if done < (self.num_rollout or 0) else 0)

    def describe(self) -> str:
        where = f" on {self.remotes[self.source].where_at}" if self.source in self.remotes else ""
        if self.action == FRESH and self.discard:
            return "fresh start (resume.mode=fresh: its earlier checkpoints are moved aside under checkpoints/.incomplete/)"
        if self.action == FRESH:
            return "fresh start (no checkpoint yet)"
        if self.action == FINISHED:
            return (f"finished: checkpoint at rollout {self.checkpoint.latest_complete}{where} covers num_rollout "
                    f"{self.num_rollout}")
        return f"resuming from rollout {self.checkpoint.latest_complete}{where} (next: {self.from_rollout})"


def training_identity(run: PlannedRun) -> dict[str, Any]:
    """What a checkpoint is trained under, as the resume plan compares it: written to
    `<save>/identity.json` at each launch and copied by every writer into each manifest."""
    return {"run_id": run.run_id, "args": training_relevant(run.args), "inputs": run.inputs}


def plan(run: PlannedRun, rundir: RunDir, *, dry: bool = False) -> ResumePlan:
    """What launching `run` now would do. `dry`: a dry run, whose remote lookups (the resume.lookup
    hooks, e.g. the Hub's) read nothing over the network unless the run asks them to."""
    save = run.args.get("save") or str(rundir.checkpoints)
    # verified: content checksums, and no manifest is a failed verification (a corrupt file falls back, never loads)
    state = inspect(save, verify=True)
    mode = run.resume.mode
    num_rollout = run.args.get("num_rollout")
    recorded = rundir.read(layout.SPEC)
    recorded = recorded if isinstance(recorded, dict) else {}
    if mode == "fresh":  # start over knowingly: only the launcher binding holds (the config may change)
        binding.check(run, {k: v for k, v in recorded.items() if k != "args"} or None, False)
        found = tuple(published_history.evidence(rundir, save, state)) if os.path.isdir(save) else ()
        return ResumePlan(FRESH, state, 0, num_rollout, discard=found)
    # the args of what last ran: args.json and spec.json both (a deleted or edited one must not
    # let a changed config resume silently), and the identity the checkpoint itself carries (the
    # run's records may all be gone: it travels with the checkpoint)
    ident = checkpoint_identity(save, state.latest_complete) if state.latest_complete is not None else None
    stored_sets: list[dict[str, Any]] = [a for a in ((ident or {}).get("args"), rundir.stored_args(),
                                                     recorded.get("args")) if isinstance(a, dict)]
    input_sets = [(ident or {}).get("inputs"), recorded.get("inputs")]
    stored = stored_sets[0] if stored_sets else None
    remotes = lookup_remotes(run, state.latest_complete, dry)
    source = "local"
    for remote in remotes.values():  # a newer complete checkpoint held elsewhere wins over the run dir's
        if remote.record is not None and remote.latest is not None and (
                state.latest_complete is None or remote.latest > state.latest_complete):
            state, source = CheckpointState(save, remote.latest, remote.latest), remote.source
            stored, input_sets = remote.record["args"], [remote.record.get("inputs")]
            stored_sets = [stored]
    binding.check(run, rundir.read(layout.SPEC), state.resumable)  # launcher and spec (trainstack/run/binding.py)
    refuse_repeated_load_failures(run, state)
    changes: dict[str, tuple[Any, Any]] = {}
    if stored is not None and state.resumable:
        for earlier in reversed(stored_sets):  # the checkpoint's own view wins where several name a change
            changes.update(config_changes(earlier, run.args))
        for stored_inputs in reversed(input_sets):  # specs (and Hub pointers) of older trainstacks have none
            if isinstance(stored_inputs, dict):
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
        refuse_lost_checkpoints(run, rundir, save, state)
        return ResumePlan(FRESH, state, 0, num_rollout, remotes=remotes)
    assert state.latest_complete is not None  # resumable
    start = state.latest_complete + 1
    if isinstance(num_rollout, int) and num_rollout <= start:
        return ResumePlan(FINISHED, state, start, num_rollout, changes, source, remotes)
    return ResumePlan(RESUME, state, start, num_rollout, changes, source, remotes)


def refuse_lost_checkpoints(run: PlannedRun, rundir: RunDir, save: str, state: CheckpointState | None = None) -> None:
    """No intact checkpoint, but a record says the run published one (trainstack/run/published_history.py):
    a lost disk, a wrong mount, deleted or corrupt checkpoints, never a new run. A silent fresh start
    would retrain from zero under the same run_id."""
    if published_history.consents_to_start_over(run.resume):
        return
    if state is None or not os.path.isdir(save):
        state = CheckpointState(save, None, None)
    found = published_history.evidence(rundir, save, state)
    if not found:
        return
    where = (f"its checkpoint dir {save} is gone" if not os.path.isdir(save)
             else f"no checkpoint in {save} is intact")
    raise ConfigErrors([ConfigError(
        "resume", f"run {run.run_id} has published checkpoints, but {where}; starting now would silently retrain "
        "from zero under the same run_id", f"restore {save} (or its Hub copy) and relaunch, or start over knowingly "
        "with resume.mode=fresh (the old checkpoints are moved aside under checkpoints/.incomplete/, not deleted)",
        value=save, source=run.run_dir, related={f"found[{i}]": f for i, f in enumerate(found)})])


def refuse_repeated_load_failures(run: PlannedRun, state: CheckpointState) -> None:
    """A checkpoint that failed to load is set aside once; when the previous one fails too, the cause
    is not the checkpoints (memory, a changed model or slime): stop instead of walking back to zero."""
    if len(state.load_failed) < 2:
        return
    names = ", ".join(iter_name(n) for n in state.load_failed)
    raise ConfigErrors([ConfigError(
        "resume", f"run {run.run_id}: {names} failed to load one after the other; the cause is probably not the "
        "checkpoints (memory, a changed model, torch or slime version), so nothing more is set aside",
        f"read logs/trainer.log, fix the cause, then delete {state.save_dir}/{LOAD_FAILURES} and relaunch (it "
        "resumes from the newest intact checkpoint)", value=run.run_id, source=run.run_dir)])


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
