"""The run lifecycle: what executing a stored run means on any machine and under any launcher.

Order: take the run's lease (one writer per run) -> plan resume (fresh / resume / finished /
refuse) -> recover the save dir so it says exactly what the plan read -> record the spec ->
prepare the env's data -> start the trainer through the launcher's runner, with the lease's
fence in its environment -> forward SIGINT/SIGTERM/SIGHUP, give it `resume.grace_s` for a final
checkpoint -> record exit, status and last metrics -> release the lease. A runner is whatever
starts the stored command under trainstack.run.trainer_guard: a local process group (`launch/local.py`) or
a Ray job (`launch/ray_job.py`); it has `.stop(signum)`, `.wait() -> exit code`, `.signalled`
and `.pgid` (the trainer's process group on this host, or None).

Exit codes (docs/resume.md): 0 done, 2 bad input, 3 busy (another holder), 5 the run dir's storage
failed (a full disk: StorageFailure, one message), 75 fenced (the lease was lost; nothing published
after that, whatever signal stopped the trainer), 128+N stopped by signal N, otherwise the trainer's.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Any, Callable, Protocol

from trainstack import hooks
from trainstack.errors import RuntimeFailure
from trainstack.fencing.fence import EXIT_FENCED, Fence, margin_for
from trainstack.fencing.lease import Lease, LeaseHeld
from trainstack.run.published_history import FRESH_START
from trainstack.run.resume import FINISHED, FRESH, RESUME, ResumePlan, check_inputs_here, plan, training_identity
from trainstack.run.rundir import RunDir
from trainstack.run.spec import RunSpec
from trainstack.storage import faults as storage
from trainstack.storage.checkpoints import discard_all, inspect, load_failures, plan_recovery, write_identity

EXIT_BUSY = 3  # another process holds the run
# The run dir cannot be written: a full disk, a quota, a read-only or failing volume, permission denied.
STORAGE_ERRNOS = storage.STORAGE_ERRNOS


class StorageFailure(RuntimeFailure):
    """The run dir's filesystem refused a write (disk full, ...): one message, never a traceback."""

    what = "the run's storage"


def storage_failure(ex: OSError, run_dir: str) -> StorageFailure:
    problem, fix = storage.message(ex, run_dir)
    return StorageFailure(f"{problem} (run dir {run_dir})", fix)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Runner(Protocol):
    signalled: int | None
    pgid: int | None

    def stop(self, signum: int = signal.SIGTERM) -> None: ...

    def wait(self) -> int: ...


StartRunner = Callable[[dict, RunDir], Runner]


def trainer_env(spec: RunSpec, rundir: RunDir, lease: Lease | None = None) -> dict[str, str]:
    """The trainer's environment: ours (secrets included, from this machine) + the stored env +
    trainstack's own (metrics file, run id, the lease's fence); W&B offline when there is no key
    to log in with."""
    env = {**os.environ, **spec.slime_command().env, "TRAINSTACK_METRICS_FILE": str(rundir.metrics_file),
           "TRAINSTACK_RUN_ID": spec.run_id}
    if lease is not None:
        env.update(Fence(str(lease.path), lease.record.token, lease.record.epoch,
                         margin_for(lease.record.ttl_s)).to_env())
    if spec.args.get("use_wandb") and not os.environ.get("WANDB_API_KEY") and not spec.args.get("wandb_mode"):
        env["WANDB_MODE"] = "offline"
    return env


def prepare_data(hook: str | None, data_root: str) -> None:
    """Call an env's `meta.prepare(data_root)` hook (e.g. write the arithmetic prompt files); idempotent.
    Every launch runs it before the trainer (the preflight of a launch too, to check what it wrote)."""
    if not hook:
        return
    import importlib

    module, _, fn = hook.rpartition(".")
    getattr(importlib.import_module(module), fn)(data_root)


def final_state(code: int, signalled: int | None, lease_lost: bool = False) -> str:
    if lease_lost or code == EXIT_FENCED:
        return "fenced"
    if signalled is not None:
        return "interrupted"
    if code != 0:
        return "failed"
    return "finished"


def exit_code(code: int, signalled: int | None) -> int:
    """The launcher's exit code: 128+N when signal N stopped the run, the trainer's code otherwise,
    never a negative-wrapped value (a SIGKILLed trainer is 137, not 247)."""
    if signalled is not None and code != 0:
        return 128 + signalled
    return 128 - code if code < 0 else code


