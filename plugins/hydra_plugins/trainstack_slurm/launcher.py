"""TrainstackSlurmLauncher: hydra-submitit-launcher's SlurmLauncher, one job per sweep point.

What it changes: each point is composed and validated at submit time (nothing is submitted if
one point is invalid), its spec stored in its run dir, sized from its own `cluster`, named after
its run_id with `--dependency=singleton`, and runs trainstack's `PointRunner` (Ray bootstrap,
`python -m trainstack exec RUN_DIR` on the stored spec, checkpoint -> requeue -> resume).
`wait=false` writes the manifest and returns at once; `wait=true` keeps Hydra's blocking
behaviour and returns each run's metric to the sweeper.
"""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any, List, Sequence

from hydra.core.utils import JobReturn, JobStatus, filter_overrides

from hydra_plugins.trainstack_slurm.config import FROM_CLUSTER, SBATCH_PASSTHROUGH
from trainstack.launch import hydra_points

log = logging.getLogger(__name__)

SETTING_KEYS = ("wait", "array", "dry", "timeout_min", "cpus_per_task", "mem_gb", "signal_delay_s", "max_num_timeout",
                "max_requeues", "ray_timeout_s", "metric", "setup", "array_parallelism", "throttle_s")


class TrainstackSlurmLauncher(hydra_points.PointLauncher):
    def _check_fields(self) -> None:
        """Every field reaches sbatch or is refused here, naming the key that decides it."""
        from trainstack.errors import ConfigError, ConfigErrors, report_and_exit

        errors = [ConfigError(f"hydra.launcher.{k}", f"each point's cluster decides this {where}",
                              f"remove hydra.launcher.{k}" + (f" and set {where}" if where.startswith("cluster.") else ""),
                              value=self.params[k])
                  for k, where in FROM_CLUSTER.items() if self.params.get(k) is not None]
        if errors:
            report_and_exit(ConfigErrors(errors))

    def _passthrough(self) -> dict[str, Any]:
        return {k: self.params[k] for k in SBATCH_PASSTHROUGH if self.params.get(k) is not None}

    def _settings(self, cluster) -> dict[str, Any]:
        from trainstack.launch.slurm import settings_for

        s = settings_for(cluster, {k: self.params.get(k) for k in SETTING_KEYS if k in self.params})
        return s

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from trainstack.errors import ConfigErrors, report_and_exit
        from trainstack.launch import slurm as ts
        from trainstack.preflight import preflight
        from trainstack.runspec import RunSpec
        from trainstack.sweep_points import point_errors, remove_fresh_sweep_dir, shared_run_id_errors

        assert self.config is not None
        self.refuse_optuna_without_wait("job")
        self._check_fields()
        t0 = time.perf_counter()
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        folder = str(Path(str(self.params["submitit_folder"])).absolute())
        points, params, specs, errors = [], [], [], []
        settings: dict[str, Any] = {}
        for idx, overrides in enumerate(job_overrides):  # every point checked before the first is submitted
            try:
                run, cmd, _ = self.build_point(overrides)
                preflight(run, cmd, launching=False, submitted_by="slurm")  # resume plan, run dir, deferred checks
            except ConfigErrors as err:
                errors += point_errors(initial_job_idx + idx, list(filter_overrides(overrides)), err.errors)
                continue
            spec = RunSpec.from_run(run, cmd)
            settings = self._settings(run.cluster)
            partial = dict(run.cluster.__dict__)
            for key in ("partition", "account"):  # launcher fields as fallbacks of the cluster's
                if not partial.get(key) and self.params.get(key):
                    partial[key] = self.params[key]
            extra = dict(partial.get("extra") or {})
            if self.params.get("additional_parameters"):
                sb = dict(extra.get("sbatch") or ts.sbatch_extra(run.cluster))
                extra = {**{k: v for k, v in extra.items() if k == "launcher"},
                         "sbatch": {**self.params["additional_parameters"], **sb}}
            partial["extra"] = extra
            cluster = type(run.cluster)(**partial)
            specs.append(spec)
            points.append(ts.make_point(spec, settings))
            params.append(ts.executor_params(cluster, run.run_id, settings, passthrough=self._passthrough()))
            log.info(f"\t#{initial_job_idx + idx} : {run.run_id} : {' '.join(filter_overrides(overrides))}")
        # one job name per run: two points with one run id would share a run dir and a singleton job name
        errors += shared_run_id_errors([(p.run_id, list(p.overrides)) for p in points], what="run and SLURM job")
        dry = bool(self.params.get("dry") or settings.get("dry"))
        if not errors:
            errors += ts.submit_host_problems(dry=dry, key="hydra/launcher")
        if errors:
            remove_fresh_sweep_dir(str(sweep_dir))
            report_and_exit(ConfigErrors(errors))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        t_built = time.perf_counter()
        if dry:
            return self._dry(sweep_dir, points, params, job_overrides, initial_job_idx, folder, t_built - t0)
        for spec in specs:  # every point valid: store what each job will execute
            ts.store_pending(spec)
        array_name = f"trainstack-{sweep_dir.name}"
        jobs = ts.submit_points(points, params, folder, settings, array_name=array_name)
        submit_s = time.perf_counter() - t0
        nums = range(initial_job_idx, initial_job_idx + len(points))
        manifest = ts.write_manifest(sweep_dir, points, jobs, nums, settings, folder, submit_s)
        print(f"trainstack: submitted {len(jobs)} SLURM job{'s' if len(jobs) != 1 else ''} in {submit_s:.2f} s "
              f"(compose+validate {t_built - t0:.2f} s): "
              + ", ".join(f"{p.run_id}={j.job_id}" for p, j in zip(points[:8], jobs[:8]))
              + (" ..." if len(jobs) > 8 else "")
              + f"\n  manifest {manifest}\n  follow: trainstack status {sweep_dir}    stop: trainstack cancel "
              f"{sweep_dir}", file=sys.stderr, flush=True)
        if not settings.get("wait"):
            return [self.returned(o, None, JobStatus.COMPLETED) for o in job_overrides]
        out: List[JobReturn] = []
        for overrides, job in zip(job_overrides, jobs):
            try:
                result = job.results()[0]
                out.append(self.returned(overrides, result.get("metric"), JobStatus.COMPLETED))
            except Exception as ex:  # noqa: BLE001 - a failed job is a failed trial, reported by Hydra
                out.append(self.returned(overrides, ex, JobStatus.FAILED))
        return out

    def _dry(self, sweep_dir: Path, points, params, job_overrides, initial_job_idx: int, folder: str,
             build_s: float) -> Sequence[JobReturn]:
        """hydra.launcher.dry=true: compose, validate and size every point; write the manifest with the
        sbatch header of each job; submit nothing."""
        from trainstack.launch.slurm import render_sbatch
        from trainstack.rundir import manifest

        runs = [manifest.SweepRun(run_id=p.run_id, run_dir=p.run_dir, overrides=list(p.overrides),
                                  job_num=initial_job_idx + i, job_name=p.run_id, sbatch=render_sbatch(prm, folder))
                for i, (p, prm) in enumerate(zip(points, params))]
        path = manifest.record(sweep_dir, runs, scheduler="slurm", mode="dry", submitit_folder=folder)
        print(f"trainstack: dry: {len(points)} SLURM job(s) composed and sized in {build_s:.2f} s, nothing submitted; "
              f"sbatch headers in {path}", file=sys.stderr, flush=True)
        return [self.returned(o, None, JobStatus.COMPLETED) for o in job_overrides]
