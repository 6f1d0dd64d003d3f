"""What holds for one user wherever they type a command: the default runs root and how trainstack
is invoked here.

`$TRAINSTACK_RUNS_ROOT` (set once, e.g. in ~/.bashrc) is where runs are written (`paths.runs_root`'s
default in conf/config.yaml) and where `trainstack status | logs | cancel | compare | diff | exec`
look run ids up (their `--runs-root` default), so a run id works from any directory. Unset: `runs`,
relative to the directory the command runs in (a checkout's `./runs`).
"""
from __future__ import annotations

import os
import shlex
from pathlib import Path

RUNS_ROOT_ENV = "TRAINSTACK_RUNS_ROOT"


def default_runs_root() -> str:
    return os.path.expanduser(os.environ.get(RUNS_ROOT_ENV) or "runs")


def _same(a: str | Path, b: str | Path) -> bool:
    return os.path.abspath(a) == os.path.abspath(b)


def runs_root_flag(run_dir: str | Path) -> str:
    """` --runs-root DIR` when a command given the run id would not find `run_dir` by default."""
    root = os.path.dirname(os.path.abspath(run_dir))
    return "" if _same(root, default_runs_root()) else f" --runs-root {shlex.quote(root)}"


def run_target(run_id: str, run_dir: str | Path) -> str:
    """How to name a run to status/logs/cancel here: its id when the default runs root holds it, else its dir."""
    return run_id if _same(Path(default_runs_root()) / run_id, run_dir) else shlex.quote(os.path.abspath(run_dir))


def launch_words() -> list[str]:
    """`python run.py` in a checkout (run.py is here), `trainstack run` anywhere else (a pip install)."""
    here = Path("run.py")
    package = Path(__file__).resolve().parents[1]
    if here.is_file() and here.resolve() == package.parent / "run.py":
        return ["python", "run.py"]
    return ["trainstack", "run"]