def _acquire(spec: RunSpec, rundir: RunDir) -> Lease:
    """Take the run's lease; when its last holder died and its trainer is finishing a final
    checkpoint (under trainstack.run.trainer_guard), wait for that instead of refusing."""
    import time

    deadline = time.monotonic() + spec.resume.grace_s + 10
    told = False
    while True:
        try:
            return Lease.acquire(rundir.lease_file, ttl_s=spec.resume.lease_ttl_s)
        except LeaseHeld as held:
            if not held.holder.trainer_stopping() or time.monotonic() > deadline:
                raise
            if not told:
                print(f"trainstack: {spec.run_id}: the previous launcher died; waiting for its trainer (process group "
                      f"{held.holder.trainer_pgid}) to finish its final checkpoint", file=sys.stderr, flush=True)
                told = True
            time.sleep(0.5)


def _stop_hint(holder) -> str:
    """How to stop the holder: its launcher's pid on this host (it stops the trainer gracefully), never
    a process group number that could be reused or mean "every process" (-1)."""
    from trainstack.fencing.lease import hostname

    if holder.host == hostname() and holder.pid > 1:
        return f"stop it (Ctrl-C in its terminal, or kill -TERM {holder.pid})"
    return f"stop it on host {holder.host} (trainstack cancel RUN, or Ctrl-C in its terminal)"


def execute(spec: RunSpec, start: StartRunner) -> int:
    """Lease -> resume plan -> spec + data -> start(env, rundir) -> wait -> record. Features join
    through trainstack.hooks: lifecycle.wrap_runner (e.g. an env server around the trainer),
    lifecycle.before_trainer (e.g. a Hub restore) and lifecycle.trainer_started (e.g. Hub sync)."""
    for wrap in hooks.get(hooks.WRAP_RUNNER):
        start = wrap(spec, start)
    rundir = RunDir(spec.run_dir)
    try:
        lease = _acquire(spec, rundir)
    except LeaseHeld as held:
        print(f"trainstack: run {spec.run_id} is already running ({held.holder.describe()}); nothing was launched.\n"
              f"  fix: wait for it, {_stop_hint(held.holder)}, or use another run_id. A dead holder's lease is "
              f"taken over {spec.resume.lease_ttl_s:.0f} s after its last heartbeat.", file=sys.stderr)
        return EXIT_BUSY
    except OSError as ex:  # the lease's own small writes: a full disk before anything ran
        if not storage.hits(ex, spec.run_dir):
            raise
        raise storage_failure(ex, spec.run_dir) from None
    try:
        resume_plan = plan(spec, rundir, dry=False)  # may raise ConfigErrors: reported by the caller, lease released below
        check_inputs_here(spec, resuming=resume_plan.action == RESUME)
        _recover(spec, rundir, resume_plan)  # the local save dir says what the plan read
        for before in hooks.get(hooks.BEFORE_TRAINER):  # e.g. a Hub checkpoint downloaded + checked here
            before(hooks.RunContext(spec, rundir, lease, resume_plan))
        code = _run_with_lease(spec, rundir, lease, resume_plan, start)
        fallback = _after_load_failure(spec, rundir, resume_plan, code)
        if fallback is not None:  # once: a second failure is refused by the plan (resume.py)
            code = _run_with_lease(spec, rundir, lease, fallback, start)
        return code
    except OSError as ex:
        if not storage.hits(ex, spec.run_dir):
            raise
        failure = storage_failure(ex, spec.run_dir)
        _record(rundir, "storage_failed", state="failed", error=failure.problem)
        raise failure from None
    finally:
        _release(lease, rundir)


def _record(rundir: RunDir, event: str, **status) -> bool:
    """Best effort on a failing disk: the event and the final state, or False (then the lease says it:
    trainstack/run/rundir/liveness.py)."""
    try:
        rundir.event(event, **status)
        rundir.update_status(**status)
        return True
    except OSError as ex:
        print(f"trainstack: could not record the run's final state ({ex.strerror or ex}); `trainstack status` "
              "judges it from the lease", file=sys.stderr, flush=True)
        return False


def _release(lease: Lease, rundir: RunDir) -> None:
    """Give the lease back. On a disk too full for the release's small write, unlink lease.json
    instead (no space needed; lease.epochs keeps the epoch count), so status says "lost" at once
    rather than "running" until the lease lapses."""
    try:
        lease.release()
    except OSError:
        if lease.holds():
            try:
                os.unlink(lease.path)
            except OSError:
                pass  # the lease lapses after its TTL: status says "stale" then


