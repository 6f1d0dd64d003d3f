"""Latest-complete-checkpoint lookup with 1000 `iter_*` directories (target <= 50 ms), and the
resume overhead of the CPU smoke run: relaunch-to-first-new-rollout vs fresh-start-to-first-rollout.

Results: benchmarks/results/resume.json. Short mode (--quick): 100 directories, one relaunch pair.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import benchlib  # noqa: E402

from trainstack.storage.checkpoints import inspect  # noqa: E402


def lookup_benchmark(n: int = 1000) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        save = Path(tmp)
        for i in range(n):
            d = save / f"iter_{i:07d}"
            d.mkdir()
            (d / "meta.json").write_text('{"files": ["meta.json", "model.pt"]}')  # what the save wrote
            (d / "model.pt").write_bytes(b"x")
        (save / "latest_checkpointed_iteration.txt").write_text(str(n - 1))
        times = []
        for _ in range(50):
            t0 = time.perf_counter()
            st = inspect(str(save))
            times.append(time.perf_counter() - t0)
            assert st.latest_complete == n - 1
    return {"iter_dirs": n, "median_ms": round(statistics.median(times) * 1e3, 3),
            "max_ms": round(max(times) * 1e3, 3), "target_ms": 50}


def first_rollout_seconds(argv: list[str], cwd: str, metrics: Path, after: int) -> float:
    """Seconds from launch until the metrics file shows a rollout numbered >= after."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        while proc.poll() is None:
            if metrics.exists():
                for ln in metrics.read_text().splitlines():
                    try:
                        rec = json.loads(ln)
                    except ValueError:
                        continue
                    if rec.get("step_key") == "rollout/step" and rec.get("step", -1) >= after:
                        return time.perf_counter() - t0
            time.sleep(0.02)
        raise RuntimeError(f"exited with {proc.returncode} before rollout {after}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            proc.wait()


def resume_benchmark(reps: int = 3) -> dict:
    """Same config both ways (eval off, prompt files already written): the difference is the cost
    of finding, checking and loading the checkpoint (lease, resume plan, weights/optimizer/RNG/data)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    fresh, resumed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        base = [sys.executable, str(ROOT / "run.py"), f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data",
                "env.eval_interval=null", "env.eval_prompt_data=null", "args.save_interval=2"]
        subprocess.run([*base, "run_id=warm", "env.num_rollout=1"], cwd=tmp, env=env, capture_output=True, check=True)
        for i in range(reps):
            run = f"bench{i}"
            metrics = Path(tmp) / "runs" / run / "metrics.jsonl"
            fresh.append(first_rollout_seconds([*base, f"run_id={run}", "env.num_rollout=6"], tmp, metrics, 0))
            subprocess.run([*base, f"run_id={run}", "env.num_rollout=6"], cwd=tmp, env=env, capture_output=True,
                           check=True)  # finish: checkpoint at rollout 5
            resumed.append(first_rollout_seconds([*base, f"run_id={run}", "env.num_rollout=8"], tmp, metrics, 6))
    f, r = statistics.median(fresh), statistics.median(resumed)
    return {"fresh_start_to_first_rollout_s": round(f, 2), "relaunch_to_first_new_rollout_s": round(r, 2),
            "overhead_s": round(r - f, 2), "reps": reps, "resumed_from": 5}


if __name__ == "__main__":
    quick = benchlib.quick()
    out = {"lookup": lookup_benchmark(100 if quick else 1000), "resume": resume_benchmark(1 if quick else 3),
           "cpus": os.cpu_count()}
    benchlib.write("resume.json", out)
