"""Every orchestration setting has a type (its dataclass field) and a domain (this table): ports,
prices, counts, times, URLs, image references by the registry's grammar, SLURM's time and memory
syntax. Checked where the typed sections are built (`schema.to_typed`), so a dry run refuses
`cluster.lium.pod.gpu_count=-8` or `cluster.slurm.sbatch.time=-5` with the fix instead of the
scheduler, the provider or a worker failing later (issue #36).

Keyed by dataclass name and field (the classes live with their launchers; nothing here imports
them). A field not listed is typed only.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Callable
from urllib.parse import urlparse


@dataclass(frozen=True)
class Domain:
    what: str  # "a TCP port in [1, 65535]": the problem is "must be <what>"
    example: str  # a good value, for the fix
    problem: Callable[[Any], str | None]  # why a (typed) value is outside, None: inside


def _number(low: float, high: float = math.inf, *, low_open: bool = False, integral: bool = False) -> Callable:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None  # the type check's business
        if not math.isfinite(v):
            return f"{v} is not a finite number"
        if (v <= low if low_open else v < low) or v > high:
            return f"{v:g} is out of range"
        if integral and v != int(v):
            return f"{v} is not a whole number"
        return None

    return check


def _text(pattern: str, why: str) -> Callable:
    rx = re.compile(pattern)

    def check(v: Any) -> str | None:
        return None if not isinstance(v, str) or rx.fullmatch(v) else why

    return check


def _url(v: Any) -> str | None:
    if not isinstance(v, str):
        return None
    u = urlparse(v)
    try:
        u.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        return "its port is out of range"
    if u.scheme not in ("http", "https") or not u.hostname:
        return f"{v!r} has no http(s) scheme or no host"
    return None


# The Docker/OCI reference grammar (github.com/distribution/reference): [domain[:port]/]path[:tag][@digest],
# path components lowercase.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:localhost|[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)+|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_IMAGE = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?"
                    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")


def _image(v: Any) -> str | None:
    if not isinstance(v, str):
        return None
    if not _IMAGE.fullmatch(v) or len(v.split("@")[0].rsplit(":", 1)[0]) > 255:
        return f"{v!r} breaks the reference grammar (names are lowercase)"
    return None


def _slurm_time(v: Any) -> str | None:
    """sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or UNLIMITED/INFINITE."""
    if isinstance(v, bool):
        return "not a time"
    if isinstance(v, (int, float)):
        return None if v >= 1 and v == int(v) else f"{v:g} is not a positive number of minutes"
    if isinstance(v, str) and (v.upper() in ("UNLIMITED", "INFINITE")
                               or re.fullmatch(r"(\d+-\d{1,2}(:\d{1,2}){0,2}|\d+(:\d{1,2}){0,2})", v)):
        return None if any(c not in "0-:" for c in v) else "a time of zero"
    return "not a SLURM time (minutes, HH:MM:SS or D-HH:MM:SS)"


def _slurm_mem(v: Any) -> str | None:
    """sbatch --mem / --mem-per-gpu / --mem-per-cpu: a size in MB, or with a K/M/G/T suffix."""
    if isinstance(v, bool):
        return "not a size"
    if isinstance(v, int):
        return None if v >= 1 else f"{v} is not a positive size"
    if isinstance(v, str) and re.fullmatch(r"[1-9]\d*[KMGTkmgt]?[Bb]?", v):
        return None
    return f"{v!r} is not a size (a number of MB, or one with K, M, G or T)"


def _each(check: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    def each(v: Any) -> str | None:
        if not isinstance(v, list):
            return None
        return next((f"{x!r}: {why}" for x in v if (why := check(x))), None)

    return each


PORT = Domain("a TCP port in [1, 65535]", "8780", _number(1, 65535, integral=True))
COUNT = Domain("a whole number >= 1", "1", _number(1, integral=True))
GPUS = Domain("a GPU count in [1, 64]", "8", _number(1, 64, integral=True))
NONNEG = Domain("0 or more", "0", _number(0))
NONNEG_INT = Domain("a whole number >= 0", "0", _number(0, integral=True))
SECONDS = Domain("a positive number of seconds", "60", _number(0, low_open=True))
USD = Domain("a positive amount of US dollars (at most 1000000)", "20", _number(0, 1e6, low_open=True))
URL = Domain("an http(s) URL", "http://10.0.0.5:8780", _url)
IMAGE = Domain("an image reference: [registry/]name[:tag][@digest]", "you/trainstack-slime:0.1", _image)
NONEMPTY = Domain("a non-empty string", "gpu", _text(r"\S(?:.*\S)?", "empty or blank"))
ABS_PATH = Domain("an absolute path", "/mnt", _text(r"/.*", "not an absolute path"))
COUNTRY = Domain("ISO 3166 country codes (two letters)", "[US, DE]", _each(_text(r"[A-Za-z]{2}", "not a two-letter code")))
SLURM_TIME = Domain("a SLURM time (minutes >= 1, HH:MM:SS or D-HH:MM:SS)", "120", _slurm_time)
SLURM_MEM = Domain("a SLURM memory size", "80G", _slurm_mem)

# sbatch long options passed through `cluster.slurm.sbatch` ({option: value}, `-` or `_` spelled)
SBATCH_OPTIONS: dict[str, Domain] = {
    "time": SLURM_TIME, "time_min": SLURM_TIME, "mem": SLURM_MEM, "mem_per_gpu": SLURM_MEM, "mem_per_cpu": SLURM_MEM,
    "nodes": COUNT, "ntasks": COUNT, "ntasks_per_node": COUNT, "cpus_per_task": COUNT, "cpus_per_gpu": COUNT,
    "gpus": COUNT, "gpus_per_node": COUNT, "gpus_per_task": COUNT, "partition": NONEMPTY, "account": NONEMPTY,
    "qos": NONEMPTY, "job_name": NONEMPTY,
}

DOMAINS: dict[str, dict[str, Domain]] = {
    "PodRequest": {"gpu_count": GPUS, "max_price_per_hour": USD, "image": IMAGE, "template_id": NONEMPTY,
                   "executor_id": NONEMPTY, "gpu_type": NONEMPTY, "volume_mount": ABS_PATH, "workdir": ABS_PATH,
                   "slime_root": ABS_PATH, "python": NONEMPTY, "ready_timeout_s": SECONDS, "termination_hours": COUNT,
                   "countries": COUNTRY},
    "LiumSettings": {"restart_limit": NONNEG_INT, "capacity_wait_s": NONNEG, "spend_limit": USD,
                     "sweep_spend_limit": USD, "commander_url": URL, "public_url": URL, "commander_port": PORT,
                     "poll_s": SECONDS, "metric": NONEMPTY},
    "SlurmSettings": {"partition": NONEMPTY, "account": NONEMPTY, "qos": NONEMPTY, "time_min": COUNT,
                      "cpus_per_node": COUNT, "mem_gb": COUNT, "signal_delay_s": COUNT, "max_num_timeout": NONNEG_INT,
                      "max_requeues": NONNEG_INT, "ray_timeout_s": COUNT, "throttle_s": NONNEG,
                      "array_parallelism": COUNT, "cpus_per_gpu": COUNT, "gpus_per_task": COUNT,
                      "mem_per_gpu": SLURM_MEM, "mem_per_cpu": SLURM_MEM, "metric": NONEMPTY, "gres": NONEMPTY,
                      "constraint": NONEMPTY},
    "RayJobSettings": {"address": URL},
}


def _sbatch_problems(options: Any, prefix: str) -> list[tuple[str, Any, str, str]]:
    out: list[tuple[str, Any, str, str]] = []
    for name, value in (options or {}).items() if isinstance(options, dict) else ():
        d = SBATCH_OPTIONS.get(str(name).replace("-", "_"))
        if d is not None and value is not None and (why := d.problem(value)):
            out.append((f"sbatch.{name}", value, f"{why}: must be {d.what}",
                        f"set {prefix}sbatch.{name}={d.example}"))
    return out


def problems_of(obj: Any, prefix: str = "") -> list[tuple[str, Any, str, str]]:
    """(field, value, problem, fix) for each set field of a typed section outside its domain; `prefix`:
    where the section sits (cluster.lium.), for the fix."""
    if not is_dataclass(obj):
        return []
    table = DOMAINS.get(type(obj).__name__, {})
    out: list[tuple[str, Any, str, str]] = []
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name == "sbatch" and type(obj).__name__ == "SlurmSettings":
            out += _sbatch_problems(value, prefix)
            continue
        d = table.get(f.name)
        if d is None or value is None:
            continue
        why = d.problem(value)
        if why:
            out.append((f.name, value, f"{why}: must be {d.what}", f"set {prefix}{f.name}={d.example}"))
    return out