def _after_load_failure(spec: RunSpec, rundir: RunDir, rp: ResumePlan, code: int) -> ResumePlan | None:
    """The trainer could not load the checkpoint it resumed from (it recorded that in the save dir):
    set it aside and resume from the previous intact one, once, in this launch. None: nothing to do,
    or no fallback (the plan says why)."""
    from trainstack.errors import ConfigErrors

    if rp.action != RESUME or rp.checkpoint.latest_complete is None or code in (0, EXIT_FENCED) or code >= 128:
        return None
    if rp.checkpoint.latest_complete not in load_failures(rp.checkpoint.save_dir):
        return None
    try:
        fallback = plan(spec, rundir, dry=False)
    except ConfigErrors as err:
        print(err.render().replace("nothing was launched", "nothing more is launched"), file=sys.stderr, flush=True)
        return None
    if fallback.action != RESUME:
        return None
    _recover(spec, rundir, fallback)
    rundir.event("checkpoint_load_failed", checkpoint=rp.checkpoint.latest_complete,
                 fallback=fallback.checkpoint.latest_complete)
    return fallback


def stopped_by_guard(rundir: RunDir, epoch: int) -> bool:
    """Did the trainer's guard stop it itself under this lease epoch (its launcher frozen or gone:
    `trainer_stopped_by_guard`, trainstack/run/trainer_guard.py)?"""
    return any(e.get("event") == "trainer_stopped_by_guard" and e.get("lease_epoch") == epoch
               for e in rundir.events())


def _recover(spec: RunSpec, rundir: RunDir, rp: ResumePlan) -> None:
    """Make the save dir say what the plan read: move unpublished or broken iter dirs aside and
    point the tracker at the checkpoint the plan resumes from (under the lease, before the trainer).
    resume.mode=fresh: move every earlier checkpoint aside (kept), so the run starts from zero."""
    if rp.action == FRESH and spec.resume.mode == "fresh":
        moved = discard_all(rp.checkpoint.save_dir)
        if moved:
            rundir.event("checkpoint_recovery", problem="resume.mode=fresh: starting over", tracker=None,
                         moved_aside=moved)
            print(f"trainstack: {spec.run_id}: resume.mode=fresh: starting over; moved aside (kept): "
                  f"{', '.join(os.path.basename(m) for m in moved)}", file=sys.stderr, flush=True)
        return
    recovery = plan_recovery(rp.checkpoint)
    if recovery is None:
        return
    moved = recovery.apply(rp.checkpoint.save_dir)
    rundir.event("checkpoint_recovery", problem=rp.checkpoint.problem, tracker=recovery.tracker, moved_aside=moved)
    print(f"trainstack: {spec.run_id}: " + (f"{rp.checkpoint.problem}; " if rp.checkpoint.problem else "")
          + (f"resuming from the newest complete checkpoint, iter {recovery.tracker}"
             if recovery.tracker is not None else "no complete checkpoint left: a fresh start")
          + (f"; moved aside (kept): {', '.join(os.path.basename(m) for m in moved)}" if moved else ""),
          file=sys.stderr, flush=True)


