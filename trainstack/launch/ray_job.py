"""Ray Jobs launcher: submit the rendered command to a Ray cluster, tail its logs, stop it on Ctrl-C.

The runtime env carries the rendered env vars (PYTHONPATH, CUDA_DEVICE_MAX_CONNECTIONS, W&B
identity, ...). With `cluster.start_ray_head=true` and no Ray answering at the address, a head
bound to 127.0.0.1 is started in its own process group and stopped (that group only) afterwards;
a Ray cluster trainstack did not start is never stopped.
"""
from __future__ import annotations

import asyncio
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from trainstack.launch.base import Launcher
from trainstack.procgroup import stop_group
from trainstack.rundir import RunDir, layout
from trainstack.runspec import RunSpec
from trainstack.secrets import FORWARDED_SECRETS

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def ray_answers(address: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{address.rstrip('/')}/api/version", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRayHead:
    """`ray start --head --block` on loopback in a new session: we own (and stop) exactly its group."""

    def __init__(self, dashboard_port: int, num_cpus: int, num_gpus: int, log_path: Path):
        self.temp_dir = tempfile.mkdtemp(prefix="tsray-", dir="/tmp")  # short: Ray's socket paths are length-limited
        env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
        env.pop("RAY_ADDRESS", None)
        argv = ["ray", "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={_free_port()}",
                "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}", f"--num-cpus={num_cpus}",
                f"--num-gpus={num_gpus}", f"--temp-dir={self.temp_dir}", "--disable-usage-stats",
                f"--dashboard-agent-listen-port={_free_port()}", f"--metrics-export-port={_free_port()}"]
        ray_bin = Path(sys.executable).with_name("ray")
        argv[0] = str(ray_bin) if ray_bin.exists() else "ray"
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.address = f"http://127.0.0.1:{dashboard_port}"

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited with {self.proc.returncode}; see {self.log.name}")
            if ray_answers(self.address):
                return
            time.sleep(0.5)
        raise RuntimeError(f"Ray head did not answer at {self.address} within {timeout:.0f} s")

    def stop(self) -> None:
        stop_group(self.proc)
        self.log.close()


class RayJobRunner:
    """Submit, tail, stop and wait for one Ray job (same interface as the local TrainerProcess)."""

    def __init__(self, address: str, spec: RunSpec, env: dict[str, str], rundir: RunDir):
        from ray.job_submission import JobSubmissionClient

        cmd = spec.slime_command()
        self.client = JobSubmissionClient(address)
        self.signalled: int | None = None
        runtime_env_vars = dict(cmd.env)
        runtime_env_vars.update({k: env[k] for k in ("TRAINSTACK_METRICS_FILE", "TRAINSTACK_RUN_ID", "WANDB_MODE")
                                 if k in env})
        runtime_env_vars.update({k: os.environ[k] for k in FORWARDED_SECRETS if os.environ.get(k)})
        self.submission_id = f"trainstack-{spec.run_id}-{int(time.time())}"
        self.client.submit_job(entrypoint=f"cd {shlex.quote(cmd.cwd)} && " + shlex.join(cmd.full_argv()),
                               submission_id=self.submission_id,
                               runtime_env={"env_vars": runtime_env_vars},
                               metadata={"trainstack_run_id": spec.run_id})
        self._log = open(rundir.trainer_log, "ab")
        self._tail = threading.Thread(target=self._tail_logs, daemon=True)
        self._tail.start()

    def _tail_logs(self) -> None:
        async def tail() -> None:
            async for chunk in self.client.tail_job_logs(self.submission_id):
                data = chunk.encode()
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()
                self._log.write(data)
                self._log.flush()

        try:
            asyncio.run(tail())
        except Exception as ex:  # the log stream ends with the job; a broken stream must not kill the launch
            print(f"trainstack: log stream of {self.submission_id} ended: {ex}", file=sys.stderr)

    def status(self) -> str:
        return str(self.client.get_job_status(self.submission_id).value)

    def stop(self, signum: int = signal.SIGTERM) -> None:
        self.signalled = self.signalled or signum
        try:
            self.client.stop_job(self.submission_id)
        except Exception as ex:  # already finished
            print(f"trainstack: stop_job({self.submission_id}): {ex}", file=sys.stderr)

    def wait(self) -> int:
        while (st := self.status()) not in TERMINAL:
            time.sleep(0.5)
        self._tail.join(timeout=10)
        self._log.close()
        return {"SUCCEEDED": 0, "STOPPED": 128 + (self.signalled or signal.SIGTERM)}.get(st, 1)


class RayJobLauncher(Launcher):
    """Submit the stored command as a Ray job and follow it to the end (waits)."""

    name = "ray_job"
    waits = True

    def execute(self, spec: RunSpec) -> int:
        from trainstack.lifecycle import execute

        cluster = spec.cluster
        address = cluster.ray_address or DEFAULT_ADDRESS
        head = None
        if not ray_answers(address):
            if not cluster.start_ray_head:
                print(f"trainstack: no Ray cluster answers at {address}; nothing was launched.\n"
                      "  fix: start one (ray start --head ...), set cluster.ray_address, or cluster.start_ray_head=true "
                      "to start a local head on 127.0.0.1", file=sys.stderr)
                return 2
            port = urlparse(address).port or 8265
            rundir = RunDir(spec.run_dir)
            rundir.logs.mkdir(parents=True, exist_ok=True)
            head = LocalRayHead(port, num_cpus=max(os.cpu_count() or 1, 1),
                                num_gpus=cluster.gpus_per_node if cluster.accelerator == "gpu" else 0,
                                log_path=rundir.logs / layout.RAY_HEAD_LOG)
            head.wait_ready()
        try:
            return execute(spec, lambda env, rundir: RayJobRunner(address, spec, env, rundir))
        finally:
            if head is not None:
                head.stop()
