"""SLURM: size a job from `cluster`, submit it through submitit, record it; run it inside the job.

One run = one SLURM job named after its `run_id` with `--dependency=singleton`, so SLURM never
runs two jobs of one run at once (the run's lease is the second fence). The submit host writes
the run's spec into its run dir first; the job executes `PointRunner`
(trainstack/launch/slurm_job.py): Ray bootstrap when the backend needs it, then
`python -m trainstack exec RUN_DIR`, which runs the stored command under the lifecycle (lease ->
resume plan -> trainer -> events/status) with no recomposition: editing conf/ or the code after
submitting never changes the run. Preemption/timeout: submitit calls `PointRunner.checkpoint`,
the run is stopped with its grace period and the same call is requeued; the requeued job
executes the same stored spec and resumes from its latest complete checkpoint.

Used by the Hydra launcher `hydra/launcher=slurm` (plugins/hydra_plugins/trainstack_slurm/) for
sweeps and by `SlurmLauncher.submit` for a single run with `cluster.launcher: slurm`.
Docs: docs/slurm.md.
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from trainstack.backends import BACKENDS
from trainstack.errors import ConfigError, ConfigErrors
from trainstack.launch.base import Launcher
from trainstack.launch.slurm_job import Point, PointRunner
from trainstack.rundir import RunDir, atomic_write, layout, manifest, now_iso
from trainstack.runspec import RunSpec
from trainstack.schema import ClusterSpec

# Launcher settings: `hydra.launcher.<key>` for sweeps, `cluster.extra.launcher.<key>` for both.
DEFAULTS: dict[str, Any] = {
    "wait": False,              # block until every job has ended (Hydra's behaviour; Optuna needs it)
    "dry": False,               # sweeps: compose, validate, size and write the manifest; submit nothing
    "array": False,             # one sbatch array per resource shape instead of one job per point (see docs)
    "timeout_min": 60,          # when cluster.time_min is null
    "cpus_per_task": 1,         # when cluster.cpus_per_node is null
    "mem_gb": None,             # when cluster.mem_gb is null (SLURM's DefMemPerCPU applies)
    "signal_delay_s": 120,      # USR2 this long before the time limit: checkpoint + requeue
    "max_num_timeout": 3,       # requeues after hitting the time limit (submitit)
    "max_requeues": 10,         # requeues of any cause (preemption + timeout), via SLURM_RESTART_COUNT
    "ray_timeout_s": 300,       # rank 0 waits this long for every node and GPU to join Ray
    "metric": "rollout/raw_reward",  # what a finished job returns to the sweeper (Optuna)
    "setup": None,              # shell lines before srun in the sbatch script
    "throttle_s": 0.02,         # pause between two sbatch calls (submitit's default is 0.2 s)
    "submitit_folder": None,    # default: <sweep_dir>/.submitit/%j or <run_dir>/slurm/%j
}


def settings_for(cluster: ClusterSpec, overrides: dict | None = None) -> dict[str, Any]:
    """DEFAULTS < cluster.extra.launcher < explicit overrides (hydra.launcher.*)."""
    out = dict(DEFAULTS)
    extra = cluster.extra or {}
    out.update({k: v for k, v in (extra.get("launcher") or {}).items()})
    out.update({k: v for k, v in (overrides or {}).items() if v is not None or k in ("mem_gb", "setup")})
    return out


def sbatch_extra(cluster: ClusterSpec) -> dict[str, Any]:
    """Extra sbatch options from `cluster.extra.sbatch` (a map of long options without `--`),
    else the scalar entries of `cluster.extra` itself (`launcher` and `sbatch` are reserved)."""
    extra = cluster.extra or {}
    if isinstance(extra.get("sbatch"), dict):
        return dict(extra["sbatch"])
    return {k: v for k, v in extra.items() if k not in ("launcher", "sbatch") and not isinstance(v, (dict, list))}


def merge_dependency(user: str | None, singleton: bool) -> str | None:
    parts = [p for p in (user or "").split(",") if p]
    if singleton and "singleton" not in parts:
        parts.append("singleton")
    return ",".join(parts) or None


def executor_params(cluster: ClusterSpec, job_name: str, settings: dict, singleton: bool = True,
                    passthrough: dict[str, Any] | None = None) -> dict[str, Any]:
    """submitit parameters of one job: nodes, one task per node, GPUs as gres, CPUs, memory,
    partition, account, time limit, extra sbatch options, job name, singleton dependency; plus
    `passthrough` sbatch fields (qos, constraint, exclude, gres, srun_args, ...) as they are."""
    additional = {k.replace("-", "_"): v for k, v in sbatch_extra(cluster).items()}
    dependency = merge_dependency(additional.pop("dependency", None), singleton)
    if dependency:
        additional["dependency"] = dependency
    params: dict[str, Any] = {
        "name": job_name,
        "nodes": int(cluster.num_nodes),
        "tasks_per_node": 1,
        "cpus_per_task": int(cluster.cpus_per_node or settings.get("cpus_per_task") or 1),
        "timeout_min": int(cluster.time_min or settings.get("timeout_min") or 60),
        "slurm_signal_delay_s": int(settings.get("signal_delay_s", 120)),
        "slurm_additional_parameters": additional,
    }
    mem = cluster.mem_gb if cluster.mem_gb is not None else settings.get("mem_gb")
    if mem is not None:
        params["mem_gb"] = int(mem)
    if cluster.accelerator == "gpu" and cluster.gpus_per_node:
        params["slurm_gres"] = f"gpu:{int(cluster.gpus_per_node)}"
    if cluster.partition:
        params["slurm_partition"] = cluster.partition
    if cluster.account:
        params["slurm_account"] = cluster.account
    if settings.get("setup"):
        params["slurm_setup"] = list(settings["setup"])
    params.update({f"slurm_{k}": v for k, v in (passthrough or {}).items() if v is not None})
    return params


def render_sbatch(params: dict[str, Any], folder: str = "/tmp/submitit/%j") -> str:
    """The #SBATCH header submitit writes for these parameters (for tests and `--dry`)."""
    from submitit.slurm.slurm import _make_sbatch_string

    kw = {("time" if k == "timeout_min" else k[len("slurm_"):] if k.startswith("slurm_") else k): v
          for k, v in params.items()}
    if "name" in kw:
        kw["job_name"] = kw.pop("name")
    if "tasks_per_node" in kw:
        kw["ntasks_per_node"] = kw.pop("tasks_per_node")
    if "mem_gb" in kw:
        kw["mem"] = f"{kw.pop('mem_gb')}GB"
    if "additional_parameters" in kw:
        kw["additional_parameters"] = dict(kw["additional_parameters"])
    return _make_sbatch_string(command="python -u -m submitit.core._submit FOLDER", folder=folder, **kw)


