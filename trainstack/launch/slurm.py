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

Settings: `SlurmSettings` under `cluster.slurm:` (and `hydra.launcher.<key>` for sweeps through
the shared plugin, `hydra/launcher=slurm`). Status (squeue, sacct, scontrol) and cancel (scancel)
live here too. Docs: docs/slurm.md.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from trainstack.config.backends import BACKENDS
from trainstack.config.schema import ClusterSpec
from trainstack.errors import ConfigError, ConfigErrors, SchedulerFailure
from trainstack.launch.base import Launcher
from trainstack.launch.slurm_job import Point, PointRunner
from trainstack.run.rundir import RunDir, atomic_write, manifest, now_iso
from trainstack.run.spec import RunSpec
from trainstack.storage import layout

if TYPE_CHECKING:
    from trainstack.launch.base import Row

# Fields passed to sbatch as they are (submitit's `slurm_<name>` parameters).
SBATCH_PASSTHROUGH = ("qos", "comment", "constraint", "exclude", "gres", "cpus_per_gpu", "gpus_per_task",
                      "mem_per_gpu", "mem_per_cpu", "srun_args", "stderr_to_stdout")


@dataclass
class SlurmSettings:
    """`cluster.slurm`: how a run's job is sized and submitted (the node/GPU counts are the cluster's)."""

    partition: Optional[str] = None
    account: Optional[str] = None
    time_min: int = 60  # --time
    cpus_per_node: Optional[int] = None  # --cpus-per-task (one task per node); null: 1
    mem_gb: Optional[int] = None  # --mem; null: SLURM's DefMemPerCPU
    sbatch: dict[str, Any] = field(default_factory=dict)  # more sbatch long options without `--`: {hold: true}
    signal_delay_s: int = 120  # USR2 this long before the time limit: checkpoint + requeue
    max_num_timeout: int = 3  # requeues after hitting the time limit (submitit)
    max_requeues: int = 10  # requeues of any cause (preemption + timeout), via SLURM_RESTART_COUNT
    ray_timeout_s: int = 300  # rank 0 waits this long for every node and GPU to join Ray
    setup: Optional[list[str]] = None  # shell lines before srun in the sbatch script
    submitit_folder: Optional[str] = None  # default: <sweep_dir>/.submitit/%j or <run_dir>/slurm/%j
    throttle_s: float = 0.02  # pause between two sbatch calls (submitit's own default: 0.2 s)
    array: bool = False  # sweeps: one sbatch array per resource shape (no per-run singleton; the lease fences)
    array_parallelism: int = 256
    dry: bool = False  # sweeps: compose, validate, size, write the manifest with each sbatch header; submit nothing
    wait: bool = False  # block until every job has ended (Optuna needs it)
    metric: str = "rollout/raw_reward"  # what a finished job returns to the sweeper
    poll_s: float = 5.0  # wait=true: seconds between checks of the jobs
    shared_run_dirs: bool = True  # false: nodes do not see the submit host's run dirs (trainstack/launch/slurm_mirror.py)
    # passed to sbatch as they are
    qos: Optional[str] = None
    comment: Optional[str] = None
    constraint: Optional[str] = None
    exclude: Optional[str] = None
    gres: Optional[str] = None
    cpus_per_gpu: Optional[int] = None
    gpus_per_task: Optional[int] = None
    mem_per_gpu: Optional[str] = None
    mem_per_cpu: Optional[str] = None
    srun_args: Optional[list[str]] = None
    stderr_to_stdout: Optional[bool] = None

    def problems(self) -> list[tuple[str, Any, str, str]]:
        out: list[tuple[str, Any, str, str]] = []
        for key in ("time_min", "signal_delay_s", "array_parallelism"):
            if getattr(self, key) < 1:
                out.append((key, getattr(self, key), "must be at least 1", f"set cluster.slurm.{key} to a positive number"))
        for key in ("cpus_per_node", "mem_gb"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                out.append((key, getattr(self, key), "must be at least 1 or null", f"cluster.slurm.{key}=null "
                            "leaves it to SLURM"))
        return out

    def passthrough(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in SBATCH_PASSTHROUGH if getattr(self, k) is not None}


def merge_dependency(user: str | None, singleton: bool) -> str | None:
    parts = [p for p in (user or "").split(",") if p]
    if singleton and "singleton" not in parts:
        parts.append("singleton")
    return ",".join(parts) or None


def sizing_problems(cluster: ClusterSpec) -> list[ConfigError]:
    """A GPU job sized by nothing: a cluster without `slurm:` settings (e.g. `cluster=local_8xh100` swept with
    `hydra/launcher=slurm`) would get 1 CPU and SLURM's default memory beside its GPUs, and start a trainer
    that cannot feed them. Refused naming the keys, unless the job's CPUs and memory are given some way."""
    if cluster.accelerator != "gpu" or not cluster.gpus_per_node:
        return []
    s = cluster.settings or {}
    sbatch = {str(k).replace("-", "_") for k in (s.get("sbatch") or {})}
    out = []
    gpus = f"{int(cluster.num_nodes)} x {int(cluster.gpus_per_node)} GPUs"
    if not (s.get("cpus_per_node") or s.get("cpus_per_gpu") or {"cpus_per_task", "cpus_per_gpu"} & sbatch):
        out.append(ConfigError("cluster.slurm.cpus_per_node", f"cluster={cluster.name} has no SLURM sizing: its job "
                               f"({gpus}) would get 1 CPU per node", "use a SLURM cluster preset (cluster=slurm_8xh100), "
                               "or set cluster.slurm.cpus_per_node (hydra.launcher.cpus_per_task in a sweep)",
                               value=s.get("cpus_per_node")))
    if s.get("mem_gb") is None and not (s.get("mem_per_gpu") or s.get("mem_per_cpu")
                                        or {"mem", "mem_per_gpu", "mem_per_cpu"} & sbatch):
        out.append(ConfigError("cluster.slurm.mem_gb", f"cluster={cluster.name} has no SLURM sizing: its job ({gpus}) "
                               "would get SLURM's default memory per CPU", "use a SLURM cluster preset "
                               "(cluster=slurm_8xh100), or set cluster.slurm.mem_gb (hydra.launcher.mem_gb in a sweep)",
                               value=None))
    return out


def executor_params(cluster: ClusterSpec, job_name: str, settings: SlurmSettings, singleton: bool = True) -> dict[str, Any]:
    """submitit parameters of one job: nodes, one task per node, GPUs as gres, CPUs, memory,
    partition, account, time limit, extra sbatch options, job name, singleton dependency; plus the
    passthrough sbatch fields (qos, constraint, exclude, gres, srun_args, ...) as they are."""
    additional = {k.replace("-", "_"): v for k, v in (settings.sbatch or {}).items()}
    dependency = merge_dependency(additional.pop("dependency", None), singleton)
    if dependency:
        additional["dependency"] = dependency
    params: dict[str, Any] = {
        "name": job_name,
        "nodes": int(cluster.num_nodes),
        "tasks_per_node": 1,
        "cpus_per_task": int(settings.cpus_per_node or 1),
        "timeout_min": int(settings.time_min),
        "slurm_signal_delay_s": int(settings.signal_delay_s),
        "slurm_additional_parameters": additional,
    }
    if settings.mem_gb is not None:
        params["mem_gb"] = int(settings.mem_gb)
    if cluster.accelerator == "gpu" and cluster.gpus_per_node:
        params["slurm_gres"] = f"gpu:{int(cluster.gpus_per_node)}"
    if settings.partition:
        params["slurm_partition"] = settings.partition
    if settings.account:
        params["slurm_account"] = settings.account
    if settings.setup:
        params["slurm_setup"] = list(settings.setup)
    params.update({f"slurm_{k}": v for k, v in settings.passthrough().items()})
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


def make_point(spec: RunSpec, settings: SlurmSettings) -> Point:
    cluster = spec.cluster
    return Point(run_id=spec.run_id, run_dir=spec.run_dir, overrides=list(spec.overrides), cwd=spec.provenance.cwd,
                 needs_ray=BACKENDS[cluster.backend].needs_ray,  # slime: one Ray head per job
                 num_nodes=int(cluster.num_nodes),
                 gpus_per_node=int(cluster.gpus_per_node) if cluster.accelerator == "gpu" else 0,
                 cpus_per_node=settings.cpus_per_node or 1, grace_s=float(spec.resume.grace_s),
                 max_requeues=int(settings.max_requeues), ray_timeout_s=float(settings.ray_timeout_s),
                 metric=settings.metric, spec=None if settings.shared_run_dirs else spec.to_json())


def store_pending(spec: RunSpec) -> None:
    """Before submitting: refuse what the resume check would refuse in the job, then store the spec
    the job will execute (a pending run is visible to status, compare and diff)."""
    from trainstack.run.resume import plan

    rundir = RunDir(spec.run_dir)
    plan(spec, rundir)  # raises ConfigErrors (changed training config, resume policy, broken checkpoint)
    rundir.write_spec(spec)


def _executor(folder: str, max_num_timeout: int, throttle_s: float):
    import submitit

    if shutil.which("sbatch") is None:
        raise SchedulerFailure("sbatch not found: this machine is not a SLURM submit host",
                               "scripts/slurm-local.sh up starts a local one-node cluster")
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=int(max_num_timeout))
    # submitit sleeps 0.2 s between two sbatch calls (64 points: 13 s); sbatch's own round trip
    # already paces a busy controller, so trainstack waits `throttle_s` (private submitit attribute).
    inner = getattr(executor, "_executor", None)
    if inner is not None and hasattr(inner, "_throttling"):
        inner._throttling = float(throttle_s)
    return executor


