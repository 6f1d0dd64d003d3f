"""The Python API: the CLI's semantics for notebooks and scripts (docs/api.md).

`Run.compose(...)` builds a run exactly as `python run.py ...` does (same Hydra composition,
resolution, validation and rendering); `dry_run()` runs the checks a launch runs and answers with a
typed result; `launch()` submits the stored spec to the run's launcher. Bad input raises
`trainstack.errors.ConfigErrors` (each problem with its key, value, source and fix) where the CLI
exits 2; a run that ends badly raises `RunFailed` (or `RunBusy`) where the CLI exits non-zero.
Nothing here re-implements the pipeline: it calls the functions the CLI calls.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from trainstack.errors import ConfigError, ConfigErrors

if TYPE_CHECKING:
    from trainstack.config.resolve import ResolvedRun
    from trainstack.render.command import SlimeCommand
    from trainstack.run.spec import RunSpec

__all__ = ["ConfigError", "ConfigErrors", "Diff", "DryRun", "LaunchResult", "Metrics", "Run", "RunBusy",
           "RunFailed", "RunStatus", "diff_runs"]


ENDED = ("finished", "failed", "interrupted", "fenced")  # status.json states a run ends in
# `trainstack status` judges a "running" run by its lease: "lost (...)" when its launcher died without
# recording a final state (trainstack/run/rundir/liveness.py): it will not end by itself, so waiting ends
GONE = ("lost",)


class RunFailed(Exception):
    """The run was launched and ended badly: the launcher's exit code and the run's final state."""

    def __init__(self, result: "LaunchResult"):
        self.result = result
        super().__init__(f"run {result.run_id} ended with exit code {result.exit_code} ({result.state}); "
                         f"its log: {result.run_dir}/logs/trainer.log")


class RunBusy(RunFailed):
    """Another process holds the run's lease (it is running elsewhere): nothing was launched."""


@dataclass(frozen=True)
class DryRun:
    """What a launch would do, nothing done; returned only when every check passed."""

    run_id: str
    run_dir: str
    launcher: str
    argv: list[str]  # the full command (entrypoint + argv), as the launch runs it
    env: dict[str, str]  # the trainer's environment, secrets redacted
    plan: str  # what (re)launching this run_id does: fresh start, resume from N, finished
    notes: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)  # checks the remote host runs before the trainer
    warnings: list[str] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)  # what it adds up to: gpus, parallel, sglang, batch, ckpts, cost

    @property
    def verdict(self) -> str:
        """The dry run's last line."""
        from trainstack.preflight.dry_head import verdict_line

        return verdict_line(self.run_id, self.launcher)


@dataclass(frozen=True)
class LaunchResult:
    run_id: str
    run_dir: str
    launcher: str
    exit_code: int  # the launcher's: 0 done (or queued for a launcher that does not wait), 3 busy, ...
    state: str | None  # status.json's state when the launcher returned (None: queued elsewhere)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class RunStatus:
    """One row of `trainstack status`, typed."""

    run_id: str
    run_dir: str
    state: str | None  # created | running | finished | failed | interrupted | fenced (None: not started);
    # stale | stopping | lost, each followed by why and the fix, when the lease says "running" is not true
    rollouts: int | None  # rollouts trained (from the run's own traces)
    target: int | None  # num_rollout of the spec that last ran
    reward: float | None  # rollout/raw_reward at the last rollout
    last_checkpoint: int | None
    exit_code: int | None
    scheduler: str | None = None  # SLURM's state, when the run is a job
    restarts: int = 0

    @property
    def done(self) -> bool:
        return self.rollouts is not None and self.target is not None and self.rollouts >= self.target


@dataclass(frozen=True)
class Metrics:
    """A run's logged scalars: {metric: [(step, value)]} against slime's step keys, and the last values."""

    series: dict[str, list[tuple[float, float]]]
    source: str  # tensorboard | wandb-offline | jsonl | none

    @property
    def last(self) -> dict[str, float]:
        return {name: pts[-1][1] for name, pts in self.series.items() if pts}

    def values(self, name: str) -> list[float]:
        return [v for _, v in self.series.get(name, [])]


@dataclass(frozen=True)
class Diff:
    """`trainstack diff A B` as data: resolved config and slime argv changes, with their sources."""

    equal: bool
    config: dict[str, list[dict[str, Any]]]  # changed / added / removed: {key, a, b, source_a, source_b}
    argv: dict[str, dict[str, list[dict[str, Any]]]]  # group -> changed / added / removed flags
    text: str  # what `trainstack diff` prints


