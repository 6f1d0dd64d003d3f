"""`hydra/sweeper: trainstack` and `hydra/launcher: trainstack_local` (the defaults in conf/config.yaml).

Behaviour is Hydra's BasicSweeper/BasicLauncher; only how each point's config is composed differs
(see trainstack/config/sweep_cache.py, equivalence tested in tests/test_sweep_cache.py), and a dry-run point
is checked and printed by the launcher (trainstack/sweep/points.py, `PointChecker`): the points are
streamed, each composed once and kept as its printed line only, so a dry sweep's memory does not
grow with its points and nothing is left in the sweep dir.
"""

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import List, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn, JobStatus, configure_log, run_job, setup_globals
from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from omegaconf import OmegaConf, open_dict

# trainstack's modules are imported where used: Hydra's plugin scan imports this module in every
# Hydra app of the venv, which should pay nothing for trainstack.


@dataclass
class TrainstackSweeperConf:
    _target_: str = "hydra_plugins.trainstack_local.plugins.TrainstackSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[dict] = None


@dataclass
class TrainstackLocalLauncherConf:
    _target_: str = "hydra_plugins.trainstack_local.plugins.TrainstackLocalLauncher"


ConfigStore.instance().store(group="hydra/sweeper", name="trainstack", node=TrainstackSweeperConf, provider="trainstack")
ConfigStore.instance().store(group="hydra/launcher", name="trainstack_local", node=TrainstackLocalLauncherConf,
                             provider="trainstack")


def refuse_plugin_launchers(config) -> None:
    """Under the in-process launcher, a cluster whose launcher submits sweeps through its own plugin is
    refused once, from the master config (every non-swept key), before any point is composed."""
    if "trainstack_local" not in str(OmegaConf.select(config, "hydra.launcher._target_", default="") or ""):
        return
    from trainstack.sweep import points as sweep_points
    from trainstack.errors import ConfigErrors, report_and_exit

    problem = sweep_points.plugin_problem(str(OmegaConf.select(config, "cluster.launcher", default="") or ""))
    if problem:
        sweep_points.remove_fresh_sweep_dir(str(config.hydra.sweep.dir))
        report_and_exit(ConfigErrors([problem]))


def launchers_wait(configs: Sequence) -> bool:
    """Does every point's launcher return only when its run has ended (local; ray_job unless wait=false)?"""
    from trainstack.errors import ConfigErrors
    from trainstack.registry import launcher_class

    for c in configs:
        name = str(OmegaConf.select(c, "cluster.launcher", default="local") or "local")
        try:
            cls = launcher_class(name)
        except ConfigErrors:  # an unknown launcher: the point's own check names it
            continue
        node = OmegaConf.select(c, f"cluster.{name}", default=None)
        settings = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else {}
        if not cls.waits_with({str(k): v for k, v in settings.items()} if isinstance(settings, dict) else {}):
            return False
    return True


class TrainstackSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from trainstack.sweep import points as sweep_points
        from trainstack.config.sweep_cache import SweepConfigCache

        assert self.hydra_context is not None and self.config is not None
        if not sweep_points.is_trainstack_config(self.config):  # another app: Hydra's basic sweeper, as it is
            return super().validate_batch_is_legal(batch)
        refuse_plugin_launchers(self.config)
        if str(OmegaConf.select(self.config, "hydra.launcher._target_", default="")).startswith(
                "hydra_plugins.trainstack_"):
            return  # trainstack's launchers compose and check every point before the first runs: one composition
        cache = SweepConfigCache.for_master(self.hydra_context.config_loader, self.config)
        for overrides in batch:
            cache.load(list(overrides))


