"""Ray Jobs launcher: submit the rendered command to a Ray cluster, tail its logs, stop it on Ctrl-C.

The runtime env carries the rendered env vars (PYTHONPATH, CUDA_DEVICE_MAX_CONNECTIONS, W&B
identity, ...). With `cluster.ray_job.start_head=true` and no Ray answering at the address, a head
bound to 127.0.0.1 is started in its own process group under trainstack.run.trainer_guard and stopped (that
group only) afterwards, or by the guard when this launcher dies (SIGKILL included); its /tmp/tsray-*
temp dir goes with it. A Ray cluster trainstack did not start is never stopped.
"""
from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Any
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from trainstack.errors import RayFailure
from trainstack.launch.base import Launcher
from trainstack.fencing.fence import ENV_FILE, ENV_TOKEN
from trainstack.launch.ray_start import owned, ray_start_argv
from trainstack.procgroup import stop_group
from trainstack.run.rundir import RunDir
from trainstack.storage import layout
from trainstack.run.spec import RunSpec
from trainstack.secrets import FORWARDED_SECRETS, runtime_env_vars as allowed_env

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def ray_answers(address: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{address.rstrip('/')}/api/version", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


_ANSWERS: dict[str, bool] = {}


def _answers_cached(address: str) -> bool:
    """`ray_answers`, asked once per address in a process (a sweep's points share the answer); a cluster that
    answered is trusted, one that did not is asked again (it may have been started since)."""
    if not _ANSWERS.get(address):
        _ANSWERS[address] = ray_answers(address, timeout=1.0)
    return _ANSWERS[address]


def no_cluster_error(address: str):
    from trainstack.errors import ConfigError

    return ConfigError("cluster.ray_job.address", f"no Ray cluster answers at {address}",
                       "start one (ray start --head ...), set cluster.ray_job.address, or "
                       "cluster.ray_job.start_head=true to start a local head on 127.0.0.1", value=address)


class LocalRayHead:
    """`ray start --head --block` on loopback in a new session: we own (and stop) exactly its group."""

    def __init__(self, dashboard_port: int, num_cpus: int, num_gpus: int, log_path: Path):
        self.temp_dir = tempfile.mkdtemp(prefix="tsray-", dir="/tmp")  # short: Ray's socket paths are length-limited
        env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
        for k in ("RAY_ADDRESS", ENV_FILE, ENV_TOKEN):  # the head is no trainer: no lease to fence it by
            env.pop(k, None)
        argv = ray_start_argv("127.0.0.1", num_cpus, num_gpus, self.temp_dir, dashboard_port=dashboard_port)
        self.log = open(log_path, "ab")
        # under trainstack.run.trainer_guard: the head dies with this launcher, even one killed with SIGKILL
        self.proc = subprocess.Popen(owned(argv, grace_s=5.0), env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
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
        shutil.rmtree(self.temp_dir, ignore_errors=True)  # ours: we made it in __init__


class RayJobRunner:
    """Submit, tail, stop and wait for one Ray job (same interface as the local TrainerProcess).

    One job per (run, lease epoch): the submission id is `trainstack-<run_id>-e<epoch>`, so a retried
    submit can never start a second job, and jobs of older epochs of the run (a launcher killed
    before it could stop its job) are waited for, then stopped, before anything is submitted. The
    entrypoint is trainstack.run.trainer_guard (fencing, no orphans, logs/trainer.log); secrets reach it through
    a mode-0600 file in the run dir, never through the job's runtime env (Ray logs it).
    """

    def __init__(self, address: str, spec: RunSpec, env: dict[str, str], rundir: RunDir):
        from ray.job_submission import JobSubmissionClient

        from trainstack.fencing.fence import ENV_EPOCH
        from trainstack.launch.process import guarded

        cmd = spec.slime_command()
        self.client = JobSubmissionClient(address)
        self.signalled: int | None = None
        self.pgid: int | None = None  # the trainer runs under Ray, not in a group of ours
        self.grace_s = spec.resume.grace_s
        self.run_id = spec.run_id
        runtime_env_vars = dict(cmd.env)
        runtime_env_vars.update(allowed_env(env))  # an allow-list: Ray logs the runtime env world-readable
        self.submission_id = f"trainstack-{spec.run_id}-e{env.get(ENV_EPOCH, '0')}"
        self._retire_older_jobs()
        self.secrets_file = write_secrets(rundir)
        argv = guarded(cmd.full_argv(), spec.resume.grace_s, rundir.trainer_log, self.secrets_file)
        argv[argv.index("--"):argv.index("--")] = ["--cwd", cmd.cwd]
        argv[argv.index("--parent"):argv.index("--parent") + 2] = []  # Ray's supervisor is the parent
        deadline = time.monotonic() + 120
        while True:
            try:
                self.client.submit_job(entrypoint=shlex.join(argv), submission_id=self.submission_id,
                                       runtime_env={"env_vars": runtime_env_vars},
                                       metadata={"trainstack_run_id": spec.run_id,
                                                 "trainstack_epoch": env.get(ENV_EPOCH, "0")})
                break
            except RuntimeError as ex:  # a head that answers before its job agent registered: nothing submitted
                if "No available agent" not in str(ex) or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        self._tail = threading.Thread(target=self._tail_logs, daemon=True)
        self._tail.start()

    def _live_jobs_of_run(self) -> list[str]:
        return [j.submission_id for j in self.client.list_jobs()
                if (j.metadata or {}).get("trainstack_run_id") == self.run_id and str(j.status.value) not in TERMINAL
                and j.submission_id]

    def _retire_older_jobs(self) -> None:
        """A job of an older epoch is fenced by our lease (its guard stops it); wait, then stop it."""
        live = self._live_jobs_of_run()
        if not live:
            return
        print(f"trainstack: {self.run_id}: waiting for the previous Ray job(s) of this run to stop: {', '.join(live)}",
              file=sys.stderr, flush=True)
        deadline = time.monotonic() + self.grace_s + 15
        while live and time.monotonic() < deadline:
            time.sleep(1.0)
            live = self._live_jobs_of_run()
        for sid in live:
            self.client.stop_job(sid)
        deadline = time.monotonic() + 30
        while live and time.monotonic() < deadline:
            time.sleep(1.0)
            live = self._live_jobs_of_run()
        if live:
            raise RayFailure(f"previous Ray job(s) {', '.join(live)} of run {self.run_id} do not stop; nothing was "
                             "submitted", "stop them: ray job stop <id>")

    def _tail_logs(self) -> None:
        """Console echo only (the guard writes logs/trainer.log)."""
        async def tail() -> None:
            async for chunk in self.client.tail_job_logs(self.submission_id):
                try:
                    sys.stdout.buffer.write(chunk.encode())
                    sys.stdout.buffer.flush()
                except (OSError, ValueError):
                    pass

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
        try:
            while (st := self.status()) not in TERMINAL:
                time.sleep(0.5)
            self._tail.join(timeout=10)
            info = self.client.get_job_info(self.submission_id)
        finally:
            remove_secrets(self.secrets_file)
        if st == "SUCCEEDED":
            return 0
        if st == "STOPPED":
            return 128 + (self.signalled or signal.SIGTERM)
        code = getattr(info, "driver_exit_code", None)
        return code if isinstance(code, int) and code != 0 else 1


def write_secrets(rundir: RunDir) -> Path | None:
    """The forwarded secrets of this shell, for the job's entrypoint only (mode 0600, created 0600)."""
    values = {k: os.environ[k] for k in FORWARDED_SECRETS if os.environ.get(k)}
    if not values:
        return None
    path = rundir.path / layout.SECRETS
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(values, f)
    return path


def remove_secrets(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


@dataclass
class RayJobSettings:
    """`cluster.ray_job`: where the Ray cluster is."""

    address: str = DEFAULT_ADDRESS  # the Jobs API (dashboard) address
    start_head: bool = False  # no Ray answering at a loopback address: start a head there (stopped after the run)
    wait: bool = True  # follow each job to its end (false: start each run in the background and return at once)

    def problems(self) -> list[tuple[str, object, str, str]]:
        url = urlparse(self.address)
        if url.scheme not in ("http", "https") or not url.hostname:
            return [("address", self.address, "not an http(s) URL of a Ray dashboard",
                     "use e.g. cluster.ray_job.address=http://10.0.0.5:8265")]
        if self.start_head and not self.wait:
            return [("wait", False, "a head started for a run stops with it, so runs started in the background "
                     "would each start one at the same address", "start a Ray head (ray start --head) and drop "
                     "cluster.ray_job.start_head, or keep cluster.ray_job.wait=true")]
        return []


LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "")


class RayJobLauncher(Launcher):
    """Submit the stored command as a Ray job and follow it to the end (waits)."""

    name = "ray_job"
    waits = True
    Settings = RayJobSettings

    @classmethod
    def runs_here(cls, settings: dict) -> bool:
        return (urlparse(str(settings.get("address") or DEFAULT_ADDRESS)).hostname or "") in LOOPBACK

    @classmethod
    def waits_with(cls, settings: dict) -> bool:
        return bool(settings.get("wait", True))

    def submit(self, spec: RunSpec) -> int:
        """wait=true (default): the job followed to its end, here; false: `trainstack exec` in the background."""
        if self.waits_for(spec):
            return self.execute(spec)
        from trainstack.launch.detached import start_detached

        return start_detached(spec, self.name)

    @classmethod
    def launch_notes(cls, cluster: Any) -> list[str]:
        """A loopback address where no Ray cluster answers now, and no head to start: the launch refuses it
        (`execute`) unless one is up by then. A cluster's state is the launch's to judge (it may be started
        after the dry run), so the dry run says so instead of refusing; a remote address is not asked."""
        settings = dict(cluster.settings or {})
        address = str(settings.get("address") or DEFAULT_ADDRESS)
        if settings.get("start_head") or not cls.runs_here(settings) or _answers_cached(address):
            return []
        return [f"no Ray cluster answers at {address} now: the launch refuses it unless one does by then "
                "(ray start --head ...), or set cluster.ray_job.start_head=true to have the launch start one"]

    def submit_host_problems(self, dry: bool = False):
        """Submitting a Ray job (and starting a head) takes Ray's client: the `ray` extra."""
        from trainstack.extras import problem

        return problem("cluster.launcher", "ray", "the ray_job launcher (Ray's job client)", value="ray_job")

    def execute(self, spec: RunSpec) -> int:
        from trainstack.errors import ConfigErrors
        from trainstack.run.lifecycle import execute

        cluster = spec.cluster
        settings: RayJobSettings = self.settings(spec)
        address = settings.address
        head = None
        if not ray_answers(address):
            if not settings.start_head:
                raise ConfigErrors([no_cluster_error(address)])
            port = urlparse(address).port or 8265
            rundir = RunDir(spec.run_dir)
            rundir.logs.mkdir(parents=True, exist_ok=True)
            from trainstack.terminal.phase import phase

            head = LocalRayHead(port, num_cpus=max(os.cpu_count() or 1, 1),
                                num_gpus=cluster.gpus_per_node if cluster.accelerator == "gpu" else 0,
                                log_path=rundir.logs / layout.RAY_HEAD_LOG)
            try:
                with phase(f"starting a Ray head at {address} (log {rundir.logs / layout.RAY_HEAD_LOG})"):
                    head.wait_ready()
            except RuntimeError as ex:
                head.stop()
                raise RayFailure(str(ex), f"see {rundir.logs / layout.RAY_HEAD_LOG}") from None
        try:
            return execute(spec, lambda env, rundir: RayJobRunner(address, spec, env, rundir))
        finally:
            if head is not None:
                head.stop()
