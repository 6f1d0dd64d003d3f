"""TrainstackLiumLauncher: each sweep point composed and validated at submit time (nothing is
registered if one point is invalid), its spec stored in its run dir, then every run registered
with the Lium commander; `wait=false` writes the manifest and returns, `wait=true` blocks until
every run has ended and returns each run's metric to the sweeper."""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from hydra.core.utils import JobReturn, JobStatus, filter_overrides

from trainstack.launch import hydra_points

log = logging.getLogger(__name__)

SETTING_KEYS = ("wait", "restart_limit", "spend_limit", "sweep_spend_limit", "commander_url", "public_url", "poll_s",
                "metric")


class TrainstackLiumLauncher(hydra_points.PointLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from trainstack.errors import ConfigError, ConfigErrors, report_and_exit
        from trainstack.launch import lium as tl
        from trainstack.preflight import preflight
        from trainstack.runspec import RunSpec
        from trainstack.sweep_points import point_errors, remove_fresh_sweep_dir, shared_run_id_errors

        assert self.config is not None
        self.refuse_optuna_without_wait("run")
        t0 = time.perf_counter()
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        specs, errors, dry_lines, built = [], [], [], []
        settings: dict[str, Any] = {}
        for idx, overrides in enumerate(job_overrides):
            try:
                run, cmd, task_cfg = self.build_point(overrides)
                dry = bool(task_cfg.get("dry_run"))
                if run.cluster.launcher != "lium":
                    raise ConfigErrors([ConfigError("cluster.launcher", f"hydra/launcher=lium registers runs with the "
                                                    f"Lium commander, but this point's cluster uses '{run.cluster.launcher}'",
                                                    "add cluster=lium_cpu or cluster=lium_8xh100",
                                                    value=run.cluster.launcher)])
                preflight(run, cmd, launching=False)
                spec = RunSpec.from_run(run, cmd)
                built.append((spec.run_id, list(filter_overrides(overrides))))
                tl.pod_request(spec)
                if dry:
                    dry_lines.append((run, cmd))
                    continue
                tl.check(spec)
            except ConfigErrors as err:
                errors += point_errors(initial_job_idx + idx, list(filter_overrides(overrides)), err.errors)
                continue
            settings = tl.settings_for(spec.cluster.extra, {k: self.params.get(k) for k in SETTING_KEYS})
            specs.append(spec)
            log.info(f"\t#{initial_job_idx + idx} : {spec.run_id} : {' '.join(filter_overrides(overrides))}")
        # one run per point: two points with one run id would share a run dir, a volume and a lease
        errors += shared_run_id_errors(built)
        if errors:
            remove_fresh_sweep_dir(str(sweep_dir))
            report_and_exit(ConfigErrors(errors))
        if dry_lines:  # dry_run=true: every point checked and shown; nothing registered
            from trainstack import display

            for point, point_cmd in dry_lines:
                display.print_sweep_line(point, point_cmd)
            return [self.returned(o, None, JobStatus.COMPLETED) for o in job_overrides]
        ids = [s.run_id for s in specs]
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
            return [self.returned(o, None, JobStatus.COMPLETED) for o in job_overrides]
        done = tl.wait_for(tl.commander(settings, start=False), ids, float(settings.get("poll_s") or 5))
        metric = settings.get("metric")
        out = []
        for overrides, rid in zip(job_overrides, ids):
            rec = done[rid]
            if rec["phase"] == "finished":
                value = (rec.get("progress") or {}).get("reward") if metric == "rollout/raw_reward" else None
                out.append(self.returned(overrides, value, JobStatus.COMPLETED))
            else:
                out.append(self.returned(overrides, RuntimeError(f"{rid}: {rec['phase']}: {rec.get('message')}"),
                                          JobStatus.FAILED))
        return out