class TrainstackLocalLauncher(BasicLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from trainstack.sweep import points as sweep_points
        from trainstack.run import result as sweep_result
        from trainstack.errors import ConfigErrors, report_and_exit
        from trainstack.config.sweep_cache import SweepConfigCache

        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        if not sweep_points.is_trainstack_config(self.config):  # another app: Hydra's basic launcher, as it is
            return super().launch(job_overrides, initial_job_idx)
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        refuse_plugin_launchers(self.config)  # another sweeper (Optuna) skips the basic one's check
        try:
            objective = sweep_result.sweep_objective(self.config)
        except ConfigErrors as err:
            sweep_points.remove_fresh_sweep_dir(str(self.config.hydra.sweep.dir))
            report_and_exit(err)
        cache = SweepConfigCache.for_master(self.hydra_context.config_loader, self.config)
        checker = sweep_points.PointChecker()
        points = []  # each point as checked: a dry one's line (sweep_points.DryPoint), a launch's config
        try:
            for idx, overrides in enumerate(job_overrides):  # every point, before the first one runs (or prints)
                sweep_config = cache.load(list(overrides))
                with open_dict(sweep_config):
                    sweep_config.hydra.job.id = initial_job_idx + idx
                    sweep_config.hydra.job.num = initial_job_idx + idx
                points.append((overrides, checker.check(sweep_config)))
            errors = checker.errors()
        except ConfigErrors as stop:  # one problem every point would have
            errors = stop.errors
        sweep_dir = str(self.config.hydra.sweep.dir)
        dry = all(isinstance(p, sweep_points.DryPoint) for _, p in points)
        if not errors:  # a sweeper that reads each point's result (Optuna) needs one: refused once, here
            configs = [p for _, p in points if p is not None and not isinstance(p, sweep_points.DryPoint)]
            errors = sweep_result.results_problems(self.config, dry=dry, waits=launchers_wait(configs),
                                                   launcher="trainstack_local")
        if errors:
            sweep_points.remove_fresh_sweep_dir(sweep_dir)
            report_and_exit(ConfigErrors(errors))
        if not dry:
            Path(sweep_dir).mkdir(parents=True, exist_ok=True)
        runs: List[JobReturn] = []
        for overrides, point in points:
            if isinstance(point, sweep_points.DryPoint):  # checked above: its line, no task, no config kept
                point.emit()
                runs.append(_returned(overrides, point))
                continue
            assert point is not None  # a failed point stopped the sweep above
            runs.append(run_job(hydra_context=self.hydra_context, task_function=self.task_function,
                                config=point, job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir"))
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        if dry:  # a dry sweep writes nothing: Hydra's point dirs and multirun.yaml go
            sweep_points.remove_empty_dirs(sweep_dir, [str(Path(sweep_dir) / str(i + initial_job_idx))
                                                       for i in range(len(points))])
            sweep_points.remove_fresh_sweep_dir(sweep_dir)
            return runs
        direction = sweep_result.sweep_direction(self.config)
        results = []
        for r in runs:  # each point's result, its objective read from its run dir (sweep_result.py)
            if r.status == JobStatus.COMPLETED and isinstance(r.return_value, sweep_result.RunResult):
                result = sweep_result.finish(r.return_value, objective, direction)
                results.append(result)
                if result.state == sweep_result.FAILED:  # the sweeper stops with exit 1: RunFailed's message
                    r.status, r.return_value = JobStatus.FAILED, sweep_result.RunFailed(result)
        if results:
            sweep_points.print_summary(results)
        return runs


def _returned(overrides: Sequence[str], point) -> JobReturn:
    """A dry point's answer to the sweeper: checked and printed by the launcher, no task run, no config kept
    (a dry sweep's memory stays flat in its points); its result is CHECKED (trainstack/run/result.py)."""
    from trainstack.run.result import CHECKED, RunResult

    ret = JobReturn(overrides=list(overrides), cfg=_empty(), hydra_cfg=None, working_dir=os.getcwd(),
                    task_name="trainstack")
    ret.status = JobStatus.COMPLETED
    ret.return_value = RunResult(num=point.num, run_id=point.run_id, run_dir=point.run_dir, state=CHECKED,
                                 overrides=list(point.overrides))
    return ret


@lru_cache(maxsize=1)
def _empty():
    return OmegaConf.create({})
