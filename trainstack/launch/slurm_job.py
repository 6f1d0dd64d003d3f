"""Inside a SLURM job: the rank-aware Ray bootstrap and the submitit callable of one run.

One task per node. Rank 0 starts a Ray head (its own ports, its own temp dir, a fixed CPU/GPU
count, in its own process group), the other ranks join it (`ray start --address ... --block`,
also in their own groups), rank 0 waits until every rank's node and all GPUs are registered
(timeout: an error naming the missing ranks and hosts), runs the trainer, then tears down only
the Ray processes it started and tells the other ranks to do the same. Nothing is ever stopped
by name (no `ray stop`, no pkill).

The rendezvous is a directory on the shared filesystem (the run directory): rank 0 writes
`head.json` there, the others read the address from it; `done` ends the workers.

`PointRunner` is what submitit pickles for each job: it runs `python -m trainstack exec RUN_DIR`
in the job (a child in its own session, SIGUSR2 ignored so only submitit sees the preemption
signal): the spec stored at submit time is executed under the run lifecycle, with no
recomposition, on the first start and on every requeue. On preemption/timeout
submitit calls `checkpoint()`: the child is asked to stop (SIGTERM; it gives the trainer
`resume.grace_s` for a final checkpoint), and the same call is requeued; the requeued job
resumes the run from its latest complete checkpoint. `max_requeues` caps the requeues.

CLI (what tests and hand-written sbatch scripts use; one task per node under srun):

    srun python -m trainstack.launch.slurm_job bootstrap --rendezvous DIR --num-gpus 8 -- CMD...
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainstack.launch.ray_start import gcs_port, ray_start_argv, remove_temp_dir
from trainstack.procgroup import stop_group

EXIT_RAY = 70  # the Ray cluster could not be assembled


# ------------------------------------------------------------------------------------------
# SLURM task environment
# ------------------------------------------------------------------------------------------
@dataclass
class TaskEnv:
    job_id: str
    rank: int
    ntasks: int
    hostnames: list[str]
    hostname: str
    restart_count: int = 0

    @classmethod
    def from_env(cls) -> "TaskEnv":
        """Task facts from submitit's JobEnvironment (the scheduler's view, as submitit reads it);
        SLURM's variables directly where submitit cannot tell (not under a scheduler it knows)."""
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)  # not in JobEnvironment
        try:
            import submitit

            je = submitit.JobEnvironment()
            return cls(job_id=str(je.job_id), rank=je.global_rank, ntasks=je.num_tasks,
                       hostnames=list(je.hostnames) or [socket.gethostname()], hostname=je.hostname,
                       restart_count=restarts)
        except (ImportError, RuntimeError, KeyError):
            pass
        env = os.environ
        job_id = env.get("SLURM_ARRAY_JOB_ID") and f"{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID')}" \
            or env.get("SLURM_JOB_ID", "local")
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
        return cls(job_id=job_id, rank=int(env.get("SLURM_PROCID", "0")), ntasks=int(env.get("SLURM_NTASKS", "1")),
                   hostnames=expand_nodelist(nodelist) or [socket.gethostname()],
                   hostname=env.get("SLURMD_NODENAME") or socket.gethostname(), restart_count=restarts)

    @property
    def single_host(self) -> bool:
        return len(set(self.hostnames)) <= 1


def expand_nodelist(nodelist: str) -> list[str]:
    if not nodelist:
        return []
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()
    except (OSError, subprocess.SubprocessError):
        pass
    return [nodelist] if "[" not in nodelist else []


def _ignore_usr2() -> None:  # preexec: only the submitit process reacts to the preemption signal
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


# ------------------------------------------------------------------------------------------
# Ray nodes we own
# ------------------------------------------------------------------------------------------
class RayNode:
    """`ray start ... --block` in a new session: we stop exactly that process group."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str]):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.argv = list(argv)
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=_ignore_usr2)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        stop_group(self.proc)
        self.log.close()
        remove_temp_dir(self.argv)  # /tmp/tsray-<job>-<rank>: made for this node, gone with it


def node_ip(task: TaskEnv) -> str:
    """Loopback when every rank is on this host (tests: one distinct 127.0.0.x per rank, because
    Ray rewrites 127.0.0.1 to the eth0 address on worker nodes); else this node's address."""
    if task.single_host:
        return f"127.0.0.{2 + task.rank}"
    return socket.gethostbyname(task.hostname)