def make_point(spec: RunSpec, settings: dict) -> Point:
    cluster = spec.cluster
    return Point(run_id=spec.run_id, run_dir=spec.run_dir, overrides=list(spec.overrides), cwd=spec.provenance.cwd,
                 needs_ray=BACKENDS[cluster.backend].needs_ray,  # slime: one Ray head per job
                 num_nodes=int(cluster.num_nodes),
                 gpus_per_node=int(cluster.gpus_per_node) if cluster.accelerator == "gpu" else 0,
                 cpus_per_node=cluster.cpus_per_node or settings.get("cpus_per_task"),
                 grace_s=float(spec.resume.grace_s), max_requeues=int(settings.get("max_requeues", 10)),
                 ray_timeout_s=float(settings.get("ray_timeout_s", 300)), metric=settings.get("metric"))


def store_pending(spec: RunSpec) -> None:
    """Before submitting: refuse what the resume check would refuse in the job, then store the spec
    the job will execute (a pending run is visible to status, compare and diff)."""
    from trainstack.resume import plan

    rundir = RunDir(spec.run_dir)
    plan(spec, rundir)  # raises ConfigErrors (changed training config, resume policy, broken checkpoint)
    rundir.write_spec(spec)


def _executor(folder: str, max_num_timeout: int, throttle_s: float):
    import submitit

    if shutil.which("sbatch") is None:
        raise RuntimeError("sbatch not found: this machine is not a SLURM submit host "
                           "(scripts/slurm-local.sh up starts a local one-node cluster)")
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=int(max_num_timeout))
    # submitit sleeps 0.2 s between two sbatch calls (64 points: 13 s); sbatch's own round trip
    # already paces a busy controller, so trainstack waits `throttle_s` (private submitit attribute).
    inner = getattr(executor, "_executor", None)
    if inner is not None and hasattr(inner, "_throttling"):
        inner._throttling = float(throttle_s)
    return executor


def _shape(params: dict) -> str:
    return json.dumps({k: v for k, v in params.items() if k != "name"}, sort_keys=True, default=str)


def submit_points(points: Sequence[Point], params: Sequence[dict], folder: str, settings: dict,
                  array_name: str | None = None) -> list:
    """One SLURM job per point (job name = run_id, singleton), or with `array` one sbatch array per
    resource shape named `array_name` (SLURM gives all tasks of an array one name, so the per-run
    singleton fence is not available there: the run's lease is then the only fence)."""
    executor = _executor(folder, settings.get("max_num_timeout", 3), settings.get("throttle_s", 0.02))
    runner = PointRunner()
    if not settings.get("array") or len(points) == 1:
        one_each = []
        for point, p in zip(points, params):
            executor.update_parameters(**p)
            one_each.append(executor.submit(runner, point))
        return one_each
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(params):
        groups.setdefault(_shape(p), []).append(i)
    jobs: list = [None] * len(points)
    for idxs in groups.values():
        p = dict(params[idxs[0]])
        p["name"] = array_name or "trainstack-sweep"
        add = dict(p.get("slurm_additional_parameters") or {})
        dep = merge_dependency(add.pop("dependency", None), False)
        dep = ",".join(x for x in (dep or "").split(",") if x and x != "singleton")
        if dep:
            add["dependency"] = dep
        p["slurm_additional_parameters"] = add
        p["slurm_array_parallelism"] = int(settings.get("array_parallelism", 256))
        executor.update_parameters(**p)
        for i, job in zip(idxs, executor.map_array(runner, [points[i] for i in idxs])):
            jobs[i] = job
    return jobs


