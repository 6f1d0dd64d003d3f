"""The dry run against a plain Hydra app, and any Hydra app in trainstack's venv against a plain venv.

References, measured in the same run (interleaved, one of each per round, so the machine's load hits
all alike):
- **plain**: a plain `@hydra.main` app composing a copy of the same conf/ tree (resolved, as
  `OmegaConf.to_container(cfg, resolve=True)`), run in a venv built here with this venv's Hydra and
  nothing of trainstack (benchlib.venv_without_trainstack: hydra-core, what it requires, the other Hydra
  plugin distributions installed here). The copy drops the two defaults that name trainstack's sweeper
  and launcher plugins, which that venv does not have.
- **dry run**: `run.py experiment=qwen3-4B-grpo-dapo cluster=lium_8xh100 cluster.lium.pod.image=x/y:1
  dry_run=true` (a remote launcher: with a local one this CPU machine's missing slime checkout stops it).
- **the same plain app in trainstack's venv** (the plugin scan imports trainstack's Hydra plugins there)
  against the same app in a venv holding every distribution of trainstack's venv but trainstack (what
  trainstack itself costs another Hydra app), and against the plain venv (which also lacks what the dev
  extras bring: omegaconf imports `attrs` wherever it is installed).
- `run.py --help` against `run.py --cfg job`.

Figures: medians of wall and CPU (user + system of the process) seconds, their ratios, and the median
of the per-round ratios. Targets (2-core machine): dry run <= 1.05x plain (CPU), plain app in
trainstack's venv <= 1.02x plain venv, --help <= 1.2x --cfg job. Writes benchmarks/results/dry_run.json.
`BENCH_TREE=DIR` times another checkout of trainstack with this venv (its run.py and plugins first
on PYTHONPATH): how the "before" figures were taken. A dry run after the first of its command line's
structure takes its kept composition (trainstack/config/compose_cache.py); `BENCH_COLD=1` makes every
one compose (what the first pays) and writes dry_run.cold.json. Short mode (--quick): 1 round, no warm-up.
Nothing is left behind: the venv, the tree's copy and every run dir live in one temp dir.
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib  # noqa: E402  (benchmarks/ is on sys.path when the script runs)

ROOT = Path(__file__).resolve().parents[1]
TREE = Path(os.environ.get("BENCH_TREE") or ROOT).resolve()
COLD = os.environ.get("BENCH_COLD") == "1"  # every dry run composes (no kept composition): dry_run.cold.json
OVERRIDES = ["experiment=qwen3-4B-grpo-dapo", "cluster=lium_8xh100", "cluster.lium.pod.image=x/y:1"]
PLAIN_APP = '''
import hydra
from omegaconf import OmegaConf


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg):
    OmegaConf.to_container(cfg, resolve=True)


if __name__ == "__main__":
    main()
'''
TRAINSTACK_PLUGINS = ("  - override hydra/sweeper: trainstack", "  - override hydra/launcher: trainstack_local")


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one process."""
    got = benchlib.run_process(argv, cwd, env)
    return got["wall_s"], got["cpu_s"]


def plain_tree(dest: Path) -> None:
    shutil.copytree(ROOT / "conf", dest / "conf", symlinks=False)
    config = dest / "conf" / "config.yaml"
    lines = config.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if not ln.startswith(TRAINSTACK_PLUGINS)]
    assert len(lines) - len(kept) == 2, "conf/config.yaml no longer names trainstack's sweeper and launcher"
    config.write_text("".join(kept))
    (dest / "app.py").write_text(PLAIN_APP)


def summary(times: list[tuple[float, float]]) -> dict:
    med = statistics.median
    return {"wall_median_s": round(med(t[0] for t in times), 3), "cpu_median_s": round(med(t[1] for t in times), 3),
            "wall_min_s": round(min(t[0] for t in times), 3), "cpu_min_s": round(min(t[1] for t in times), 3)}


def ratios(ours: list[tuple[float, float]], ref: list[tuple[float, float]]) -> dict:
    med = statistics.median
    return {"cpu": round(med(t[1] for t in ours) / med(t[1] for t in ref), 3),
            "wall": round(med(t[0] for t in ours) / med(t[0] for t in ref), 3),
            "cpu_pairs_median": round(med(a[1] / b[1] for a, b in zip(ours, ref)), 3),
            "wall_pairs_median": round(med(a[0] / b[0] for a, b in zip(ours, ref)), 3)}


def main() -> None:
    quick = benchlib.quick()
    rounds = int(os.environ.get("BENCH_RUNS", "1" if quick else "15"))
    load_before = [round(x, 2) for x in os.getloadavg()]
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    ours_env = {**base_env, "PYTHONPATH": f"{TREE}:{TREE / 'plugins'}" if TREE != ROOT else ""}
    if COLD:
        ours_env["TRAINSTACK_COMPOSE_CACHE"] = "0"
    run_py = [sys.executable, str(TREE / "run.py")]
    with tempfile.TemporaryDirectory(prefix="bench-dry-") as tmp_s:
        tmp = Path(tmp_s)
        plain_python = benchlib.venv_without_trainstack(tmp / "venv", only_hydra=True)
        all_but_python = benchlib.venv_without_trainstack(tmp / "venv-all-but-trainstack", only_hydra=False)
        plain_tree(tmp / "plain")
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(TREE / "run.py"),
                        str(TREE / "trainstack"), str(TREE / "plugins")], check=True, stdout=subprocess.DEVNULL)
        work = tmp / "work"
        work.mkdir()
        commands = {
            "plain": ([str(plain_python), str(tmp / "plain" / "app.py"), *OVERRIDES], base_env),
            "dry_run": ([*run_py, *OVERRIDES, "dry_run=true"], ours_env),
            "plain_app_in_trainstack_venv": ([sys.executable, str(tmp / "plain" / "app.py"), *OVERRIDES], ours_env),
            "plain_app_in_venv_without_trainstack": ([str(all_but_python), str(tmp / "plain" / "app.py"), *OVERRIDES],
                                                     base_env),
            "help": ([*run_py, "--help"], ours_env),
            "cfg_job": ([*run_py, "--cfg", "job"], ours_env),
        }
        for argv, env in commands.values() if not quick else ():  # warm the page cache (and any missing bytecode)
            run(argv, work, env)
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
        for _ in range(rounds):
            for name, (argv, env) in commands.items():
                times[name].append(run(argv, work, env))
        leftovers = sorted(p.name for p in work.iterdir())
    result = {
        "tree": str(TREE), "rounds": rounds, "overrides": OVERRIDES,
        **{name: summary(t) for name, t in times.items()},
        "dry_run_vs_plain": ratios(times["dry_run"], times["plain"]),
        "plain_app_in_trainstack_venv_vs_without_trainstack": ratios(times["plain_app_in_trainstack_venv"],
                                                                     times["plain_app_in_venv_without_trainstack"]),
        "plain_app_in_trainstack_venv_vs_plain_venv": ratios(times["plain_app_in_trainstack_venv"], times["plain"]),
        "help_vs_cfg_job": ratios(times["help"], times["cfg_job"]),
        "files_left_in_cwd": leftovers,
        "load_average_before": load_before,
        "targets": {"dry_run_vs_plain": 1.05, "plain_app_in_trainstack_venv_vs_without_trainstack": 1.02,
                    "help_vs_cfg_job": 1.2},
    }
    benchlib.write("dry_run.cold.json" if COLD else "dry_run.json", result)


if __name__ == "__main__":
    main()
