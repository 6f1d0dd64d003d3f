"""Benchmark: does ``experiment=cpu-agentic`` learn through its HTTP env, and how fast?

Runs ``python run.py experiment=cpu-agentic`` (the tiny model plays chain_sum episodes, two turns
each, against the env server trainstack starts for the run, through the tiny trainer's
SGLang-style /generate and the slime generate function ``trainstack_plugins.http_env.generate``) in a scratch
directory, then reads the run's metrics: the mean reward of the first and last rollouts (an
episode scores 0..2), the held-out eval before and after, the wall time of the whole command and
of one rollout, and what the env server counted. Writes ``benchmarks/results/agentic_learning.json``.

    .venv/bin/python benchmarks/agentic_learning.py [--num-rollout N] [--window K] [--template thinking]

`--template thinking` runs it through the tiny tokenizer's Qwen3-style thinking template (an empty think
block in every generation prompt, dropped from the re-rendered history: trainstack/tiny/hf_tokenizer.py)
and writes ``agentic_learning_thinking.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    import benchlib

    quick = benchlib.quick()  # short mode: 4 rollouts (benchmarks/benchlib.py)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-rollout", type=int, default=4 if quick else 60)
    p.add_argument("--window", type=int, default=2 if quick else 10, help="rollouts averaged at each end")
    p.add_argument("--template", choices=["plain", "thinking"], default="plain", help="the tiny model's chat template")
    p.add_argument("--out", default=None, help="default: benchmarks/results/agentic_learning[_thinking].json")
    a = p.parse_args(argv)
    thinking = a.template == "thinking"
    a.out = a.out or str(benchlib.result_path("agentic_learning_thinking.json" if thinking else "agentic_learning.json"))
    extra = ["model.hf_checkpoint=${paths.data_root}/chain_sum/tokenizer-thinking"] if thinking else []
    with tempfile.TemporaryDirectory(prefix="agentic-bench-") as tmp:
        cmd = [sys.executable, str(ROOT / "run.py"), "experiment=cpu-agentic", f"env.num_rollout={a.num_rollout}",
               "run_id=agentic-bench", *extra]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - t0
        if res.returncode != 0:
            print(res.stderr[-3000:], file=sys.stderr)
            return 1
        run_dir = Path(tmp) / "runs" / "agentic-bench"
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    rollouts = [r["metrics"] for r in rows if r["step_key"] == "rollout/step"]
    evals = [r["metrics"]["eval/chain_sum"] for r in rows if r["step_key"] == "eval/step"]
    reward = [m["rollout/raw_reward"] for m in rollouts]
    k = a.window
    result = {
        "command": "python run.py experiment=cpu-agentic " + f"env.num_rollout={a.num_rollout}"
                   + "".join(f" '{x}'" for x in extra),
        "template": a.template,
        "failed_frac_max": max(m.get("rollout/failed_frac", 0.0) for m in rollouts),
        "num_rollout": a.num_rollout,
        "samples_per_rollout": 64,
        "reward_first": round(statistics.mean(reward[:k]), 3),
        "reward_last": round(statistics.mean(reward[-k:]), 3),
        "window": k,
        "reward_max_per_episode": 2.0,
        "eval_first": round(evals[0], 3) if evals else None,
        "eval_last": round(evals[-1], 3) if evals else None,
        "wall_s": round(wall, 1),
        "rollout_time_s_median": round(statistics.median(m["perf/rollout_time"] for m in rollouts), 3),
        "step_time_s_median": round(statistics.median(m["perf/step_time"] for m in rollouts), 3),
        "env_server_started": any(e["event"] == "http_env_server_started" for e in events),
        "env_server_stopped": any(e["event"] == "http_env_server_stopped" for e in events),
        "reward_curve": [round(x, 3) for x in reward],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    result["context"] = benchlib.context()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "reward_curve"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
