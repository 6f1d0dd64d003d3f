"""TrainstackLauncher: a sweep's points handed to a trainstack launcher, checked first.

`hydra/launcher=slurm` (or `=lium`, or any launcher's name) registers this class with
`launcher: <name>`. The per-point build is written once here: compose the point (through the
sweep cache) with `cluster.launcher=<name>` -> resolve and validate -> preflight -> run spec ->
`hydra.launcher.<key>` values over the point's `cluster.<name>` settings -> the launcher's own
check. Nothing is submitted unless every point passes; then `launcher.submit_sweep` submits them
all in one call and `launcher.record_sweep` writes `<sweep_dir>/sweep.json`.

Each point's `JobReturn` carries its task config, its Hydra config, its job dir and its result
(trainstack/run/result.py): SUBMITTED when the launcher returns before its runs end; with
`hydra.launcher.wait=true` (or a launcher that runs to the end) the sweep waits, with progress,
for every run (trainstack/sweep/wait.py) and answers FINISHED with the objective's value, or FAILED.
The task function is not called: a point is a stored run spec, executed where its cluster says.
An app whose config is not trainstack's is refused naming the launchers that run task functions.

`hydra.launcher.<key>` accepts exactly the launcher's settings (trainstack/launch/<name>.py
`Settings`; defaults declared there only), plus its `hydra_aliases`; its `hydra_refused` keys are
refused naming the key that decides them. The ConfigStore entries are registered from the entry
points' names by `register()`, which trainstack calls before it composes its own tree (run.py,
`Run.compose`): Hydra's plugin scan, which imports this module in every Hydra app of the venv, reads
no entry points and imports nothing of trainstack.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from omegaconf import OmegaConf, open_dict, read_write

log = logging.getLogger(__name__)
TARGET = "hydra_plugins.trainstack_launchers.launcher.TrainstackLauncher"


# The launchers trainstack itself ships (pyproject's `trainstack.launchers` group): registered when Hydra's plugin
# scan imports this module, by name only (a ConfigStore entry, microseconds; nothing of trainstack imported), so
# another Hydra app that selects one gets the launcher's own one-line refusal instead of "no such option".
BUILT_IN = ("local", "ray_job", "slurm", "lium")


def _store(name: str) -> None:
    ConfigStore.instance().store(group="hydra/launcher", name=name, node={"_target_": TARGET, "launcher": name},
                                 provider="trainstack")


def register() -> None:
    """`hydra/launcher=<name>` for every trainstack launcher, third parties' too (trainstack.config.hydra_entry calls it
    before trainstack composes its own tree: reading the entry points is not for every Hydra app)."""
    from trainstack.registry import names

    for name in names():
        _store(name)


for _name in BUILT_IN:
    _store(_name)


class TrainstackLauncher(Launcher):
    def __init__(self, launcher: str, **params: Any) -> None:
        self.name = launcher
        self.params = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                       for k, v in params.items()}
        self.config: Any = None
        self.task_function: Any = None
        self.hydra_context: Any = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    # --- hydra.launcher.<key> -------------------------------------------------------------
    def hydra_settings(self, cls: Any) -> dict[str, Any]:
        """The launcher settings given as hydra.launcher.<key> (aliases mapped), checked; refused keys named."""
        from trainstack.errors import ConfigError, ConfigErrors
        from trainstack.config.schema import to_typed

        errors = [ConfigError(f"hydra.launcher.{k}", f"each point's cluster decides this {where}",
                              f"remove hydra.launcher.{k}" + (f" and set {where}" if where.startswith("cluster.") else ""),
                              value=self.params[k])
                  for k, where in cls.hydra_refused.items() if self.params.get(k) is not None]
        given = {cls.hydra_aliases.get(k, k): v for k, v in self.params.items()
                 if v is not None and k not in cls.hydra_refused}
        _, errs = to_typed(cls.Settings, given, "hydra.launcher.", lambda _k: "command line")
        if errors or errs:
            raise ConfigErrors(errors + errs)
        return given

    # --- one point ------------------------------------------------------------------------
    def point_config(self, overrides: Sequence[str], num: int = 0):
        """The point's config (task and `hydra` node), composed through the sweep cache, on this launcher."""
        from trainstack.config.sweep_cache import SweepConfigCache

        sweep_config = SweepConfigCache.for_master(self.hydra_context.config_loader, self.config).load(list(overrides))
        with open_dict(sweep_config):  # as Hydra's launchers do: ${hydra:job.num} is the point's number
            sweep_config.hydra.job.id = num
            sweep_config.hydra.job.num = num
        with read_write(sweep_config), open_dict(sweep_config):  # the point's own copy (sweep_cache): no deep copy
            sweep_config.cluster.launcher = self.name  # this plugin submits every point, whatever its preset says
        return sweep_config

    def build_point(self, overrides: Sequence[str], num: int = 0):
        """(run, command, the point's task config), composed once per point, on this launcher."""
        from trainstack.render.pipeline import build
        from trainstack.config.resolve import Origin
        from trainstack.config.sweep_cache import set_hydra_config

        sweep_config = self.point_config(overrides, num)
        set_hydra_config(sweep_config)
        origin = Origin.from_hydra(sweep_config.hydra, cwd=os.getcwd())
        run, cmd = build(sweep_config, origin)  # resolve leaves the hydra node out
        return run, cmd, sweep_config

    def point_spec(self, launcher: Any, overrides: Sequence[str], given: dict[str, Any], num: int = 0):
        from trainstack.errors import ConfigErrors
        from trainstack.preflight.checks import preflight
        from trainstack.run.spec import RunSpec
        from trainstack.config.schema import to_typed

        run, cmd, task_cfg = self.build_point(overrides, num)
        preflight(run, cmd, launching=False, submitted_by=self.name)  # resume plan, run dir, deferred checks
        spec = RunSpec.from_run(run, cmd)
        merged = {**spec.cluster.settings, **{k: ({**spec.cluster.settings[k], **v} if isinstance(v, dict) and isinstance(
            spec.cluster.settings.get(k), dict) else v) for k, v in given.items()}}  # maps (sbatch, pod) merged key by key
        obj, errors = to_typed(type(launcher).Settings, merged, f"cluster.{self.name}.", lambda _k: "")
        if errors:
            raise ConfigErrors(errors)
        spec = dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, settings=dataclasses.asdict(obj)))
        problems = type(launcher).settings_problems(spec.cluster)  # what submitting would refuse, dry or not
        if problems:
            raise ConfigErrors(problems)
        return run, cmd, spec, task_cfg

    # --- the sweep ------------------------------------------------------------------------
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from trainstack.run import result as sr
        from trainstack.errors import ConfigErrors, RuntimeFailure, report_and_exit, report_failure_and_exit
        from trainstack.registry import get
        from trainstack.sweep.points import (
            PointErrors, is_trainstack_config, not_trainstack_problem, remove_fresh_sweep_dir, shared_run_id_errors)

        t0 = time.perf_counter()
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        try:
            if not is_trainstack_config(self.config):  # another Hydra app: its task function is not a run spec
                raise ConfigErrors([not_trainstack_problem(self.name)])
            launcher = get(self.name)
            given = self.hydra_settings(type(launcher))
            objective = sr.sweep_objective(self.config)
        except ConfigErrors as err:
            remove_fresh_sweep_dir(str(sweep_dir))
            report_and_exit(err)
        specs, dry_lines, built, points = [], [], [], []
        failed = PointErrors()
        for idx, overrides in enumerate(job_overrides):  # every point checked before the first is submitted
            shown = list(filter_overrides(overrides))
            num = initial_job_idx + idx
            failed.point()
            try:
                run, cmd, spec, task_cfg = self.point_spec(launcher, overrides, given, num)
                built.append((spec.run_id, shown))
                dry = bool(task_cfg.get("dry_run"))
                # what the point's answer needs, not its config: a sweep's memory stays flat
                points.append(_Point(num, shown, list(overrides), spec.run_id, spec.run_dir,
                                     Path(str(task_cfg.hydra.sweep.dir)) / str(task_cfg.hydra.sweep.subdir),
                                     str(task_cfg.hydra.job.name), task_cfg.hydra.output_subdir is not None))
                if dry:  # its line only, as text
                    from trainstack.reports.display import sweep_line

                    dry_lines.append(sweep_line(run, cmd))
                    continue
                launcher.check(spec)
            except ConfigErrors as err:
                failed.add(num, shown, err.errors)
                continue
            specs.append(spec)
            log.info(f"\t#{num} : {spec.run_id} : {' '.join(shown)}")
        # one run per point: two points with one run id would share a run dir, a job name, a lease
        errors = failed.errors() + shared_run_id_errors(built, what=launcher.sweep_point)
        settings = launcher.settings(specs[0]) if specs else None
        if not errors:
            errors += launcher.submit_host_problems(dry=bool(getattr(settings, "dry", False)) or not specs)
            for e in errors:
                e.key = "hydra/launcher" if e.key == "cluster.launcher" else e.key
        waits = type(launcher).waits if settings is None else launcher.waits_for(specs[0])
        metric = getattr(settings, "metric", None)
        if OmegaConf.select(self.config, "objective", default=None) is None and metric:
            try:  # SLURM's and Lium's older spelling of the objective: hydra.launcher.metric
                objective = sr.Objective.parse(metric, key="hydra.launcher.metric")
            except ConfigErrors as err:
                errors += err.errors
        if not errors:  # a sweeper that reads each point's result (Optuna) needs one: refused once, here
            errors += sr.results_problems(self.config, dry=bool(dry_lines) or bool(getattr(settings, "dry", False)),
                                          waits=waits, launcher=self.name)
        if errors:
            remove_fresh_sweep_dir(str(sweep_dir))
            report_and_exit(ConfigErrors(errors))
        if dry_lines:  # dry_run=true: every point checked and shown; nothing submitted
            from trainstack.reports import display

            for line in dry_lines:
                display.print_folded_line(line)
            remove_fresh_sweep_dir(str(sweep_dir))  # a dry sweep writes nothing (Hydra's multirun.yaml goes)
            return [self.returned(p, sr.CHECKED, write=False) for p in points]
        sweep_dir.mkdir(parents=True, exist_ok=True)
        t_built = time.perf_counter()
        nums = [p.num for p in points]
        try:
            runs = launcher.submit_sweep(specs, sweep_dir, nums)
            submit_s = time.perf_counter() - t0
            manifest = launcher.record_sweep(sweep_dir, runs, submit_s=submit_s)
        except ConfigErrors as err:
            report_and_exit(err)
        except RuntimeFailure as ex:
            report_failure_and_exit(ex)
        n = len(runs)
        if getattr(settings, "dry", False):
            _say(f"trainstack: dry: {n} point{'s' if n != 1 else ''} composed, checked and sized in "
                 f"{t_built - t0:.2f} s, nothing submitted; see {manifest}")
            return [self.returned(p, sr.CHECKED, write=False) for p in points]
        ids = ", ".join(f"{r.run_id}={r.job_id}" if r.job_id else r.run_id for r in runs[:8])
        _say(f"trainstack: {launcher.sweep_verb.format(n=n, s='s' if n != 1 else '')} in {submit_s:.2f} s "
             f"(compose+validate {t_built - t0:.2f} s): {ids}{' ...' if n > 8 else ''}\n  manifest {manifest}\n"
             f"  follow: trainstack status {sweep_dir}    stop: trainstack cancel {sweep_dir}")
        if not waits:  # submitted, not waited for: a distinct state, no value (sweep_result.SUBMITTED)
            return [self.returned(p, sr.SUBMITTED) for p in points]
        from trainstack.sweep.points import print_summary
        from trainstack.sweep.wait import results, wait_for_runs

        try:
            ends = wait_for_runs(launcher, specs, runs, settings, say=_say)
        except RuntimeFailure as ex:
            report_failure_and_exit(ex)
        got = results(specs, nums, [p.shown for p in points], ends, objective, sr.sweep_direction(self.config))
        print_summary(got)
        return [self.returned(p, r.state, r) for p, r in zip(points, got)]

    def returned(self, point: "_Point", state: str, result: Any = None, write: bool = True) -> JobReturn:
        """Hydra's answer for a point this launcher submitted: its task config and Hydra config (as Hydra's own
        launchers give them; composed again from the sweep cache when first read), its job dir
        `<sweep.dir>/<sweep.subdir>` (made, with `.hydra/` when `hydra.output_subdir` is set), and its result:
        COMPLETED with a RunResult, or FAILED with RunFailed."""
        from trainstack.run import result as sr

        ret = _PointReturn(lambda: self.point_config(point.overrides, point.num), overrides=list(point.overrides),
                           working_dir=str(point.job_dir), task_name=point.task_name)
        if write:
            point.job_dir.mkdir(parents=True, exist_ok=True)
            if point.output_subdir:
                from hydra.core.utils import _save_config

                hydra_cfg = ret.hydra_cfg
                out = point.job_dir / str(hydra_cfg.hydra.output_subdir)  # Hydra's job files (run_job's names)
                task_overrides = OmegaConf.create(list(hydra_cfg.hydra.overrides.task))
                for name, node in (("config", ret.cfg), ("hydra", hydra_cfg), ("overrides", task_overrides)):
                    _save_config(node, f"{name}.yaml", out)  # type: ignore[arg-type]
        result = result or sr.RunResult(num=point.num, run_id=point.run_id, run_dir=point.run_dir, overrides=point.shown,
                                        state=state)
        ret.status = JobStatus.FAILED if result.state == sr.FAILED else JobStatus.COMPLETED
        ret.return_value = sr.RunFailed(result) if result.state == sr.FAILED else result
        return ret


