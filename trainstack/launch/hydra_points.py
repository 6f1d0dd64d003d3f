"""What the remote Hydra launchers (hydra/launcher=trainstack_slurm, =lium) share: the launcher's
parameters, each point's config composed through the sweep cache and built into a run, and the
refusal of an Optuna sweeper on a launcher that returns before the runs end.

Plugins subclass `PointLauncher` through this module (`hydra_points.PointLauncher`), so Hydra's
plugin scan, which registers every Launcher class a plugin module names, does not list it."""
from __future__ import annotations

import os
from typing import Any, Sequence

from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from omegaconf import OmegaConf


class PointLauncher(Launcher):
    def __init__(self, **params: Any) -> None:
        self.params = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
                       for k, v in params.items()}
        self.config = None
        self.task_function = None
        self.hydra_context = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def build_point(self, overrides: Sequence[str]):
        """(run, command, the point's task config) for one sweep point, composed once per point."""
        from hydra.core.hydra_config import HydraConfig

        from trainstack.pipeline import build
        from trainstack.resolve import Origin
        from trainstack.sweep_cache import SweepConfigCache

        assert self.hydra_context is not None and self.config is not None
        sweep_config = SweepConfigCache.for_master(self.hydra_context.config_loader, self.config).load(list(overrides))
        HydraConfig.instance().set_config(sweep_config)
        origin = Origin.from_hydra(sweep_config.hydra, cwd=os.getcwd())
        run, cmd = build(sweep_config, origin)  # resolve leaves the hydra node out: no copy of the config
        return run, cmd, sweep_config

    def refuse_optuna_without_wait(self, what: str) -> None:
        """The Optuna sweeper needs each trial's metric, which exists only once the `what` has ended."""
        from trainstack.errors import ConfigError, ConfigErrors, report_and_exit

        assert self.config is not None
        target = str(OmegaConf.select(self.config, "hydra.sweeper._target_", default="") or "")
        if "optuna" in target.lower() and not self.params.get("wait"):
            report_and_exit(ConfigErrors([ConfigError(
                "hydra.launcher.wait", f"the Optuna sweeper needs each trial's metric, which exists only after the "
                f"{what} has finished", "add hydra.launcher.wait=true", value=False)]))

    @staticmethod
    def returned(overrides: Sequence[str], value: Any, status: JobStatus) -> JobReturn:
        """What Hydra's sweeper gets for a point the launcher did not run in this process."""
        ret = JobReturn(overrides=list(overrides), cfg=OmegaConf.create({}), hydra_cfg=None,
                        working_dir=os.getcwd(), task_name="trainstack")
        ret.status = status
        ret.return_value = value
        return ret
