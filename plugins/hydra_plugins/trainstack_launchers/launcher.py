"""TrainstackLauncher: a sweep's points handed to a trainstack launcher, checked first.

`hydra/launcher=slurm` (or `=lium`, or any launcher's name) registers this class with
`launcher: <name>`. The per-point build is written once here: compose the point (through the
sweep cache) with `cluster.launcher=<name>` -> resolve and validate -> preflight -> run spec ->
`hydra.launcher.<key>` values over the point's `cluster.<name>` settings -> the launcher's own
check. Nothing is submitted unless every point passes; then `launcher.submit_sweep` submits them
all in one call, `launcher.record_sweep` writes `<sweep_dir>/sweep.json`, and `wait=true`
returns each run's metric to the sweeper (`launcher.sweep_results`).

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
from typing import Any, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from omegaconf import OmegaConf, open_dict, read_write

log = logging.getLogger(__name__)
TARGET = "hydra_plugins.trainstack_launchers.launcher.TrainstackLauncher"


def register() -> None:
    """`hydra/launcher=<name>` for every trainstack launcher (trainstack.hydra_setup calls it)."""
    from trainstack.launch.registry import names

    for name in names():
        ConfigStore.instance().store(group="hydra/launcher", name=name, node={"_target_": TARGET, "launcher": name},
                                     provider="trainstack")


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
        from trainstack.schema import to_typed

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
    def build_point(self, overrides: Sequence[str]):
        """(run, command, the point's task config), composed once per point, on this launcher."""
        from trainstack.pipeline import build
        from trainstack.resolve import Origin
        from trainstack.sweep_cache import SweepConfigCache, set_hydra_config

        sweep_config = SweepConfigCache.for_master(self.hydra_context.config_loader, self.config).load(list(overrides))
        set_hydra_config(sweep_config)
        origin = Origin.from_hydra(sweep_config.hydra, cwd=os.getcwd())
        with read_write(sweep_config), open_dict(sweep_config):  # the point's own copy (sweep_cache): no deep copy
            sweep_config.cluster.launcher = self.name  # this plugin submits every point, whatever its preset says
        run, cmd = build(sweep_config, origin)  # resolve leaves the hydra node out
        return run, cmd, sweep_config

    def point_spec(self, launcher: Any, overrides: Sequence[str], given: dict[str, Any]):
        from trainstack.errors import ConfigErrors
        from trainstack.preflight import preflight
        from trainstack.runspec import RunSpec
        from trainstack.schema import to_typed

        run, cmd, task_cfg = self.build_point(overrides)
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
        return run, cmd, spec, bool(task_cfg.get("dry_run"))

    # --- the sweep ------------------------------------------------------------------------
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from trainstack.errors import ConfigErrors, RuntimeFailure, report_and_exit, report_failure_and_exit
        from trainstack.launch.registry import get
        from trainstack.sweep_points import PointErrors, remove_fresh_sweep_dir, shared_run_id_errors

        t0 = time.perf_counter()
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        try:
            launcher = get(self.name)
            given = self.hydra_settings(type(launcher))
        except ConfigErrors as err:
            remove_fresh_sweep_dir(str(sweep_dir))
            report_and_exit(err)
        specs, dry_lines, built = [], [], []
        failed = PointErrors()
        for idx, overrides in enumerate(job_overrides):  # every point checked before the first is submitted
            shown = list(filter_overrides(overrides))
            failed.point()
            try:
                run, cmd, spec, dry = self.point_spec(launcher, overrides, given)
                built.append((spec.run_id, shown))
                if dry:  # its line only: a dry sweep's memory stays flat in its points
                    from trainstack.display import sweep_line

                    dry_lines.append(sweep_line(run, cmd))
                    continue
                launcher.check(spec)
            except ConfigErrors as err:
                failed.add(initial_job_idx + idx, shown, err.errors)
                continue
            specs.append(spec)
            log.info(f"\t#{initial_job_idx + idx} : {spec.run_id} : {' '.join(shown)}")
        # one run per point: two points with one run id would share a run dir, a job name, a lease
        errors = failed.errors() + shared_run_id_errors(built, what=launcher.sweep_point)
        settings = launcher.settings(specs[0]) if specs else None
        if not errors:
            errors += launcher.submit_host_problems(dry=bool(getattr(settings, "dry", False)) or not specs)
            for e in errors:
                e.key = "hydra/launcher" if e.key == "cluster.launcher" else e.key
        if not errors and settings is not None:
            errors += self.optuna_problems(settings)
        if errors:
            remove_fresh_sweep_dir(str(sweep_dir))
            report_and_exit(ConfigErrors(errors))
        if dry_lines:  # dry_run=true: every point checked and shown; nothing submitted
            from trainstack import display

            for line in dry_lines:
                display.print_folded_line(line)
            remove_fresh_sweep_dir(str(sweep_dir))  # a dry sweep writes nothing (Hydra's multirun.yaml goes)
            return [self.returned(o, None, JobStatus.COMPLETED) for o in job_overrides]
        sweep_dir.mkdir(parents=True, exist_ok=True)
        t_built = time.perf_counter()
        nums = list(range(initial_job_idx, initial_job_idx + len(specs)))
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
            return [self.returned(o, None, JobStatus.COMPLETED) for o in job_overrides]
        ids = ", ".join(f"{r.run_id}={r.job_id}" if r.job_id else r.run_id for r in runs[:8])
        _say(f"trainstack: {launcher.sweep_verb.format(n=n, s='s' if n != 1 else '')} in {submit_s:.2f} s "
             f"(compose+validate {t_built - t0:.2f} s): {ids}{' ...' if n > 8 else ''}\n  manifest {manifest}\n"
             f"  follow: trainstack status {sweep_dir}    stop: trainstack cancel {sweep_dir}")
        if not getattr(settings, "wait", False):
            return [self.returned(o, None, JobStatus.COMPLETED) for o in job_overrides]
        try:
            results = launcher.sweep_results(specs, runs, settings)
        except RuntimeFailure as ex:
            report_failure_and_exit(ex)
        return [self.returned(o, v, JobStatus.FAILED if isinstance(v, BaseException) else JobStatus.COMPLETED)
                for o, v in zip(job_overrides, results)]

    def optuna_problems(self, settings: Any) -> list:
        """The Optuna sweeper needs each trial's metric, which exists only once the run has ended."""
        from trainstack.errors import ConfigError

        target = str(OmegaConf.select(self.config, "hydra.sweeper._target_", default="") or "")
        if "optuna" in target.lower() and not getattr(settings, "wait", False):
            return [ConfigError("hydra.launcher.wait", "the Optuna sweeper needs each trial's metric, which exists "
                                "only after the run has finished", "add hydra.launcher.wait=true", value=False)]
        return []

    @staticmethod
    def returned(overrides: Sequence[str], value: Any, status: JobStatus) -> JobReturn:
        """What Hydra's sweeper gets for a point the launcher did not run in this process."""
        ret = JobReturn(overrides=list(overrides), cfg=OmegaConf.create({}), hydra_cfg=None,
                        working_dir=os.getcwd(), task_name="trainstack")
        ret.status = status
        ret.return_value = value
        return ret


def _say(text: str) -> None:
    """A report line on stderr, each line folded to the terminal's width (whole in a pipe)."""
    from trainstack.tables import fold, output_width

    width = output_width(sys.stderr)
    print("\n".join(f for ln in text.split("\n") for f in fold(ln, width, "", "    " if ln.startswith("  ") else "  ")),
          file=sys.stderr, flush=True)
