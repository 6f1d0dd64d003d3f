"""`hydra/sweeper: trainstack` and `hydra/launcher: trainstack_local` (the defaults in conf/config.yaml).

Behaviour is Hydra's BasicSweeper/BasicLauncher; only how each point's config is composed differs
(see trainstack/sweep_cache.py, equivalence tested in tests/test_sweep_cache.py).
"""

import os
import sys
from dataclasses import dataclass
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
    from trainstack import sweep_points
    from trainstack.errors import ConfigErrors, report_and_exit

    problem = sweep_points.plugin_problem(str(OmegaConf.select(config, "cluster.launcher", default="") or ""))
    if problem:
        sweep_points.remove_fresh_sweep_dir(str(config.hydra.sweep.dir))
        report_and_exit(ConfigErrors([problem]))


class TrainstackSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from trainstack.sweep_cache import SweepConfigCache

        assert self.hydra_context is not None and self.config is not None
        refuse_plugin_launchers(self.config)
        cache = SweepConfigCache.for_master(self.hydra_context.config_loader, self.config)
        for overrides in batch:
            cache.load(list(overrides), keep=True)  # the launcher takes these configs (no second copy)


class TrainstackLocalLauncher(BasicLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from trainstack import sweep_points
        from trainstack.errors import ConfigErrors, report_and_exit
        from trainstack.sweep_cache import SweepConfigCache

        setup_globals()
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        refuse_plugin_launchers(self.config)  # another sweeper (Optuna) skips the basic one's check
        cache = SweepConfigCache.for_master(self.hydra_context.config_loader, self.config)
        configs = []
        for idx, overrides in enumerate(job_overrides):
            sweep_config = cache.load(list(overrides))
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = initial_job_idx + idx
                sweep_config.hydra.job.num = initial_job_idx + idx
            configs.append(sweep_config)
        dry = all(bool(c.get("dry_run")) for c in configs)
        errors = sweep_points.check_points(configs)  # every point, before the first one runs (or prints)
        if errors:
            sweep_points.remove_fresh_sweep_dir(str(self.config.hydra.sweep.dir))
            report_and_exit(ConfigErrors(errors))
        if not dry:
            Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        runs: List[JobReturn] = []
        if dry:  # every point was checked above; each task prints its line
            runs = [self._run_dry_point(c) for c in configs]
            sweep_dir = str(self.config.hydra.sweep.dir)
            sweep_points.remove_empty_dirs(sweep_dir, [str(Path(sweep_dir) / str(c.hydra.job.num)) for c in configs])
            return runs
        for sweep_config in configs:
            runs.append(run_job(hydra_context=self.hydra_context, task_function=self.task_function,
                                config=sweep_config, job_dir_key="hydra.sweep.dir",
                                job_subdir_key="hydra.sweep.subdir"))
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        results = [r.return_value for r in runs
                   if r.status == JobStatus.COMPLETED and isinstance(r.return_value, sweep_points.PointResult)]
        if results:
            sweep_points.print_summary(results)
        failed = [r for r in runs if r.status != JobStatus.COMPLETED] + [r for r in results if r.code != 0]
        if failed:
            sys.exit(1)
        return runs

    def _run_dry_point(self, sweep_config) -> JobReturn:
        """A dry-run point's task without Hydra's ``run_job``: no output dir (a dry run writes nothing),
        no job logging, no saved .hydra/ files, and none of its three copies of the config (two deep
        copies and ``set_config``'s masked copy, ~60 ms a point). The task reads the same config and
        ``HydraConfig.get()``; Hydra's job callbacks are not called for dry-run points."""
        from trainstack.sweep_cache import set_hydra_config

        assert self.task_function is not None
        set_hydra_config(sweep_config)
        ret = JobReturn()
        ret.cfg = sweep_config
        ret.overrides = [str(o) for o in sweep_config.hydra.overrides.task]
        ret.working_dir = os.getcwd()
        ret.task_name = str(sweep_config.hydra.job.name)
        try:
            ret.return_value = self.task_function(sweep_config)
            ret.status = JobStatus.COMPLETED
        except BrokenPipeError:  # the reader of the output left (`| head`): ends the sweep quietly (trainstack/pipes.py)
            raise
        except Exception as ex:  # as run_job does: the sweep reports it
            ret.return_value = ex
            ret.status = JobStatus.FAILED
        return ret
