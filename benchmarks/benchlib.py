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
            "quick": quick(), "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("BENCH_")}}


def write(name: str, result: dict) -> Path:
    """The result with its context, as JSON; printed too."""
    path = result_path(name)
    full = {**result, "context": context()}
    path.write_text(json.dumps(full, indent=2) + "\n")
    print(json.dumps(full, indent=2))
    print(f"written: {path}", file=sys.stderr)
    return path



def venv_without_trainstack(dest: Path, only_hydra: bool) -> Path:
    """A venv at `dest` without trainstack, its packages linked from this venv's site-packages (the same
    files, versions and bytecode; no network); returns its python. `only_hydra`: hydra-core, what it
    requires and the other Hydra plugin distributions installed here (Hydra's plugin scan imports them in
    any app); else every distribution installed here but trainstack (its editable finder, its metadata
    and its Hydra plugins)."""
    import subprocess
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    site = Path(subprocess.run([str(dest / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    ours = Path(sysconfig.get_path("purelib"))
    links: set[tuple[str, ...]] = set()
    for dist in _dists_without_trainstack(only_hydra):
        for f in dist.files or []:
            parts = Path(str(f)).parts
            if parts[0] in ("..", "__pycache__", "bin"):
                continue
            links.add(parts[:2] if parts[0] == "hydra_plugins" and len(parts) > 2 else parts[:1])  # a namespace: members
    for top in sorted(links):
        src, link = ours.joinpath(*top), site.joinpath(*top)
        if src.exists() and not link.exists() and not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(src)
    return dest / "bin" / "python"


def _dists_without_trainstack(only_hydra: bool) -> list:
    import importlib.metadata as md

    from packaging.requirements import Requirement

    dists = {d.metadata["Name"].lower(): d for d in md.distributions()}
    dists.pop("trainstack", None)
    if not only_hydra:
        return list(dists.values())
    wanted, todo = set(), ["hydra-core"]
    while todo:  # hydra-core and its requirements, recursively
        name = todo.pop().lower()
        if name in wanted or name not in dists:
            continue
        wanted.add(name)
        todo += [r.name for r in map(Requirement, dists[name].requires or []) if r.marker is None or r.marker.evaluate()]
    wanted |= {n for n, d in dists.items() if any(str(f).startswith("hydra_plugins/") for f in d.files or [])}
    return [dists[n] for n in sorted(wanted)]



def run_process(argv: list[str], cwd: Path, env: dict[str, str]) -> dict:
    """One process to its end: wall, CPU (user + system) seconds, peak RSS (MiB; this process alone,
    from wait4) and its stdout's line count; exits naming the command when it fails."""
    import subprocess
    import threading
    import time

    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda n=n, f=f: got.__setitem__(n, f.read()))
               for n, f in (("out", proc.stdout), ("err", proc.stderr))]
    for t in readers:
        t.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    for t in readers:
        t.join()
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{got['err'].decode()[-3000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024,
            "lines": got["out"].count(b"\n")}


def tree_env(tree: Path, **extra: str) -> dict[str, str]:
    """The environment a benchmark runs trainstack's commands in: `tree`'s checkout (and its Hydra
    plugins) first on PYTHONPATH, bytecode written, W&B off, plus `extra`."""
    out = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    out.update(PYTHONPATH=f"{tree}:{tree / 'plugins'}", WANDB_API_KEY="", **extra)
    return out