def ray_env() -> dict[str, str]:
    # no 30 s drain on SIGTERM (Ray 2.60 default): nothing is served from these nodes after the run
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    for k in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        env.pop(k, None)
    return env


def rank_resource(rank: int) -> str:
    return f"trainstack_rank_{rank}"


def start_node(task: TaskEnv, rendezvous: Path, num_cpus: int, num_gpus: int, head_address: str | None) -> RayNode:
    ip = node_ip(task)
    temp_dir = f"/tmp/tsray-{task.job_id}-{task.rank}"  # short: Ray's socket paths are length-limited
    argv = ray_start_argv(ip, num_cpus, num_gpus, temp_dir, address=head_address,
                          resources={rank_resource(task.rank): 1})
    return RayNode(argv, rendezvous / f"ray-rank{task.rank}.log", ray_env())


def wait_for_nodes(address: str, expected: dict[int, str], num_gpus_total: int, timeout_s: float,
                   head: RayNode, head_log: Path | None = None) -> list[dict]:
    """Poll the GCS until every rank's node (and all GPUs) is registered; raise naming what is missing (and,
    from the rendezvous folder beside `head_log`, why a missing rank's node died)."""
    import ray

    deadline = time.monotonic() + timeout_s
    ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, configure_logging=False)
    try:
        while True:
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            ranks = {r for n in nodes for r in expected if rank_resource(r) in n.get("Resources", {})}
            gpus = sum(n.get("Resources", {}).get("GPU", 0) for n in nodes)
            missing = {r: h for r, h in expected.items() if r not in ranks}
            if not missing and gpus >= num_gpus_total:
                return nodes
            gave_up = head_log is not None and bool(missing) and all((head_log.parent / f"rank{r}.failed").exists() for r in missing)
            if time.monotonic() > deadline or not head.alive() or gave_up:
                what = ", ".join(f"rank {r} (host {h})" for r, h in sorted(missing.items()))
                raise RuntimeError(
                    f"Ray cluster incomplete after {timeout_s - max(0.0, deadline - time.monotonic()):.0f} s: "
                    + (f"missing node(s): {what}; " if missing else "")
                    + f"{len(ranks)}/{len(expected)} nodes and {gpus:g}/{num_gpus_total} GPUs registered at {address}"
                    + ("".join(_rank_failure(head_log.parent, r) for r in sorted(missing)) if head_log else ""))
            time.sleep(1.0)
    finally:
        ray.shutdown()


@dataclass
class RayCluster:
    address: str
    head: RayNode
    rendezvous: Path

    def teardown(self) -> None:
        (self.rendezvous / "done").write_text(str(time.time()))
        self.head.stop()


