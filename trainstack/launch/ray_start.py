"""`ray start` argv, built in one place for every Ray node trainstack starts: the local head of the
ray launcher (trainstack/launch/ray_job.py) and the nodes of a multi-node SLURM job
(trainstack/launch/slurm_job.py). Every port is a free one (no clash with another Ray or run on the
host), `--block` keeps the node in the process group we own and stop (trainstack/procgroup.py).

Whoever starts a node owns it and its temp dir: `owned` runs it under trainstack.run.trainer_guard, which stops
the node's whole group when its starter dies (even by SIGKILL) and removes the temp dir (Ray's
session logs) after; `remove_temp_dir` is the starter's own cleanup on a normal stop.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path

TEMP_DIR_FLAG = "--temp-dir="


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ray_bin() -> str:
    """The `ray` of this interpreter's environment (a venv not on PATH), else the one on PATH."""
    ray = Path(sys.executable).with_name("ray")
    return str(ray) if ray.exists() else "ray"


def ray_start_argv(node_ip: str, num_cpus: int, num_gpus: int, temp_dir: str, *, address: str | None = None,
                   dashboard_port: int | None = None, resources: dict[str, float] | None = None) -> list[str]:
    """`ray start --block` of a head (address None: a new GCS on a free port; the dashboard on
    `dashboard_port` at `node_ip`, or none) or of a node joining the GCS at `address`."""
    argv = [ray_bin(), "start", "--block"]
    if address is not None:
        argv.append(f"--address={address}")
    else:
        argv += ["--head", f"--port={free_port()}"]
        argv += ["--include-dashboard=false"] if dashboard_port is None else [
            f"--dashboard-host={node_ip}", f"--dashboard-port={dashboard_port}"]
    argv += [f"--node-ip-address={node_ip}", f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",
             f"{TEMP_DIR_FLAG}{temp_dir}", "--disable-usage-stats"]
    if resources:
        argv.append(f"--resources={json.dumps(resources)}")
    argv += [f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
             f"--metrics-export-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
             f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}"]
    return argv


def gcs_port(argv: list[str]) -> int:
    """The GCS port a head's argv chose."""
    return int(next(a.split("=", 1)[1] for a in argv if a.startswith("--port=")))


def temp_dir_of(argv: list[str]) -> str | None:
    return next((a[len(TEMP_DIR_FLAG):] for a in argv if a.startswith(TEMP_DIR_FLAG)), None)


def owned(argv: list[str], grace_s: float = 10.0) -> list[str]:
    """`argv` (a `ray start --block`) under trainstack.run.trainer_guard with this process as its parent: when
    this process dies, the guard stops the node's group (SIGTERM, `grace_s`, SIGKILL) and removes its
    temp dir. Start it with start_new_session=True from a long-lived thread."""
    temp = temp_dir_of(argv)
    opts = ["--grace", str(grace_s), "--parent", str(os.getpid())] + (["--remove", temp] if temp else [])
    from trainstack.launch.standby import guard_command

    return [*guard_command(), *opts, "--", *argv]


def remove_temp_dir(argv: list[str]) -> None:
    """The node's temp dir, once the node is stopped: its starter made it (ray start makes what is missing)."""
    temp = temp_dir_of(argv)
    if temp and os.path.basename(temp.rstrip("/")).startswith("tsray-"):  # only ours, never a user's --temp-dir
        shutil.rmtree(temp, ignore_errors=True)
