"""What a launcher is: one class that owns everything about where its runs go.

A launcher takes a stored run spec (resolved, validated and rendered on the submit host) and
puts it where its cluster says; everything trainstack does with a run that depends on where it
runs is a method here, so the core (status, cancel, logs, sweeps) never names a backend:

- `Settings`: the launcher's typed settings (a dataclass), written under `cluster.<name>:` and
  checked at compose time like every other key (unknown key, wrong type, `problems()`); the
  shared sweep plugin (`hydra/launcher=<name>`) takes the same fields as `hydra.launcher.<key>`.
- `submit(spec)`: start the run. A launcher that `waits` returns when the run has ended, with its
  exit code (local, ray_job); one that does not returns once the run is queued (slurm, lium).
- `execute(spec)`: run the stored command here, under the lifecycle (lease, resume plan, events,
  status, signals). `trainstack exec RUN` calls it; so does a queued job when it starts.
- `status(rows)`: fill what only the launcher knows into `trainstack status` rows (the
  scheduler's state, a pod); `cancel(rows, dry)`: stop them; `logs(row, follow, which)`: print
  the trainer's log, wherever it is.
- `record_sweep(sweep_dir, runs)`: the sweep manifest (`sweep.json`), for every launcher.
- `check(spec)`, `submit_sweep(specs, ...)`, `sweep_poll(...)`: what the shared Hydra sweep
  plugin asks (each point checked before the first is submitted; one call submits them all;
  a waited sweep asks how each run ended, then returns each run's result to the sweeper).
- `fetch_traces(run_dirs)`: bring a run's metrics from where it ran into its run dir here (Lium:
  from the commander), before status, compare or a waited sweep read them.
- `submit_host_problems(dry)`: what this machine lacks to submit (no `sbatch`, a missing client
  library); the preflight asks before anything is written, so a dry run refuses like the launch.
- `settings_problems(cluster)`: what a submission refuses in the launcher's own settings, offline
  (Lium: no image); the preflight asks it too.

Failures outside the config (a scheduler refusal, a commander that refuses) raise a
`trainstack.errors.RuntimeFailure` subclass: their own exit code, never 2 (bad input).
Launchers are entry points in the `trainstack.launchers` group (registry.py). Walkthrough:
docs/launchers.md.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

from trainstack.errors import ConfigError

if TYPE_CHECKING:
    from trainstack.run.rundir.manifest import SweepRun
    from trainstack.run.spec import RunSpec


@dataclass
class NoSettings:
    """A launcher without settings of its own."""


@dataclass
class Row:
    """One run as `trainstack status` shows it: the run dir's facts, then what its launcher fills (`status(rows)`)."""

    run_id: str
    run_dir: str
    overrides: list[str] = field(default_factory=list)
    job_id: str | None = None
    job_name: str | None = None
    scheduler: str | None = None  # PENDING/RUNNING/COMPLETED/... or None without SLURM info
    reason: str | None = None
    state: str | None = None  # status.json state
    last_checkpoint: int | None = None  # latest complete checkpoint in the run's checkpoint dir
    rollouts: int | None = None  # rollouts trained (metrics deduplicated by step, or the checkpoint)
    target: int | None = None  # num_rollout of the spec that last ran
    reward: float | None = None  # rollout/raw_reward at the last rollout step
    restarts: int = 0
    resumed_from: list[int] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    varying: list[str] = field(default_factory=list)
    hub_pushed: int | None = None  # the iteration the Hub's pointer names (hub.repo_id runs)
    hub_commit: str | None = None  # the commit that pointer was pushed in (Lium runs: as the commander knows it)
    hub_pending: int | None = None  # selected, not pushed yet (the Hub is failing or slow)
    launcher: str = "local"  # what the run was submitted with (its spec): it fills the rest and cancels the run
    # Lium runs (from the commander): the pod, the lease epoch, the cost so far
    pod: str | None = None
    epoch: int | None = None
    cost_usd: float | None = None
    started: str | None = None  # the first launch (events.jsonl), ISO; status_view.add_timing fills it
    seconds: float | None = None  # training time over every launch
    problem: str | None = None  # a corrupt or unreadable file of the run dir: the row says so, nothing is read

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class RunEnd:
    """How a sweep's run ended, as its launcher knows it (`sweep_poll`); its result is read from the run dir."""

    state: str  # trainstack.run.result.FINISHED or FAILED
    code: int | None = None  # the run's exit code, where known
    error: str | None = None  # why it failed, one line