def log_paths(job) -> dict[str, str]:
    return {"stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr)}


def record_job(point: Point, job, folder: str, sweep_dir: str | None) -> dict:
    rec = {"run_id": point.run_id, "run_dir": point.run_dir, "job_id": str(job.job_id),
           "job_name": point.run_id, "submitit_folder": folder, "sweep_dir": sweep_dir,
           "submitted_at": now_iso(), "logs": log_paths(job)}
    rundir = RunDir(point.run_dir)
    atomic_write(rundir.slurm_file, json.dumps(rec, indent=1) + "\n")
    if rundir.status().get("state") in (None, "created", "finished", "failed", "interrupted", "submitted"):
        rundir.update_status(run_id=point.run_id, state="submitted", job_id=str(job.job_id))
    return rec


def write_manifest(sweep_dir: Path, points: Sequence[Point], jobs: Sequence, job_nums: Iterable[int],
                   settings: dict, folder: str, submit_s: float) -> Path:
    runs = []
    for point, job, num in zip(points, jobs, job_nums):
        rec = record_job(point, job, folder, str(sweep_dir))
        runs.append(manifest.SweepRun(run_id=point.run_id, run_dir=point.run_dir, overrides=list(point.overrides),
                                      job_num=num, job_id=str(job.job_id),
                                      job_name=None if settings.get("array") else point.run_id, logs=rec["logs"]))
    return manifest.record(sweep_dir, runs, scheduler="slurm", mode="array" if settings.get("array") else "jobs",
                           wait=bool(settings.get("wait")), submitit_folder=folder, submit_s=submit_s)


def submit_host_problems(dry: bool = False, key: str = "cluster.launcher") -> list[ConfigError]:
    """Submitting needs submitit (the slurm extra) and `sbatch` on PATH; a dry sweep only submitit
    (it renders each job's #SBATCH header with it)."""
    import importlib.util

    if importlib.util.find_spec("submitit") is None:
        return [ConfigError(key, "SLURM support is not installed "
                            "(the submitit package is missing)", "pip install 'trainstack[slurm]' (or make install)",
                            value="slurm")]
    if not dry and shutil.which("sbatch") is None:
        return [ConfigError(key, "sbatch is not on PATH: this machine is not a SLURM submit host, so "
                            "nothing can be submitted from it", "run this on a SLURM login node (scripts/slurm-local.sh "
                            "up starts a one-node cluster here); to review a sweep without SLURM add "
                            "hydra.launcher.dry=true; to run here use cluster.launcher=local", value="slurm")]
    return []


class SlurmLauncher(Launcher):
    """Submit one SLURM job per run; the job executes the stored spec (`trainstack exec`)."""

    name = "slurm"
    waits = False
    sweep_launcher = "slurm"

    def submit_host_problems(self, dry: bool = False) -> list[ConfigError]:
        return submit_host_problems(dry)

    def submit(self, spec: RunSpec) -> int:
        problems = submit_host_problems()
        if problems:
            raise ConfigErrors(problems)
        settings = settings_for(spec.cluster)
        store_pending(spec)
        point = make_point(spec, settings)
        params = executor_params(spec.cluster, spec.run_id, settings)
        folder = settings.get("submitit_folder") or str(Path(spec.run_dir) / layout.SLURM_FOLDER / "%j")
        t0 = time.perf_counter()
        try:
            job = submit_points([point], [params], folder, settings)[0]
        except Exception as ex:  # sbatch refused (bad partition/account, no SLURM): say so, exit 2
            print(f"trainstack: submitting {spec.run_id} to SLURM failed: {ex}", file=sys.stderr)
            return 2
        rec = record_job(point, job, folder, None)
        print(f"trainstack: submitted {spec.run_id} as SLURM job {job.job_id} ({time.perf_counter() - t0:.2f} s); "
              f"logs {rec['logs']['stdout']}\n  follow it: trainstack status {spec.run_id}    stop it: trainstack "
              f"cancel {spec.run_id}", file=sys.stderr, flush=True)
        if not settings.get("wait"):
            return 0
        try:
            job.result()
            return 0
        except Exception as ex:
            print(f"trainstack: SLURM job {job.job_id} of {spec.run_id} failed: {ex}", file=sys.stderr)
            return 1
