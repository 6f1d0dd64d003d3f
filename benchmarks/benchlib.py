"""What every benchmark shares: a short mode and where (and with what context) results are written.

Short mode (`--quick` on the command line, or TRAINSTACK_BENCH_QUICK=1): the same code paths at a
fraction of the size, so tests/test_benchmarks.py can run every benchmark in CI and see that it still
works. A short run never overwrites the recorded figures in benchmarks/results/: its JSON goes to
$TRAINSTACK_BENCH_OUT (a directory), else to a temporary directory. Every result records the command,
the date and the machine's load average (`uptime`), because the machine is shared.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
_ARGV = list(sys.argv)  # as typed, before `--quick` is taken out


def quick() -> bool:
    """Short mode asked for; `--quick` is removed from sys.argv so the script's own parser never sees it."""
    if "--quick" in sys.argv:
        sys.argv.remove("--quick")
        os.environ["TRAINSTACK_BENCH_QUICK"] = "1"
    return os.environ.get("TRAINSTACK_BENCH_QUICK") == "1"


def pick(full, short):  # type: ignore[no-untyped-def]
    """`full` normally, `short` in short mode."""
    return short if quick() else full


def result_path(name: str) -> Path:
    """benchmarks/results/<name> for a full run; $TRAINSTACK_BENCH_OUT/<name> (or a temp dir) when short."""
    out = os.environ.get("TRAINSTACK_BENCH_OUT")
    if out:
        base = Path(out)
    elif quick():
        base = Path(tempfile.mkdtemp(prefix="bench-quick-"))
    else:
        base = RESULTS
    base.mkdir(parents=True, exist_ok=True)
    return base / name


def context() -> dict:
    """How the figures were taken: command, date, machine and its load when the run ended."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    return {"command": " ".join(shlex.quote(a) for a in ["python", *(
        str(Path(a).resolve().relative_to(ROOT)) if a.endswith(".py") and Path(a).resolve().is_relative_to(ROOT)
        else a for a in _ARGV)]),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "load_average_1_5_15": load, "cpus": os.cpu_count(), "python": platform.python_version(),
            "quick": quick()}


def write(name: str, result: dict) -> Path:
    """The result with its context, as JSON; printed too."""
    path = result_path(name)
    full = {**result, "context": context()}
    path.write_text(json.dumps(full, indent=2) + "\n")
    print(json.dumps(full, indent=2))
    print(f"written: {path}", file=sys.stderr)
    return path