class _Point(NamedTuple):
    """What a sweep keeps of a point until the sweep ends: its answer's facts (a submitted point's spec is in the
    list of specs to submit)."""

    num: int
    shown: list[str]
    overrides: list[str]
    run_id: str
    run_dir: str
    job_dir: Path
    task_name: str
    output_subdir: bool


def _made_on_read(name: str) -> Any:
    """A JobReturn field that `_PointReturn` makes when it is first read (and that can still be set)."""

    def get(self: "_PointReturn") -> Any:
        self._make()
        return self.__dict__.get(name)

    def put(self: "_PointReturn", value: Any) -> None:
        self.__dict__[name] = value

    return property(get, put)


class _PointReturn(JobReturn):
    """A point's JobReturn whose `cfg` and `hydra_cfg` are made when first read, from the point composed again
    (the sweep cache: a few ms): holding every point's config until the sweep ended grew a sweep's memory by
    ~0.4 MiB a point, and copying them out cost ~10 ms a point that nothing of trainstack reads."""

    cfg = _made_on_read("_cfg")  # type: ignore[assignment]
    hydra_cfg = _made_on_read("_hydra_cfg")  # type: ignore[assignment]

    def __init__(self, compose: Any, **fields: Any):
        super().__init__(**fields)
        self._compose = compose

    def _make(self) -> None:
        if self.__dict__.get("_cfg") is None and getattr(self, "_compose", None) is not None:
            task_cfg, self._compose = self._compose(), None
            self._hydra_cfg = OmegaConf.masked_copy(task_cfg, "hydra")
            self._cfg = OmegaConf.masked_copy(task_cfg, [k for k in task_cfg if k != "hydra"])


def _say(text: str) -> None:
    """A report line on stderr, each line folded to the terminal's width (whole in a pipe)."""
    from trainstack.terminal.tables import fold, output_width

    width = output_width(sys.stderr)
    print("\n".join(f for ln in text.split("\n") for f in fold(ln, width, "", "    " if ln.startswith("  ") else "  ")),
          file=sys.stderr, flush=True)