def bootstrap_ray(task: TaskEnv, rendezvous: Path, num_cpus: int, gpus_per_node: int, timeout_s: float,
                  expected_ranks: int | None = None) -> RayCluster | None:
    """Rank 0: start the head, wait for the rest, return the cluster. Other ranks: join, block until
    rank 0 is done (or their Ray node dies), clean up, return None."""
    rendezvous.mkdir(parents=True, exist_ok=True)
    nranks = expected_ranks or task.ntasks
    head_file = rendezvous / "head.json"
    if task.rank == 0:
        for stale in (head_file, rendezvous / "done", *rendezvous.glob("rank*.failed")):
            stale.unlink(missing_ok=True)
        head = start_node(task, rendezvous, num_cpus, gpus_per_node, None)
        address = f"{node_ip(task)}:{gcs_port(head.argv)}"
        head_file.write_text(json.dumps({"address": address, "job_id": task.job_id, "host": task.hostname}))
        if task.single_host or len(task.hostnames) < nranks:
            expected = {r: task.hostnames[0] if task.hostnames else task.hostname for r in range(nranks)}
        else:  # one task per node: rank r runs on the r-th host of the allocation
            expected = dict(enumerate(task.hostnames[:nranks]))
        try:
            wait_for_nodes(address, expected, gpus_per_node * nranks, timeout_s, head, rendezvous / "ray-rank0.log")
        except BaseException:
            RayCluster(address, head, rendezvous).teardown()
            raise
        print(f"trainstack: Ray cluster ready at {address}: {nranks} node(s), {gpus_per_node * nranks} GPU(s)",
              file=sys.stderr, flush=True)
        return RayCluster(address, head, rendezvous)
    deadline = time.monotonic() + timeout_s
    joined: str | None = None
    while time.monotonic() < deadline:  # a head.json from this job's rank 0
        info = _read_json(head_file)
        if info and info.get("job_id") == task.job_id:
            joined = str(info["address"])
            break
        time.sleep(0.5)
    if joined is None:
        raise RuntimeError(f"rank {task.rank}: no Ray head address in {head_file} after {timeout_s:.0f} s")
    done = rendezvous / "done"
    for attempt in range(1, NODE_STARTS + 1):
        node = start_node(task, rendezvous, num_cpus, gpus_per_node, joined)
        try:
            while node.alive() and not done.exists():
                time.sleep(0.5)
        finally:
            node.stop()
        if done.exists() or time.monotonic() > deadline:
            break
        # the node died while rank 0 still waits: a port picked free and taken before Ray bound it, or a GCS
        # that answered late. Start it again (the same rank resource: rank 0 counts it once it registers).
        print(f"trainstack: rank {task.rank}: Ray node exited (code {node.proc.returncode}) before the run "
              f"finished; start {attempt + 1}/{NODE_STARTS}", file=sys.stderr, flush=True)
    if not done.exists():
        _write_failure(rendezvous, task.rank, node.proc.returncode)
    return None


NODE_STARTS = 3  # a worker rank's `ray start` tries before it leaves its log tail for rank 0's error


def _log_tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _write_failure(rendezvous: Path, rank: int, code: int | None) -> None:
    tail = _log_tail(rendezvous / f"ray-rank{rank}.log")
    (rendezvous / f"rank{rank}.failed").write_text(f"exit code {code}\n{tail}")


def _rank_failure(rendezvous: Path, rank: int) -> str:
    """`; rank 1's Ray node exited ...: <log tail>` when that rank gave up, else nothing."""
    try:
        text = (rendezvous / f"rank{rank}.failed").read_text(errors="replace")
    except OSError:
        return ""
    code, _, tail = text.partition("\n")
    return f"; rank {rank}'s Ray node exited ({code}) {NODE_STARTS} times; its log ends:\n{tail}"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------------------------
# The submitit callable
# ------------------------------------------------------------------------------------------
@dataclass
class Point:
    """One sweep point / one run, as submitted."""

    run_id: str
    run_dir: str
    overrides: list[str]  # for people (status, the manifest); the job executes the stored spec
    cwd: str
    needs_ray: bool = False
    num_nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_node: int | None = None
    grace_s: float = 30.0
    max_requeues: int = 10
    ray_timeout_s: float = 300.0
    metric: str | None = "rollout/raw_reward"
    env: dict[str, str] = field(default_factory=dict)
    spec: dict[str, Any] | None = None  # the stored spec, when the node does not see the run dir (slurm_mirror.py)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "trainstack", "exec", self.run_dir]