def _shape(params: dict) -> str:
    return json.dumps({k: v for k, v in params.items() if k != "name"}, sort_keys=True, default=str)


def submit_points(points: Sequence[Point], params: Sequence[dict], folder: str, settings: SlurmSettings,
                  array_name: str | None = None) -> list:
    """One SLURM job per point (job name = run_id, singleton), or with `array` one sbatch array per
    resource shape named `array_name` (SLURM gives all tasks of an array one name, so the per-run
    singleton fence is not available there: the run's lease is then the only fence)."""
    executor = _executor(folder, settings.max_num_timeout, settings.throttle_s)
    runner = PointRunner()
    if not settings.array or len(points) == 1:
        one_each = []
        for point, p in zip(points, params):
            executor.update_parameters(**p)
            try:
                one_each.append(executor.submit(runner, point))
            except Exception as ex:  # sbatch refused (bad partition/account, controller down)
                raise SchedulerFailure(f"sbatch refused {point.run_id}: {ex}", "check cluster.slurm (partition, "
                                       "account, time_min) against `sinfo`; `trainstack status` shows what was "
                                       "submitted before") from None
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
        p["slurm_array_parallelism"] = int(settings.array_parallelism)
        executor.update_parameters(**p)
        try:
            submitted = executor.map_array(runner, [points[i] for i in idxs])
        except Exception as ex:
            raise SchedulerFailure(f"sbatch refused the array: {ex}", "check cluster.slurm against `sinfo`") from None
        for i, job in zip(idxs, submitted):
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