class Run:
    """A run: composed from a config (`compose`) or found on disk (`open`)."""

    def __init__(self, run_dir: str | Path, run_id: str, launcher: str,
                 resolved: "ResolvedRun | None" = None, command: "SlimeCommand | None" = None,
                 overrides: Sequence[str] = ()):
        self.run_dir = str(run_dir)
        self.overrides = list(overrides)  # as composed (a config_dir's search path and the experiment first)
        self.run_id = run_id
        self.launcher = launcher
        self._resolved = resolved
        self._command = command

    def __repr__(self) -> str:
        return f"Run({self.run_id!r}, launcher={self.launcher!r}, run_dir={self.run_dir!r})"

    # --- making one -----------------------------------------------------------------------------
    @classmethod
    def compose(cls, overrides: Sequence[str] = (), *, experiment: str | None = None,
                config_dir: str | Path | None = None) -> "Run":
        """What `python run.py OVERRIDES` composes (`experiment=E` first when given; `config_dir`: like
        `--config-dir`). Raises ConfigErrors with every problem, as the CLI reports them."""
        from trainstack.render.pipeline import build_from_overrides

        if isinstance(overrides, str):
            raise ConfigErrors([ConfigError("overrides", "must be a list of overrides, not one string",
                                            f"Run.compose({overrides.split()!r})", value=overrides)])
        extra = []
        if config_dir is not None:  # like run.py's --config-dir: its presets next to the packaged ones
            where = Path(config_dir).expanduser().resolve()
            if not where.is_dir():
                raise ConfigErrors([ConfigError("config_dir", f"{where} is not a directory", "give the directory that "
                                                "holds your presets (experiment/, model/, ...)", value=str(config_dir))])
            extra.append(f"hydra.searchpath=[file://{where}]")
        given = [*extra, *([f"experiment={experiment}"] if experiment else []), *overrides]
        run, cmd = build_from_overrides(given)
        return cls(run.run_dir, run.run_id, run.cluster.launcher, run, cmd, given)

    @classmethod
    def open(cls, target: str | Path, runs_root: str | Path | None = None) -> "Run":
        """A run on disk: a run id under `runs_root` (default: $TRAINSTACK_RUNS_ROOT, else ./runs) or a
        run directory (as `trainstack status` takes)."""
        from trainstack.config.userconfig import default_runs_root

        runs_root = default_runs_root() if runs_root is None else runs_root
        from trainstack.run.rundir import RunDir
        from trainstack.run.rundir.targets import _run_id_of, bad_target, find_run
        from trainstack.storage import layout

        found = find_run(str(target), runs_root)
        if found is None:
            raise ConfigErrors([bad_target(str(target), runs_root)])
        spec = RunDir(found).read(layout.SPEC, {})
        spec = spec if isinstance(spec, dict) else {}
        return cls(found, str(spec.get("run_id") or _run_id_of(found)), str(spec.get("launcher") or "local"))

    # --- what it is -----------------------------------------------------------------------------
    def _composed(self, what: str) -> tuple["ResolvedRun", "SlimeCommand"]:
        if self._resolved is None or self._command is None:
            raise ConfigErrors([ConfigError("run", f"{what} needs a composed run; {self.run_id} was opened from "
                                            f"{self.run_dir}", "use Run.compose(overrides) (or `trainstack exec "
                                            f"{self.run_id}` to execute the stored run)", value=self.run_id)])
        return self._resolved, self._command

    @property
    def argv(self) -> list[str]:
        if self._command is not None:
            return self._command.full_argv()
        return self._stored_spec().slime_command().full_argv()

    @property
    def config(self) -> dict[str, Any]:
        """The resolved config tree (secrets redacted)."""
        from trainstack.secrets import redact

        if self._resolved is not None:
            return redact(self._resolved.config)
        return self._stored_spec().config

    def spec(self) -> "RunSpec":
        """The portable spec a launch stores (spec.json) and every launcher executes."""
        if self._resolved is None:
            return self._stored_spec()
        from trainstack.run.spec import RunSpec

        run, cmd = self._composed("spec()")
        return RunSpec.from_run(run, cmd)

    def _stored_spec(self) -> "RunSpec":
        from trainstack.run import spec as runspec

        return runspec.load(self.run_dir)

    # --- the CLI's verbs ------------------------------------------------------------------------
    def dry_run(self) -> DryRun:
        """Every check a launch runs, nothing written (`python run.py ... dry_run=true`)."""
        from trainstack.preflight.checks import preflight

        run, cmd = self._composed("dry_run()")
        report = preflight(run, cmd, launching=False)
        from trainstack.preflight.dry_summary import facts
        return DryRun(run_id=run.run_id, run_dir=run.run_dir, launcher=run.cluster.launcher, argv=cmd.full_argv(),
                      env=cmd.redacted_env(), plan=report.plan, notes=list(report.notes),
                      deferred=list(report.deferred), warnings=list(run.warnings),
                      facts={f.label: f.text for f in facts(run, cmd)})

    def launch(self, check: bool = True) -> LaunchResult:
        """Check, store the spec and submit it to the run's launcher (local: returns when the run has
        ended). `check`: raise RunFailed when it ended badly (RunBusy when it runs elsewhere)."""
        from trainstack import registry
        from trainstack.preflight.checks import preflight
        from trainstack.run.lifecycle import EXIT_BUSY
        from trainstack.run.rundir import RunDir

        run, cmd = self._composed("launch()")
        preflight(run, cmd, launching=True)
        spec = self.spec()
        code = registry.get(spec.launcher).submit(spec)
        result = LaunchResult(run_id=spec.run_id, run_dir=spec.run_dir, launcher=spec.launcher, exit_code=code,
                              state=RunDir(spec.run_dir).status().get("state"))
        if check and code == EXIT_BUSY:
            raise RunBusy(result)
        if check and code != 0:
            raise RunFailed(result)
        return result

    def wait(self, timeout: float | None = None, interval: float = 2.0) -> RunStatus:
        """Follow a run a queueing launcher submitted (SLURM, Lium) until it has ended; its last status.
        TimeoutError when `timeout` seconds pass first."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = self.status()
            word = (st.state or "").split(" ", 1)[0]
            if word in GONE or word in ENDED and st.scheduler in (None, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                                                      "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY"):
                return st
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {self.run_id} is still {st.state or st.scheduler or 'queued'} "
                                   f"after {timeout:.0f} s")
            time.sleep(interval)

    def status(self) -> RunStatus:
        """Where the run stands (`trainstack status RUN`), from its run directory and scheduler."""
        from trainstack.reports.status import collect, fill
        from trainstack.run.rundir import RunDir
        from trainstack.storage import layout

        if not Path(self.run_dir, layout.STATUS).exists() and not Path(self.run_dir, layout.SPEC).exists():
            return RunStatus(self.run_id, self.run_dir, None, None, None, None, None, None)
        (row,) = fill(collect([self.run_dir]))
        return RunStatus(run_id=row.run_id, run_dir=row.run_dir, state=row.state, rollouts=row.rollouts,
                         target=row.target, reward=row.reward, last_checkpoint=row.last_checkpoint,
                         exit_code=RunDir(self.run_dir).status().get("exit_code"), scheduler=row.scheduler,
                         restarts=row.restarts)

    def metrics(self, source: str = "auto") -> Metrics:
        """The run's scalars from TensorBoard, wandb offline files or metrics.jsonl (`auto`: the first with data)."""
        from trainstack.metrics import LOCAL_SOURCES, read_local

        if source not in ("auto", *LOCAL_SOURCES):
            raise ConfigErrors([ConfigError("source", f"'{source}' is not a local metric source",
                                            f"use one of: auto, {', '.join(LOCAL_SOURCES)}", value=source)])
        got = read_local(self.run_dir, source)
        return Metrics(series=dict(got.series), source=got.source)

    def diff(self, other: "Run | str | Sequence[str]") -> Diff:
        return diff_runs(self, other)


