"""Dry-run sweeps of 256 and 1,024 points, on the GPU recipe and on the CPU default: time, CPU, peak memory.

- GPU recipe: `run.py -m hydra/launcher=lium experiment=qwen3-4B-grpo-dapo cluster=lium_8xh100
  cluster.lium.pod.image=x/y:1 dry_run=true algo.lr=<a values> args.seed=<b values>`: every point
  composed, validated, rendered and stored as a spec by the Lium sweep plugin, nothing submitted.
- CPU default: `run.py -m dry_run=true algo.lr=<a> args.seed=<b>`: the in-process launcher, every point
  built, preflighted with the tiny backend's argv check, printed.

Each sweep is one process (wall, user + system CPU, peak RSS from wait4); the reference, measured in
the same run, is the recipe's single dry run (one process, `dry_run=true`), so each sweep is also
quoted per point and as a multiple of one dry run. "Memory flat in the number of points": the peak RSS
of the 1,024-point sweep against the 256-point one (and against the single dry run).
Targets (2-core machine): 256 points <= 3 s, 1,024 <= 10 s, on both recipes.
Writes benchmarks/results/sweep_scale.json. `BENCH_TREE=DIR` times another checkout with this venv.
Short mode (--quick): 8 and 32 points. Everything a sweep writes goes to one temp dir, removed.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib  # noqa: E402  (benchmarks/ is on sys.path when the script runs)

ROOT = Path(__file__).resolve().parents[1]
TREE = Path(os.environ.get("BENCH_TREE") or ROOT).resolve()
RECIPES = {
    "gpu_recipe_lium": ["hydra/launcher=lium", "experiment=qwen3-4B-grpo-dapo", "cluster=lium_8xh100",
                        "cluster.lium.pod.image=x/y:1"],
    "cpu_default": [],
}


def grid(points: int) -> list[str]:
    """algo.lr x args.seed, as square as the count allows."""
    a = 1 << ((points.bit_length() - 1) // 2)
    b = points // a
    assert a * b == points
    return [f"algo.lr={','.join(f'{i}e-7' for i in range(1, a + 1))}",
            f"args.seed={','.join(str(i) for i in range(1, b + 1))}"]


def main() -> None:
    quick = benchlib.quick()
    sizes = [8, 32] if quick else [256, 1024]
    load_before = [round(x, 2) for x in os.getloadavg()]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    if TREE != ROOT:
        env["PYTHONPATH"] = f"{TREE}:{TREE / 'plugins'}"
    run_py = [sys.executable, str(TREE / "run.py")]
    result: dict = {"tree": str(TREE), "sizes": sizes}
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp_s:
        tmp = Path(tmp_s)
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(TREE / "run.py"),
                        str(TREE / "trainstack"), str(TREE / "plugins")], check=True, stdout=subprocess.DEVNULL)
        for name, overrides in RECIPES.items():
            paths = [f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data"]
            single = [o for o in overrides if not o.startswith("hydra/")]
            if not quick:
                benchlib.run_process([*run_py, *single, *paths, "dry_run=true"], tmp, env)  # warm the page cache
            one = benchlib.run_process([*run_py, *single, *paths, "dry_run=true"], tmp, env)
            rows = {"single_dry_run": _rounded(one)}
            for n in sizes:
                got = benchlib.run_process([*run_py, "-m", *overrides, *paths, "dry_run=true", *grid(n),
                                            f"hydra.sweep.dir={tmp}/sweep-{name}-{n}"], tmp, env)
                if got["lines"] < n:
                    raise SystemExit(f"{name} {n}: {got['lines']} lines printed, one per point expected")
                rows[str(n)] = {**_rounded(got), "per_point_cpu_ms": round(1000 * got["cpu_s"] / n, 2),
                                "vs_single_dry_run_cpu": round(got["cpu_s"] / one["cpu_s"], 2)}
            big, small = rows[str(sizes[1])], rows[str(sizes[0])]
            rows["peak_rss_ratio_largest_vs_smallest"] = round(big["peak_rss_mib"] / small["peak_rss_mib"], 3)
            rows["peak_rss_ratio_largest_vs_single"] = round(big["peak_rss_mib"] / one["peak_rss_mib"], 3)
            result[name] = rows
        left = sorted(p.name for p in tmp.iterdir() if p.name not in ("runs", "data"))
    result["load_average_before"] = load_before
    result["left_in_cwd"] = left
    result["targets"] = {"256_s": 3, "1024_s": 10, "memory": "flat in the number of points"}
    benchlib.write("sweep_scale.json", result)


def _rounded(got: dict) -> dict:
    return {"wall_s": round(got["wall_s"], 2), "cpu_s": round(got["cpu_s"], 2),
            "peak_rss_mib": round(got["peak_rss_mib"], 1)}


if __name__ == "__main__":
    main()