def _run_with_lease(spec: RunSpec, rundir: RunDir, lease: Lease, rp: ResumePlan, start: StartRunner) -> int:
    if rp.action == FINISHED:
        rundir.event("finished", latest_checkpoint=rp.checkpoint.latest_complete, num_rollout=rp.num_rollout)
        rundir.update_status(run_id=spec.run_id, state="finished", last_checkpoint=rp.checkpoint.latest_complete)
        print(f"trainstack: run {spec.run_id} is finished: its checkpoint at rollout {rp.checkpoint.latest_complete} "
              f"covers num_rollout={rp.num_rollout}. Nothing to train.\n  to continue it, raise the rollout count, "
              f"e.g. env.num_rollout={rp.suggested_num_rollout()} (same run_id, resumes from "
              f"{rp.from_rollout})", file=sys.stderr)
        return 0
    for prepare_inputs in hooks.get(hooks.PREPARE_INPUTS):  # e.g. download + convert the model and datasets
        prepare_inputs(spec, rundir)
    prepare_data(spec.data_prepare, spec.data_root)
    rundir.write_spec(spec)
    write_identity(rp.checkpoint.save_dir, training_identity(spec))  # copied into every checkpoint's manifest
    argv = spec.slime_command().full_argv()
    if rp.action == RESUME:
        rundir.event("resume", from_rollout=rp.from_rollout, checkpoint=rp.checkpoint.latest_complete,
                     allowed_changes={k: list(v) for k, v in (rp.changes or {}).items()}, lease_epoch=lease.record.epoch,
                     argv=argv, refresh=False)  # the status update below makes the summary
    else:
        rundir.event("launch", lease_epoch=lease.record.epoch, argv=argv, refresh=False,
                     **({FRESH_START: True} if spec.resume.mode == "fresh" else {}))
    print(f"trainstack: {spec.run_id}: {rp.describe()}; run dir {spec.run_dir}", file=sys.stderr, flush=True)
    rundir.update_status(run_id=spec.run_id, state="running", num_rollout=rp.num_rollout, host=lease.record.host,
                         pid=os.getpid(), last_checkpoint=rp.checkpoint.latest_complete, lease_epoch=lease.record.epoch,
                         exit_code=None, refresh=False)
    try:
        trainer = start(trainer_env(spec, rundir, lease), rundir)
    except BaseException as ex:  # nothing started: say so in the run dir, then report
        rundir.event("start_failed", error=f"{type(ex).__name__}: {ex}")
        rundir.update_status(state="failed", exit_code=None, error=f"the trainer could not be started: {ex}")
        raise
    rundir.refresh_summary()  # while the trainer starts (status.json above already says running)
    companions = [c for c in (started(hooks.RunContext(spec, rundir, lease, rp))  # e.g. Hub sync beside the trainer
                              for started in hooks.get(hooks.TRAINER_STARTED)) if c is not None]
    code: int | None = None
    lost = False

    def note(event: str, **fields) -> None:  # from a signal handler or the heartbeat thread: a full disk
        try:                                   # must not stop the stop that follows
            rundir.event(event, **fields)
        except OSError as ex:
            print(f"trainstack: could not record {event} ({ex.strerror or ex})", file=sys.stderr, flush=True)

    def on_signal(signum, _frame):
        note("signal", signal=signal.Signals(signum).name)
        for companion in companions:  # e.g. the final push must fit in the grace period
            companion.on_signal(signum, spec.resume.grace_s)
        trainer.stop(signum)

    def on_lease_lost():
        nonlocal lost
        lost = True
        note("lease_lost")
        print(f"trainstack: lost the lease of {spec.run_id}; stopping the trainer", file=sys.stderr, flush=True)
        trainer.stop(signal.SIGTERM)

    old = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        try:
            lease.renew(trainer_pgid=trainer.pgid)
        except OSError as ex:  # a full disk: the trainer runs on under the lease it holds (until its TTL)
            print(f"trainstack: could not renew the lease ({ex.strerror or ex})", file=sys.stderr, flush=True)
        lease.start_heartbeat(on_lost=on_lease_lost)
        code = trainer.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for companion in companions:  # e.g. the last checkpoint pushed before the end is recorded
            companion.after_trainer(trainer.signalled)
        state = inspect(rp.checkpoint.save_dir)
        latest, _ = rundir.last_metrics()
        lost = lost or not lease.holds()  # superseded while the trainer ran (a frozen launcher back)
        # a frozen launcher back: its guard stopped the trainer (lease lapsing): interrupted, not failed
        signalled = trainer.signalled or (signal.SIGTERM if code and stopped_by_guard(rundir, lease.record.epoch)
                                          else None)
        final = final_state(code if code is not None else 1, signalled, lost)
        try:
            rundir.event("exit", code=code, signal=signalled and signal.Signals(signalled).name,
                         latest_checkpoint=state.latest_complete, state=final, lease_epoch=lease.record.epoch)
            if not lost:  # status.json belongs to the lease holder: a superseded launcher leaves it alone
                from trainstack.config.backends import EXIT_REASONS

                reason = EXIT_REASONS.get(code) if final == "failed" and code is not None else None
                if final == "failed" and reason is None:  # the plugin or module at fault, from the trainer's log
                    from trainstack.run.failure_cause import failure_reason

                    reason = failure_reason(spec, rundir.trainer_log)
                extra: dict[str, Any] = {"error": reason} if reason else {}
                rundir.update_status(state=final, last_checkpoint=state.latest_complete, last_metrics=latest,
                                     exit_code=code, **extra)
        except OSError as ex:
            if not storage.hits(ex, spec.run_dir):
                raise
            print(f"trainstack: {spec.run_id}: the trainer exited ({final}, code {code}) but its final state could "
                  f"not be recorded: {ex.strerror or ex}; `trainstack status` judges it from the lease",
                  file=sys.stderr, flush=True)
    if lost:
        return EXIT_FENCED  # fenced exits are 75, whatever signal stopped the trainer
    return exit_code(code, signalled)