def _side(x: "Run | str | Sequence[str]", runs_root: str | Path, config_dir: str | None) -> Any:
    from trainstack.reports.diff import compose_side, load_spec

    if isinstance(x, Run):
        if x._resolved is not None:
            return compose_side(x.overrides, x.run_id, config_dir,
                                label=f"{' '.join(x.overrides) or '(no overrides)'} (composed)")
        return load_spec(x.run_dir, runs_root, config_dir)
    if isinstance(x, str):
        return load_spec(x, runs_root, config_dir)
    return compose_side(list(x), " ".join(x), config_dir)


def diff_runs(a: "Run | str | Sequence[str]", b: "Run | str | Sequence[str]", *,
              runs_root: str | Path | None = None, config_dir: str | Path | None = None) -> Diff:
    """`trainstack diff A B`: each side a Run, a run id / run dir / experiment / quoted override list
    (a string, as the CLI takes it), or a list of overrides. Bad sides: ConfigErrors with all problems."""
    from trainstack.config.userconfig import default_runs_root
    from trainstack.reports.diff import diff_sides, format_text

    runs_root = default_runs_root() if runs_root is None else runs_root

    conf = str(config_dir) if config_dir is not None else None
    sides, errors = [], []
    for x in (a, b):
        try:
            sides.append(_side(x, runs_root, conf))
        except ConfigErrors as err:
            errors += err.errors
    if errors:
        raise ConfigErrors(errors)
    result = diff_sides(sides[0], sides[1])
    return Diff(equal=result["equal"], config=result["config"], argv=result["argv"], text=format_text(result))