def submit_host_problems(dry: bool = False, key: str = "cluster.launcher") -> list[ConfigError]:
    """Submitting needs submitit (the slurm extra) and `sbatch` on PATH; a dry sweep only submitit
    (it renders each job's #SBATCH header with it)."""
    from trainstack.extras import missing

    if missing("slurm"):
        return [ConfigError(key, "SLURM support is not installed "
                            "(the submitit package is missing)", "pip install 'trainstack[slurm]' (or make install)",
                            value="slurm")]
    if not dry and shutil.which("sbatch") is None:
        return [ConfigError(key, "sbatch is not on PATH: this machine is not a SLURM submit host, so "
                            "nothing can be submitted from it", "run this on a SLURM login node (scripts/slurm-local.sh "
                            "up starts a one-node cluster here); to review a sweep without SLURM add "
                            "hydra.launcher.dry=true; to run here use cluster.launcher=local", value="slurm")]
    return []


# ------------------------------------------------------------------------------------------
# scheduler state
# ------------------------------------------------------------------------------------------
def _run(argv: list[str], timeout: float = 20) -> subprocess.CompletedProcess | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None


def scheduler_states(job_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """job id -> (state, reason) from squeue, then sacct, then `scontrol show job`."""
    wanted = {j for j in job_ids if j}
    out: dict[str, tuple[str, str]] = {}
    if not wanted:
        return out
    q = _run(["squeue", "-h", "-r", "-o", "%i|%T|%r"])
    if q is not None and q.returncode == 0:
        for line in q.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3 and parts[0] in wanted:
                out[parts[0]] = (parts[1], parts[2] if parts[2] not in ("None", "(null)") else "")
    rest = sorted(wanted - set(out))
    if rest:
        s = _run(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(rest)])
        if s is not None and s.returncode == 0:
            for line in s.stdout.splitlines():
                jid, _, state = line.partition("|")
                if jid in rest and state:
                    out[jid] = (state.split()[0], "")
    for jid in sorted(wanted - set(out)):
        s = _run(["scontrol", "show", "job", "-o", jid])
        if s is None or s.returncode != 0:
            continue
        fields = dict(tok.split("=", 1) for tok in s.stdout.split() if "=" in tok)
        if "JobState" in fields:
            reason = fields.get("Reason", "")
            out[jid] = (fields["JobState"], "" if reason == "None" else reason)
    return out


