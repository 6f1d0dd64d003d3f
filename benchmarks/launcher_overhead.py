"""The launcher's fixed cost: `run.py` launching a CPU run against the trainer it starts, run alone.

Pairs, interleaved (so the machine's load hits both alike): `run.py env.num_rollout=N run_id=...` (the
whole launch: compose, checks, lease, resume plan, spec, the trainer, its end) and the same trainer run
alone (`python -m trainstack.tiny.train <the rendered argv>`, with the rendered env, into a fresh
checkpoint dir). Per pair: wall and CPU (the process tree's, from wait4), and the peak of the tree's
summed RSS (sampled from /proc every 20 ms). The launcher's cost is the difference; its share of a
100-rollout run is that difference over the 100-rollout trainer's time (measured once in the same run).
Targets (2-core machine): <= 0.5 s per run and <= 2% of a 100-rollout CPU run.
Writes benchmarks/results/launcher_overhead.json. `BENCH_TREE=DIR` times another checkout.
`BENCH_COLD=1`: every launch composes its config (no kept composition, trainstack/config/compose_cache.py:
what the first launch of a command line's structure pays); writes launcher_overhead.cold.json.
Short mode (--quick): 1-rollout runs, 1 pair, no warm-up, no 100-rollout run. Everything lives in one temp dir.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import benchlib

ROOT = Path(__file__).resolve().parents[1]
TREE = Path(os.environ.get("BENCH_TREE") or ROOT).resolve()


COLD = os.environ.get("BENCH_COLD") == "1"


def env() -> dict[str, str]:
    extra = {"TRAINSTACK_COMPOSE_CACHE": "0"} if COLD else {}
    return benchlib.tree_env(TREE, WANDB_MODE="disabled", **extra)


def tree_rss_mib(pid: int) -> float:
    """The summed RSS of `pid` and its descendants now (MiB)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        rss[int(entry.name)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total / 2**20


def measured(argv: list[str], cwd: Path, extra_env: dict[str, str] | None = None) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env={**env(), **(extra_env or {})}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], tree_rss_mib(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{err.decode()[-3000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_tree_rss_mib": peak[0]}


def trainer_alone(cmd: dict, save: Path, cwd: Path) -> dict:
    argv = list(cmd["argv"])
    for flag in ("--save", "--load"):
        argv[argv.index(flag) + 1] = str(save)
    rendered = {k: v for k, v in cmd["env"].items() if v is not None and k != "PYTHONPATH"}
    return measured([sys.executable, *cmd["entrypoint"][1:], *argv], cwd,
                    {**rendered, "TENSORBOARD_DIR": str(save / "tensorboard")})


def main() -> None:
    quick = benchlib.quick()
    rollouts, pairs = (1, 1) if quick else (3, int(os.environ.get("BENCH_RUNS", "7")))
    load_before = [round(x, 2) for x in os.getloadavg()]
    run_py = [sys.executable, str(TREE / "run.py")]
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp_s:
        tmp = Path(tmp_s)
        common = [f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data"]

        def rendered(n: int) -> dict:
            out = tmp / f"cmd-{n}.json"
            subprocess.run([*run_py, f"env.num_rollout={n}", *common, "dry_run=true", f"output={out}"], cwd=tmp,
                           env=env(), check=True, stdout=subprocess.DEVNULL)
            return json.loads(out.read_text())

        cmd = rendered(rollouts)
        launches, alone = [], []
        warm = 0 if quick else 1  # the first pair warms the page cache (and the data set), not counted
        for i in range(pairs + warm):
            a = measured([*run_py, f"env.num_rollout={rollouts}", f"run_id=launch-{i}", *common], tmp)
            b = trainer_alone(cmd, tmp / f"alone-{i}", tmp)
            if i >= warm:
                launches.append(a)
                alone.append(b)
        med = statistics.median
        result: dict = {"tree": str(TREE), "rollouts": rollouts, "pairs": pairs}
        for name, runs in (("launch", launches), ("trainer_alone", alone)):
            result[name] = {k: round(med(r[k] for r in runs), 3) for k in runs[0]}
        result["launcher_cost"] = {
            "wall_s": round(med(a["wall_s"] - b["wall_s"] for a, b in zip(launches, alone)), 3),
            "cpu_s": round(med(a["cpu_s"] - b["cpu_s"] for a, b in zip(launches, alone)), 3),
            "peak_tree_rss_mib": round(med(a["peak_tree_rss_mib"] - b["peak_tree_rss_mib"]
                                           for a, b in zip(launches, alone)), 1)}
        result["launcher_cost_quartiles"] = {  # the pairs' spread: the trainer's own time varies by ~0.1 s
            k: [round(q, 3) for q in statistics.quantiles([a[f"{k}_s"] - b[f"{k}_s"] for a, b in zip(launches, alone)],
                                                          n=4)[::2]] for k in ("wall", "cpu")} if len(launches) > 1 else {}
        if not quick:
            long = trainer_alone(rendered(100), tmp / "alone-100", tmp)
            result["trainer_alone_100_rollouts"] = {k: round(v, 3) for k, v in long.items()}
            result["launcher_cost_share_of_100_rollouts"] = {
                "wall": round(result["launcher_cost"]["wall_s"] / long["wall_s"], 4),
                "cpu": round(result["launcher_cost"]["cpu_s"] / long["cpu_s"], 4)}
    result["load_average_before"] = load_before
    result["targets"] = {"launcher_cost_s": 0.5, "share_of_100_rollouts": 0.02}
    benchlib.write("launcher_overhead.cold.json" if COLD else "launcher_overhead.json", result)


if __name__ == "__main__":
    main()