class PointRunner:
    """Pickled by submitit; `__call__(point)` in the job, `checkpoint(point)` on preemption/timeout."""

    def __init__(self) -> None:
        self._child: subprocess.Popen | None = None

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._child = None

    def __call__(self, point: Point) -> dict:
        task = TaskEnv.from_env()
        cluster = None
        env = {**os.environ, **point.env, "TRAINSTACK_SLURM_JOB": task.job_id,
               "TRAINSTACK_SLURM_RESTART": str(task.restart_count)}
        if point.needs_ray:
            rendezvous = Path(point.run_dir) / "ray" / task.job_id.replace("/", "_")
            cpus = point.cpus_per_node or os.cpu_count() or 1
            cluster = bootstrap_ray(task, rendezvous, cpus, point.gpus_per_node, point.ray_timeout_s,
                                    expected_ranks=point.num_nodes)
            if cluster is None:  # a worker rank: its node served until rank 0 finished
                return {"run_id": point.run_id, "rank": task.rank, "code": 0}
            env["RAY_ADDRESS"] = env["TRAINSTACK_RAY_ADDRESS"] = cluster.address
        elif task.rank != 0:
            return {"run_id": point.run_id, "rank": task.rank, "code": 0}
        print(f"trainstack: job {task.job_id} (restart {task.restart_count}) runs {point.run_id}: "
              + " ".join(point.argv()[1:]), file=sys.stderr, flush=True)
        mirror = None
        if point.spec is not None:  # the submit host does not see this run dir: the job brings the spec, and
            from trainstack.launch.slurm_mirror import Mirror, materialize  # copies metrics back (slurm_mirror)

            materialize(point.run_dir, point.spec)
            mirror = Mirror(point.run_dir)
        try:
            self._child = subprocess.Popen(point.argv(), cwd=point.cwd, env=env, start_new_session=True,
                                           preexec_fn=_ignore_usr2)
            while (code := self._child.poll()) is None:
                time.sleep(0.2)
                if mirror is not None:
                    mirror.sync()
        finally:
            if mirror is not None:
                mirror.sync(force=True)
            if cluster is not None:
                cluster.teardown()
        result = {"run_id": point.run_id, "rank": task.rank, "code": code, "job_id": task.job_id,
                  "restart_count": task.restart_count, **run_outcome(point)}
        if code != 0:
            raise RuntimeError(f"run {point.run_id} exited with {code} (state {result.get('state')}); "
                               f"see {point.run_dir}/logs/trainer.log")
        return result

    def checkpoint(self, point: Point) -> Any:
        """Preempted or timed out: stop the run (it checkpoints within grace_s) and requeue the same call."""
        import submitit

        child = self._child
        if child is not None and child.poll() is None:
            stop_group(child, term_wait_s=point.grace_s + 30)
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        if restarts >= point.max_requeues:
            print(f"trainstack: {point.run_id}: not requeued, it was requeued {restarts} times already "
                  f"(max_requeues={point.max_requeues})", file=sys.stderr, flush=True)
            return None
        print(f"trainstack: {point.run_id}: requeueing (restart {restarts + 1}); it resumes from its latest "
              "checkpoint", file=sys.stderr, flush=True)
        return submitit.helpers.DelayedSubmission(PointRunner(), point)


def run_outcome(point: Point) -> dict:
    """state, last checkpoint and the sweep metric from the run directory (for Optuna)."""
    from trainstack.run.rundir import RunDir

    rd = RunDir(point.run_dir)
    status = rd.status()
    metrics = status.get("last_metrics") or rd.last_metrics()[0]
    value = metrics.get(point.metric) if point.metric else None
    return {"state": status.get("state"), "last_checkpoint": status.get("last_checkpoint"),
            "metric": value, "metric_name": point.metric}


# ------------------------------------------------------------------------------------------
# CLI: `srun python -m trainstack.launch.slurm_job bootstrap ... -- CMD`
# ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainstack.launch.slurm_job")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("bootstrap", help="one task per node: Ray head on rank 0, workers join, run CMD on rank 0")
    p.add_argument("--rendezvous", required=True, help="shared directory for head.json / done")
    p.add_argument("--num-cpus", type=int, default=1)
    p.add_argument("--num-gpus", type=int, default=0, help="GPUs per node")
    p.add_argument("--expect-nodes", type=int, help="default: SLURM_NTASKS")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for all nodes")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    cmd = ns.cmd[1:] if ns.cmd[:1] == ["--"] else ns.cmd
    task = TaskEnv.from_env()
    try:
        cluster = bootstrap_ray(task, Path(ns.rendezvous), ns.num_cpus, ns.num_gpus, ns.timeout, ns.expect_nodes)
    except RuntimeError as ex:
        print(f"trainstack: {ex}", file=sys.stderr, flush=True)
        return EXIT_RAY
    if cluster is None:
        return 0
    try:
        env = {**os.environ, "RAY_ADDRESS": cluster.address, "TRAINSTACK_RAY_ADDRESS": cluster.address}
        return subprocess.call(cmd, env=env) if cmd else 0
    finally:
        cluster.teardown()


if __name__ == "__main__":
    sys.exit(main())
