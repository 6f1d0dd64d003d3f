"""`ray start` argv, built in one place for every Ray node trainstack starts: the local head of the
ray launcher (trainstack/launch/ray_job.py) and the nodes of a multi-node SLURM job
(trainstack/launch/slurm_job.py). Every port is a free one (no clash with another Ray or run on the
host), `--block` keeps the node in the process group we own and stop (trainstack/procgroup.py).
"""
from __future__ import annotations

import json
import socket
import sys
from pathlib import Path


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
             f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    if resources:
        argv.append(f"--resources={json.dumps(resources)}")
    argv += [f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
             f"--metrics-export-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
             f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}"]
    return argv


def gcs_port(argv: list[str]) -> int:
    """The GCS port a head's argv chose."""
    return int(next(a.split("=", 1)[1] for a in argv if a.startswith("--port=")))
