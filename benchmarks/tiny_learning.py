"""Benchmark: does the cpu-smoke configuration learn, how fast, and how much memory?

Runs ``python -m trainstack.tiny.train`` with the cpu-smoke argv (model=tiny + algo=grpo +
env=arithmetic + a local 1-"GPU" colocated cluster, saves every 100 rollouts) and a fixed
seed, then writes the reward curve, eval curve, wall time and the child's peak RSS to
``benchmarks/results/tiny_learning.json``. It also scores the final checkpoint's *exact-match*
accuracy on the held-out eval prompts (the reward gives near-miss partial credit, so
``eval/arithmetic`` alone overstates how many answers are exactly right): sampled at the
rollout temperature (same as ``eval/arithmetic``) and greedy.

    .venv/bin/python benchmarks/tiny_learning.py [--num-rollout N] [--seed S]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_smoke_argv(data: Path, ckpt: Path, num_rollout: int, seed: int) -> list[str]:
    """The argv the Hydra app renders for cpu-smoke (model/tiny.yaml, algo/grpo, env/arithmetic)."""
    return [
        # model=tiny
        "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--ffn-hidden-size", "256",
        "--seq-length", "32", "--max-position-embeddings", "32", "--hidden-dropout", "0.0",
        "--attention-dropout", "0.0", "--lr", "1e-3",
        # algo=grpo (entropy_coef 0.0 there; env=arithmetic overrides it to 0.1)
        "--advantage-estimator", "grpo", "--eps-clip", "0.2", "--eps-clip-high", "0.28", "--entropy-coef", "0.1",
        "--optimizer", "adam", "--lr-decay-style", "constant", "--weight-decay", "0.1", "--adam-beta1", "0.9",
        "--adam-beta2", "0.98",
        # env=arithmetic
        "--prompt-data", str(data / "train.jsonl"), "--input-key", "prompt", "--label-key", "label",
        "--rollout-shuffle", "--rollout-batch-size", "16", "--n-samples-per-prompt", "16",
        "--global-batch-size", "128", "--num-rollout", str(num_rollout), "--rollout-max-response-len", "2",
        "--rollout-temperature", "1.0", "--eval-interval", "100", "--eval-prompt-data", "arithmetic",
        str(data / "eval.jsonl"), "--n-samples-per-eval-prompt", "4",
        "--custom-rm-path", "trainstack.tiny.arithmetic.reward",
        # cluster=local-cpu
        "--actor-num-nodes", "1", "--actor-num-gpus-per-node", "1", "--colocate",
        # checkpointing + seed
        "--save", str(ckpt), "--load", str(ckpt), "--save-interval", "100", "--seed", str(seed),
    ]


def eval_exact(ckpt: Path, eval_file: Path, argv: list[str], n: int = 4) -> dict:
    """Exact-match accuracy (and mean reward) of the final checkpoint on the eval prompts."""
    from trainstack.tiny.arithmetic import is_correct, score
    from trainstack.tiny.checkpoint import load_checkpoint
    from trainstack.tiny.validate import main_parse
    from trainstack.tiny.generate import sample
    from trainstack.tiny.model import ModelConfig, build_model, setup_determinism
    from trainstack.tiny.tokenizer import TinyTokenizer

    setup_determinism(1)
    args = main_parse(argv).args
    tok = TinyTokenizer()
    model = build_model(ModelConfig.from_args(args, tok.vocab_size), args.seed)
    _, st = load_checkpoint(str(ckpt), None, load_optim=False, load_rng=False)
    model.load_state_dict(st.model)
    rows = [json.loads(x) for x in eval_file.read_text().splitlines() if x.strip()]
    out = {"eval_prompts": len(rows)}
    for name, temp, k in (("sampled", args.rollout_temperature, n), ("greedy", 0.0, 1)):
        gens = sample(model, [tok.encode(r["prompt"]) for r in rows for _ in range(k)],
                      max_new_tokens=args.rollout_max_response_len, temperature=temp,
                      seed=(args.seed, "bench-exact", name))
        labels = [r["label"] for r in rows for _ in range(k)]
        resp = [tok.decode(g.output_ids) for g in gens]
        out[f"{name}_exact_match"] = round(sum(is_correct(x, y) for x, y in zip(resp, labels)) / len(resp), 4)
        out[f"{name}_mean_reward"] = round(sum(score(x, y) for x, y in zip(resp, labels)) / len(resp), 4)
    return out


def main() -> None:
    import benchlib

    quick = benchlib.quick()  # short mode: 8 rollouts (benchmarks/benchlib.py)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-rollout", type=int, default=8 if quick else 800)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=None, help="default: benchmarks/results/tiny_learning.json")
    a = p.parse_args()
    a.out = a.out or str(benchlib.result_path("tiny_learning.json"))
    sys.path.insert(0, str(ROOT))
    from trainstack.tiny.arithmetic import write_task

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_task(tmp / "data")
        argv = cpu_smoke_argv(tmp / "data", tmp / "ckpt", a.num_rollout, a.seed)
        env = dict(os.environ, TRAINSTACK_METRICS_FILE=str(tmp / "metrics.jsonl"),
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "trainstack.tiny.train", *argv], env=env, cwd=tmp,
                           capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            sys.exit(f"run failed ({r.returncode}):\n{r.stderr[-3000:]}")
        peak_rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        recs = [json.loads(x) for x in (tmp / "metrics.jsonl").read_text().splitlines()]
        n_train = len((tmp / "data" / "train.jsonl").read_text().splitlines())
        exact = eval_exact(tmp / "ckpt", tmp / "data" / "eval.jsonl", argv)
    reward = [d["metrics"]["rollout/raw_reward"] for d in recs if d["step_key"] == "rollout/step"]
    step_times = [d["metrics"]["perf/step_time"] for d in recs if d["step_key"] == "rollout/step"]
    evals = {d["step"]: d["metrics"]["eval/arithmetic"] for d in recs if d["step_key"] == "eval/step"}

    def mean(xs):
        return sum(xs) / max(len(xs), 1)

    def first_reaching(th):
        for i in range(len(reward)):
            if mean(reward[max(0, i - 19):i + 1]) >= th and i >= 19:
                return i
        return None

    result = {
        "benchmark": "tiny_learning",
        "what": "cpu-smoke (model=tiny, algo=grpo, env=arithmetic) from random weights",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "torch_threads": int(os.environ.get("TRAINSTACK_TINY_THREADS", "1"))},
        "argv": argv[:],
        "seed": a.seed,
        "num_rollout": a.num_rollout,
        "wall_time_s": round(wall, 1),
        "peak_rss_mib": round(peak_rss_mib, 1),
        "mean_step_time_s": round(mean(step_times), 4),
        "reward_first10": round(mean(reward[:10]), 4),
        "reward_last20": round(mean(reward[-20:]), 4),
        "reward_last100": round(mean(reward[-100:]), 4),
        "reward_max_20_window": round(max(mean(reward[i:i + 20]) for i in range(max(1, len(reward) - 19))), 4),
        "rollout_reaching_0.7_(20-rollout mean)": first_reaching(0.7),
        "rollout_reaching_0.9_(20-rollout mean)": first_reaching(0.9),
        "eval_arithmetic_by_rollout": evals,
        "eval_first": evals.get(min(evals)) if evals else None,
        "eval_last": evals.get(max(evals)) if evals else None,
        "train_prompts": n_train,
        "final_checkpoint_on_eval_prompts": exact,
        "reward_curve_every_10": [round(mean(reward[i:i + 10]), 4) for i in range(0, len(reward), 10)],
    }
    for i, x in enumerate(result["argv"]):
        if x.startswith(str(Path(tempfile.gettempdir()))):
            result["argv"][i] = "<tmp>/" + Path(x).name
    result["context"] = benchlib.context()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("argv", "reward_curve_every_10")}, indent=1))


if __name__ == "__main__":
    main()
