"""TrainstackLiumLauncher: each sweep point composed and validated at submit time (nothing is
registered if one point is invalid), its spec stored in its run dir, then every run registered
with the Lium commander; `wait=false` writes the manifest and returns, `wait=true` blocks until
every run has ended and returns each run's metric to the sweeper."""
from __future__ import annotations

import copy
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from omegaconf import OmegaConf, open_dict, read_write

log = logging.getLogger(__name__)

SETTING_KEYS = ("wait", "restart_limit", "spend_limit", "sweep_spend_limit", "commander_url", "public_url", "poll_s",
                "metric")


class TrainstackLiumLauncher(Launcher):
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

    def _build(self, overrides: Sequence[str]):
        from hydra.core.hydra_config import HydraConfig

        from trainstack.pipeline import build
        from trainstack.resolve import Origin
        from trainstack.sweep_cache import SweepConfigCache

        assert self.hydra_context is not None and self.config is not None
        sweep_config = SweepConfigCache.for_master(self.hydra_context.config_loader, self.config).load(list(overrides))
        HydraConfig.instance().set_config(sweep_config)
        origin = Origin.from_hydra(sweep_config.hydra, cwd=os.getcwd())
        task_cfg = copy.deepcopy(sweep_config)
        with read_write(task_cfg), open_dict(task_cfg):
            del task_cfg["hydra"]
        run, cmd = build(task_cfg, origin)
        return run, cmd, bool(task_cfg.get("dry_run"))

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from trainstack.errors import ConfigError, ConfigErrors, report_and_exit
        from trainstack.launch import lium as tl
        from trainstack.preflight import preflight
        from trainstack.runspec import RunSpec

        assert self.config is not None
        target = str(OmegaConf.select(self.config, "hydra.sweeper._target_", default="") or "")
        if "optuna" in target.lower() and not self.params.get("wait"):
            report_and_exit(ConfigErrors([ConfigError(
                "hydra.launcher.wait", "the Optuna sweeper needs each trial's metric, which exists only after the run "
                "has finished", "add hydra.launcher.wait=true", value=False)]))
        t0 = time.perf_counter()
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        specs, errors, dry_lines = [], [], []
        settings: dict[str, Any] = {}
        for idx, overrides in enumerate(job_overrides):
            try:
                run, cmd, dry = self._build(overrides)
                if run.cluster.launcher != "lium":
                    raise ConfigErrors([ConfigError("cluster.launcher", f"hydra/launcher=lium registers runs with the "
                                                    f"Lium commander, but this point's cluster uses '{run.cluster.launcher}'",
                                                    "add cluster=lium_cpu or cluster=lium_8xh100",
                                                    value=run.cluster.launcher)])
                preflight(run, cmd, launching=False)
                spec = RunSpec.from_run(run, cmd)
                tl.pod_request(spec)
                if dry:
                    dry_lines.append((run, cmd))
                    continue
                tl.check(spec)
            except ConfigErrors as err:
                errors.extend(err.errors)
                continue
            settings = tl.settings_for(spec.cluster.extra, {k: self.params.get(k) for k in SETTING_KEYS})
            specs.append(spec)
            log.info(f"\t#{initial_job_idx + idx} : {spec.run_id} : {' '.join(filter_overrides(overrides))}")
        if errors:
            report_and_exit(ConfigErrors(errors))
        if dry_lines:  # dry_run=true: every point checked and shown; nothing registered
            from trainstack import display

            for point, point_cmd in dry_lines:
                display.print_sweep_line(point, point_cmd)
            return [self._returned(o, None, JobStatus.COMPLETED) for o in job_overrides]
        ids = [s.run_id for s in specs]
        dup = sorted({r for r in ids if ids.count(r) > 1})
        if dup:
            report_and_exit(ConfigErrors([ConfigError("run_id", f"sweep points share run ids {dup}: the swept keys do "
                                                      "not change what is trained", "sweep a training-relevant key, or "
                                                      "set run_id per point", value=dup[0])]))
        try:
            tl.submit_specs(specs, settings, str(sweep_dir))
        except ConfigErrors as err:
            report_and_exit(err)
        submit_s = time.perf_counter() - t0
        nums = list(range(initial_job_idx, initial_job_idx + len(specs)))
        manifest = tl.write_manifest(sweep_dir, specs, nums, bool(settings.get("wait")), submit_s)
        print(f"trainstack: registered {len(specs)} run{'s' if len(specs) != 1 else ''} with the Lium commander in "
              f"{submit_s:.2f} s: {', '.join(ids[:8])}{' ...' if len(ids) > 8 else ''}\n  manifest {manifest}\n"
              f"  follow: trainstack status {sweep_dir}    stop: trainstack cancel {sweep_dir}", file=sys.stderr,
              flush=True)
        if not settings.get("wait"):
            return [self._returned(o, None, JobStatus.COMPLETED) for o in job_overrides]
        done = tl.wait_for(tl.commander(settings, start=False), ids, float(settings.get("poll_s") or 5))
        metric = settings.get("metric")
        out = []
        for overrides, rid in zip(job_overrides, ids):
            rec = done[rid]
            if rec["phase"] == "finished":
                value = (rec.get("progress") or {}).get("reward") if metric == "rollout/raw_reward" else None
                out.append(self._returned(overrides, value, JobStatus.COMPLETED))
            else:
                out.append(self._returned(overrides, RuntimeError(f"{rid}: {rec['phase']}: {rec.get('message')}"),
                                          JobStatus.FAILED))
        return out

    def _returned(self, overrides: Sequence[str], value: Any, status: JobStatus) -> JobReturn:
        ret = JobReturn(overrides=list(overrides), cfg=OmegaConf.create({}), hydra_cfg=None,
                        working_dir=os.getcwd(), task_name="trainstack")
        ret.status = status
        ret.return_value = value
        return ret