class Launcher:
    name: ClassVar[str]
    waits: ClassVar[bool] = True  # submit() returns when the run has ended
    Settings: ClassVar[type] = NoSettings  # typed settings under cluster.<name> (and hydra.launcher.<key>)
    # Sweeps of this launcher's runs go through the shared plugin (`hydra/launcher=<name>`): it
    # checks every point before the first is submitted and submits them in one call.
    sweeps_through_plugin: ClassVar[bool] = False
    # hydra.launcher keys accepted as other names of settings (hydra-submitit-launcher's spellings)
    hydra_aliases: ClassVar[dict[str, str]] = {}
    # hydra.launcher keys refused with the key that decides them (a point's cluster)
    hydra_refused: ClassVar[dict[str, str]] = {}
    sweep_verb: ClassVar[str] = "submitted {n} run{s}"  # the sweep plugin's report line
    sweep_point: ClassVar[str] = "run"  # what two points sharing a run id would share ("run and SLURM job")

    # --- settings -------------------------------------------------------------------------
    def settings(self, spec: "RunSpec") -> Any:
        """This run's settings (checked at compose time, stored in the spec)."""
        from trainstack.config.schema import to_typed

        from trainstack.storage import layout

        obj, errors = to_typed(self.Settings, dict(spec.cluster.settings or {}), f"cluster.{self.name}.",
                               lambda _k: layout.SPEC)
        if errors:
            from trainstack.errors import ConfigErrors

            raise ConfigErrors(errors)
        return obj

    @classmethod
    def runs_here(cls, settings: dict[str, Any]) -> bool:
        """Does the trainer run on the submit host (so its inputs must be here)? `settings`: cluster.<name>."""
        return False

    @classmethod
    def cost_note(cls, settings: dict[str, Any]) -> str | None:
        """What the run may cost, for the dry run's summary (a price ceiling, a spend limit); None: no price."""
        return None

    # --- submitting -----------------------------------------------------------------------
    def submit_host_problems(self, dry: bool = False) -> list[ConfigError]:
        """What this machine lacks to submit runs (dry: to size them without submitting)."""
        return []

    @classmethod
    def settings_problems(cls, cluster: Any) -> list[ConfigError]:
        """What a submission would refuse in this launcher's own settings (`cluster.settings`: cluster.<name>,
        with a sweep's hydra.launcher.<key> merged in) for this cluster, judged offline: the dry run and the
        sweep plugin ask it too, so `dry_run=true` never says ready where the launch refuses."""
        return []

    @classmethod
    def launch_notes(cls, cluster: Any) -> list[str]:
        """What the dry run cannot decide now but the launch will (a cluster that may be started in between):
        shown as warnings, never a refusal. Default: nothing."""
        return []

    def check(self, spec: "RunSpec") -> None:
        """Raise ConfigErrors for what submitting this run would refuse (before any run is submitted)."""

    def submit(self, spec: "RunSpec") -> int:
        """Start the run; exit code of the run (waits) or of the submission."""
        return self.execute(spec)

    def submit_sweep(self, specs: Sequence["RunSpec"], sweep_dir: Path, nums: Sequence[int]) -> list["SweepRun"]:
        """Submit every (checked) point of a sweep; the manifest's entries. Default: submit one by one."""
        from trainstack.run.rundir.manifest import SweepRun

        runs = []
        for spec, num in zip(specs, nums):
            code = self.submit(spec)
            self._codes = {**getattr(self, "_codes", {}), spec.run_id: code}  # a waited run's end (sweep_poll)
            if code and not self.waits_for(spec):  # a waiting launcher's code is the run's: a failed trial, not a failed submit
                from trainstack.errors import RuntimeFailure

                raise RuntimeFailure(f"{self.name}: submitting {spec.run_id} exited with {code}")
            runs.append(SweepRun(run_id=spec.run_id, run_dir=spec.run_dir, overrides=list(spec.overrides), job_num=num))
        return runs

    def waits_for(self, spec: "RunSpec") -> bool:
        """Does `submit(spec)` return only when the run has ended (`waits`, or its settings' `wait`)?"""
        return self.waits_with(dict(spec.cluster.settings or {}))

    @classmethod
    def waits_with(cls, settings: dict[str, Any]) -> bool:
        """`waits_for` from the settings as written (`cluster.<name>`)."""
        return cls.waits or bool(settings.get("wait", False))

    def sweep_poll(self, specs: Sequence["RunSpec"], runs: Sequence["SweepRun"], settings: Any) -> list[RunEnd | None]:
        """A waited sweep (`wait=true`, or a launcher that `waits`): each run's end, None while it is queued or
        running; asked every `poll_s` until every run has ended. Default: the exit code `submit` returned (a
        launcher that waits), else the run dir's state (`status.json`: finished or failed)."""
        from trainstack.run.rundir import RunDir
        from trainstack.run.result import FAILED, FINISHED

        codes = getattr(self, "_codes", {})
        out: list[RunEnd | None] = []
        for spec in specs:
            if spec.run_id in codes:
                code = codes[spec.run_id]
                out.append(RunEnd(FAILED if code else FINISHED, code))
                continue
            state = RunDir(spec.run_dir).status().get("state")
            out.append(RunEnd(FINISHED, 0) if state == "finished" else RunEnd(FAILED, None, f"the run is {state}")
                       if state in ("failed", "interrupted") else None)
        return out

    def fetch_traces(self, run_dirs: Sequence[str]) -> None:
        """Bring what these runs logged where they ran (metrics) into their run dirs here, so status, compare and
        a waited sweep read them. Default: nothing, the run dir is where the run wrote them."""

    # --- running --------------------------------------------------------------------------
    def execute(self, spec: "RunSpec") -> int:
        """Run the stored command on this machine under the run lifecycle."""
        from trainstack.launch.process import start_local_process
        from trainstack.run.lifecycle import execute

        return execute(spec, start_local_process(spec))

    # --- following ------------------------------------------------------------------------
    def record_sweep(self, sweep_dir: str | Path, runs: Sequence["SweepRun"], **meta: Any) -> Path:
        """Add these points to `<sweep_dir>/sweep.json` (what `trainstack status SWEEP_DIR` reads)."""
        from trainstack.run.rundir import manifest

        return manifest.record(sweep_dir, runs, scheduler=self.name, **meta)

    def status(self, rows: Sequence["Row"]) -> None:
        """Fill what only this launcher knows (scheduler state, pod); the run dir's facts are filled already."""

    def cancel(self, rows: Sequence["Row"], dry: bool = False) -> int:
        """Stop these runs. Default: the run's launching process on this host (SIGTERM to the lease
        holder: it gives the trainer `resume.grace_s` for a final checkpoint)."""
        from trainstack.fencing.lease import _read, hostname, pid_alive
        from trainstack.run.rundir import RunDir

        code = 0
        sent = []
        for r in rows:
            holder = _read(RunDir(r.run_dir).lease_file)
            if holder is None or holder.host != hostname() or not pid_alive(holder.pid):
                where = "" if holder is None or holder.host == hostname() else f" here (it runs on {holder.host})"
                print(f"trainstack cancel: {r.run_id} is not running{where}", file=sys.stderr)
                code = code or 1
                continue
            what = f"SIGTERM to its launcher (pid {holder.pid}, {self.name})"
            if dry:
                print(f"trainstack cancel: {r.run_id}: would send {what} (--dry: nothing sent)", file=sys.stderr)
                continue
            import signal

            try:
                os.kill(holder.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            print(f"trainstack cancel: {r.run_id}: sent {what}; the trainer saves a final checkpoint, then stops",
                  file=sys.stderr, flush=True)
            sent.append((r, holder.pid))
        for r, pid in sent:
            print(f"trainstack cancel: {r.run_id}: {stopped(r.run_dir, pid)}", file=sys.stderr, flush=True)
        return code

    @classmethod
    def locate(cls, run_id: str) -> Path | None:
        """The run dir of `run_id` on this host as this launcher's own records know it (a run launched from
        another directory), or None. Asked by status/logs/cancel when the id is not under the runs root."""
        return None

    # `cancel(rows, dry, purge=True)` (`trainstack cancel --purge`): the launcher also deletes what its runs
    # keep outside the run dir (Lium: the run's volume); launchers without such storage refuse --purge.
    purges: ClassVar[bool] = False

    def resume(self, rows: Sequence["Row"], spend_limit: float | None = None,
               sweep_spend_limit: float | None = None, from_scratch: bool = False) -> int:
        """Continue runs this launcher paused (`trainstack resume`), with new limits. Default: nothing is
        paused by a launcher that runs to the end; the same launch command resumes a stopped run."""
        for r in rows:
            print(f"trainstack resume: {r.run_id} runs on the {self.name} launcher, which pauses nothing; run its "
                  "launch command again (it resumes from the newest complete checkpoint)", file=sys.stderr)
        return 2

    def logs(self, row: "Row", follow: bool = False, which: str = "trainer") -> int:
        """Print the run's trainer log (here: <run_dir>/logs/trainer.log); with follow, keep printing."""
        import subprocess

        from trainstack.run.rundir import RunDir

        path = RunDir(row.run_dir).trainer_log
        if not path.exists():
            print(f"trainstack logs: {path} does not exist yet", file=sys.stderr)
            return 1
        try:
            return subprocess.call(["tail", "-n", "+1", *(["-F"] if follow else []), str(path)])
        except KeyboardInterrupt:
            return 0


def launcher_of_run(run_dir: str | Path) -> str:
    """The launcher a run was submitted with: its spec's `launcher` (read without checking the rest,
    so status works on a spec this version would refuse to execute), else status.json's, else local."""
    from trainstack.storage import layout
    from trainstack.run.rundir import read_json

    for name in (layout.SPEC, layout.STATUS):
        data = read_json(Path(run_dir) / name)
        if isinstance(data, dict) and isinstance(data.get("launcher"), str):
            return data["launcher"]
    return "local"


CANCEL_WAIT_S = 15.0  # cancel waits this long to report how a run stopped (a final checkpoint takes ~2 s here)


def stopped(run_dir: str, pid: int, wait_s: float = CANCEL_WAIT_S) -> str:
    """How the run ended after its launcher got SIGTERM: its state and newest checkpoint once the launcher
    has exited, or that it is still stopping after `wait_s`."""
    import time

    from trainstack.storage.checkpoints import inspect
    from trainstack.fencing.lease import pid_alive
    from trainstack.run.rundir import RunDir

    t0 = time.monotonic()
    while pid_alive(pid) and time.monotonic() - t0 < wait_s:
        time.sleep(0.1)
    took = time.monotonic() - t0
    if pid_alive(pid):
        return (f"still stopping after {took:.0f} s (it has resume.grace_s for its final checkpoint); "
                "`trainstack status` shows when it has ended")
    rd = RunDir(run_dir)
    ckpt = inspect(str(rd.checkpoints))
    last = f"newest checkpoint iter_{ckpt.latest_complete:07d}" if ckpt.resumable else "no checkpoint"
    return f"{rd.status().get('state', 'ended')} after {took:.1f} s, {last}; the launch command resumes it"
