"""The run lifecycle: what executing a stored run means on any machine and under any launcher.

Order: take the run's lease (one writer per run) -> plan resume (fresh / resume / finished /
refuse) -> record the spec -> prepare the env's data -> start the trainer through the launcher's
runner -> forward SIGINT/SIGTERM, give it `resume.grace_s` for a final checkpoint -> record exit,
status and last metrics -> release the lease. A runner is whatever starts the stored command:
a local process group (`launch/local.py`) or a Ray job (`launch/ray_job.py`); it has
`.stop(signum)`, `.wait() -> exit code` and `.signalled`.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Callable, Protocol

from trainstack.checkpoints import inspect
from trainstack.hub import hooks as hub_hooks
from trainstack.lease import Lease, LeaseHeld
from trainstack.resume import FINISHED, RESUME, ResumePlan, plan
from trainstack.rundir import RunDir
from trainstack.runspec import RunSpec

EXIT_BUSY = 3  # another process holds the run


class Runner(Protocol):
    signalled: int | None

    def stop(self, signum: int = signal.SIGTERM) -> None: ...

    def wait(self) -> int: ...


StartRunner = Callable[[dict, RunDir], Runner]


def trainer_env(spec: RunSpec, rundir: RunDir) -> dict[str, str]:
    """The trainer's environment: ours (secrets included, from this machine) + the stored env +
    trainstack's own; W&B offline when there is no key to log in with."""
    env = {**os.environ, **spec.slime_command().env, "TRAINSTACK_METRICS_FILE": str(rundir.metrics_file),
           "TRAINSTACK_RUN_ID": spec.run_id}
    if spec.args.get("use_wandb") and not os.environ.get("WANDB_API_KEY") and not spec.args.get("wandb_mode"):
        env["WANDB_MODE"] = "offline"
    return env


def final_state(code: int, signalled: int | None) -> str:
    if signalled is not None:
        return "interrupted"
    if code != 0:
        return "failed"
    return "finished"


def execute(spec: RunSpec, start: StartRunner) -> int:
    """Lease -> resume plan -> spec + data -> start(env, rundir) -> wait -> record."""
    rundir = RunDir(spec.run_dir)
    try:
        lease = Lease.acquire(rundir.lease_file, ttl_s=spec.resume.lease_ttl_s)
    except LeaseHeld as held:
        print(f"trainstack: run {spec.run_id} is already running ({held.holder.describe()}); nothing was launched.\n"
              f"  fix: wait for it, stop it (Ctrl-C in its terminal / kill -TERM -{held.holder.pid}), or use another "
              f"run_id. A dead holder's lease is taken over {spec.resume.lease_ttl_s:.0f} s after its last heartbeat.",
              file=sys.stderr)
        return EXIT_BUSY
    try:
        resume_plan = plan(spec, rundir)  # may raise ConfigErrors: reported by the caller, lease released below
        hub_hooks.restore(spec, rundir, resume_plan)  # hub (issue 13): a Hub checkpoint is downloaded + checked here
        return _run_with_lease(spec, rundir, lease, resume_plan, start)
    finally:
        lease.release()


def _run_with_lease(spec: RunSpec, rundir: RunDir, lease: Lease, rp: ResumePlan, start: StartRunner) -> int:
    if rp.action == FINISHED:
        hub_hooks.push_finished(spec, rundir, lease, rp)  # hub (issue 13): a last checkpoint the Hub missed
        rundir.event("finished", latest_checkpoint=rp.checkpoint.latest_complete, num_rollout=rp.num_rollout)
        rundir.update_status(run_id=spec.run_id, state="finished", last_checkpoint=rp.checkpoint.latest_complete,
                             num_rollout=rp.num_rollout)
        print(f"trainstack: run {spec.run_id} is finished: its checkpoint at rollout {rp.checkpoint.latest_complete} "
              f"covers num_rollout={rp.num_rollout}. Nothing to train.\n  to continue it, raise the rollout count, "
              f"e.g. env.num_rollout={(rp.num_rollout or 0) * 2} (same run_id, resumes from "
              f"{rp.from_rollout})", file=sys.stderr)
        return 0
    from trainstack.preflight import prepare_data

    prepare_data(spec.data_prepare, spec.data_root)
    rundir.write_spec(spec)
    argv = spec.slime_command().full_argv()
    if rp.action == RESUME:
        rundir.event("resume", from_rollout=rp.from_rollout, checkpoint=rp.checkpoint.latest_complete,
                     allowed_changes={k: list(v) for k, v in (rp.changes or {}).items()}, lease_epoch=lease.record.epoch,
                     argv=argv)
    else:
        rundir.event("launch", lease_epoch=lease.record.epoch, argv=argv)
    print(f"trainstack: {spec.run_id}: {rp.describe()}; run dir {spec.run_dir}", file=sys.stderr, flush=True)
    rundir.update_status(run_id=spec.run_id, state="running", num_rollout=rp.num_rollout, host=lease.record.host,
                         pid=os.getpid(), last_checkpoint=rp.checkpoint.latest_complete)
    trainer = start(trainer_env(spec, rundir), rundir)
    sync = hub_hooks.start_sync(spec, rundir, lease, rp)  # hub (issue 13): background pushes beside the trainer

    def on_signal(signum, _frame):
        rundir.event("signal", signal=signal.Signals(signum).name)
        if sync is not None:  # hub (issue 13): the final push must fit in the grace period
            sync.note_signal(spec.resume.grace_s)
        trainer.stop(signum)

    def on_lease_lost():
        rundir.event("lease_lost")
        print(f"trainstack: lost the lease of {spec.run_id}; stopping the trainer", file=sys.stderr, flush=True)
        trainer.stop(signal.SIGTERM)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    lease.start_heartbeat(on_lost=on_lease_lost)
    try:
        code = trainer.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    hub_hooks.finish_sync(spec, sync, trainer.signalled)  # hub (issue 13): last checkpoint pushed before the end
    state = inspect(spec.args.get("save") or str(rundir.checkpoints))
    latest, _ = rundir.last_metrics()
    rundir.event("exit", code=code, signal=trainer.signalled and signal.Signals(trainer.signalled).name,
                 latest_checkpoint=state.latest_complete)
    rundir.update_status(state=final_state(code, trainer.signalled),
                         last_checkpoint=state.latest_complete, last_metrics=latest, exit_code=code)
    if trainer.signalled is not None and code != 0:
        return 128 + trainer.signalled if code < 0 else code
    return code