# scheduler states of a job that ended (a COMPLETED one without submitit's result file died in its epilogue)
SLURM_ENDED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


class SlurmLauncher(Launcher):
    """Submit one SLURM job per run; the job executes the stored spec (`trainstack exec`)."""

    name = "slurm"
    waits = False
    Settings = SlurmSettings
    sweeps_through_plugin = True
    sweep_verb = "submitted {n} SLURM job{s}"
    sweep_point = "run and SLURM job"
    hydra_aliases = {"timeout_min": "time_min", "cpus_per_task": "cpus_per_node", "additional_parameters": "sbatch"}
    hydra_refused = {"nodes": "cluster.num_nodes", "gpus_per_node": "cluster.gpus_per_node",
                     "tasks_per_node": "(one task per node, always)", "name": "(the job name is the run_id)"}

    def submit_host_problems(self, dry: bool = False) -> list[ConfigError]:
        return submit_host_problems(dry)

    @classmethod
    def settings_problems(cls, cluster: Any) -> list[ConfigError]:
        problems = sizing_problems(cluster)
        if (cluster.settings or {}).get("shared_run_dirs") is False and int(cluster.num_nodes) > 1:
            problems.append(ConfigError("cluster.slurm.shared_run_dirs", "a multi-node job's nodes meet in the run "
                                        "dir (the Ray rendezvous), which shared_run_dirs=false says they do not share",
                                        "run on one node (cluster.num_nodes=1), or put paths.runs_root on a shared "
                                        "filesystem", value=False))
        return problems

    def fetch_traces(self, run_dirs: Sequence[str]) -> None:
        """Runs whose nodes do not share their run dir: their metrics and status, from the job's folder."""
        from trainstack.launch.slurm_mirror import fetch

        for d in run_dirs:
            fetch(d)

    def check(self, spec: RunSpec) -> None:
        from trainstack.run.resume import plan

        plan(spec, RunDir(spec.run_dir))  # raises ConfigErrors (changed training config, resume policy, broken checkpoint)

    def submit(self, spec: RunSpec) -> int:
        problems = submit_host_problems()
        if problems:
            raise ConfigErrors(problems)
        from trainstack.config.userconfig import run_target

        settings: SlurmSettings = self.settings(spec)
        store_pending(spec)
        point = make_point(spec, settings)
        params = executor_params(spec.cluster, spec.run_id, settings)
        folder = settings.submitit_folder or str(Path(spec.run_dir) / layout.SLURM_FOLDER / "%j")
        t0 = time.perf_counter()
        job = submit_points([point], [params], folder, settings)[0]
        rec = record_job(point, job, folder, None)
        print(f"trainstack: submitted {spec.run_id} as SLURM job {job.job_id} ({time.perf_counter() - t0:.2f} s); "
              f"logs {rec['logs']['stdout']}\n  follow it: trainstack status {run_target(spec.run_id, spec.run_dir)}"
              f"    stop it: trainstack cancel {run_target(spec.run_id, spec.run_dir)}", file=sys.stderr, flush=True)
        if not settings.wait:
            return 0
        try:
            job.result()
            return 0
        except Exception as ex:
            print(f"trainstack: SLURM job {job.job_id} of {spec.run_id} failed: {ex}", file=sys.stderr)
            return 1

    # --- sweeps (the shared plugin) ---------------------------------------------------------
    def submit_sweep(self, specs: Sequence[RunSpec], sweep_dir: Path, nums: Sequence[int]) -> list[manifest.SweepRun]:
        """One sbatch per point (or one array per resource shape), all from this call; dry: the
        manifest holds each job's #SBATCH header and nothing is submitted."""
        settings: SlurmSettings = self.settings(specs[0])
        folder = str(Path(settings.submitit_folder or str(sweep_dir / ".submitit" / "%j")).absolute())
        points = [make_point(s, self.settings(s)) for s in specs]
        params = [executor_params(s.cluster, s.run_id, self.settings(s)) for s in specs]
        self._meta: dict[str, Any] = {"submitit_folder": folder, "wait": settings.wait}
        if settings.dry:
            self._meta["mode"] = "dry"
            return [manifest.SweepRun(run_id=p.run_id, run_dir=p.run_dir, overrides=list(p.overrides), job_num=n,
                                      job_name=p.run_id, sbatch=render_sbatch(prm, folder))
                    for p, prm, n in zip(points, params, nums)]
        for spec in specs:  # every point valid: store what each job will execute
            store_pending(spec)
        self._jobs = submit_points(points, params, folder, settings, array_name=f"trainstack-{sweep_dir.name}")
        self._meta["mode"] = "array" if settings.array else "jobs"
        runs = []
        for point, job, num in zip(points, self._jobs, nums):
            rec = record_job(point, job, folder, str(sweep_dir))
            runs.append(manifest.SweepRun(run_id=point.run_id, run_dir=point.run_dir, overrides=list(point.overrides),
                                          job_num=num, job_id=str(job.job_id),
                                          job_name=None if settings.array else point.run_id, logs=rec["logs"]))
        return runs

    def record_sweep(self, sweep_dir: str | Path, runs: Sequence[manifest.SweepRun], **meta: Any) -> Path:
        return super().record_sweep(sweep_dir, runs, **{**getattr(self, "_meta", {}), **meta})

    def sweep_poll(self, specs: Sequence[RunSpec], runs: Sequence[manifest.SweepRun], settings: Any) -> list[Any]:
        """A job has ended when submitit's result file is there (its run's exit, or the error it raised), or when
        the scheduler says it ended without one (cancelled, node failure, out of memory)."""
        from trainstack.launch.base import RunEnd
        from trainstack.run.result import FAILED, FINISHED

        jobs = getattr(self, "_jobs", [])
        states = scheduler_states([str(j.job_id) for j in jobs if not j.paths.result_pickle.exists()])
        out: list[Any] = []
        for job in jobs:
            if job.paths.result_pickle.exists():
                try:
                    got = job.results()[0]
                    out.append(RunEnd(FINISHED, int(got.get("code") or 0)))
                except Exception as ex:  # noqa: BLE001 - the job raised: the run failed (its last line says why)
                    lines = [ln for ln in str(ex).strip().splitlines() if ln.strip()]
                    out.append(RunEnd(FAILED, None, lines[-1].strip()[:300] if lines else type(ex).__name__))
                continue
            state, reason = states.get(str(job.job_id), ("", ""))
            ended = state.split()[0] in SLURM_ENDED if state else False
            out.append(RunEnd(FAILED, None, f"SLURM job {job.job_id} ended {state}" + (f" ({reason})" if reason else ""))
                       if ended and not job.paths.result_pickle.exists() else None)
        return out

    # --- following --------------------------------------------------------------------------
    def status(self, rows: Sequence["Row"]) -> None:
        states = scheduler_states([r.job_id for r in rows if r.job_id])
        for r in rows:
            if r.job_id and r.job_id in states:
                r.scheduler, r.reason = states[r.job_id]

    def cancel(self, rows: Sequence["Row"], dry: bool = False) -> int:
        """scancel by the job ids recorded in the manifest / run dirs; by job name (= run_id) otherwise."""
        ids = sorted({r.job_id for r in rows if r.job_id})
        names = sorted({r.run_id for r in rows if not r.job_id})
        argvs = ([["scancel", *ids]] if ids else []) + [["scancel", f"--name={n}"] for n in names]
        if shutil.which("scancel") is None and not dry:
            raise SchedulerFailure("scancel not found (not a SLURM host)", "run trainstack cancel on the SLURM "
                                   "login node the runs were submitted from")
        code = 0
        for argv in argvs:
            if dry:
                print(f"trainstack cancel: would run: {' '.join(argv)} (--dry: nothing run)", file=sys.stderr)
                continue
            res = subprocess.run(argv, capture_output=True, text=True)
            if res.returncode != 0:
                print(f"trainstack cancel: {' '.join(argv)} failed: {res.stderr.strip()}", file=sys.stderr)
                code = 1
            else:
                print(f"trainstack cancel: ran {' '.join(argv)}: SLURM sends the job SIGTERM, the trainer saves a "
                      "final checkpoint (`trainstack status` shows when it has ended)", file=sys.stderr)
        return code
