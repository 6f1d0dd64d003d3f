"""Helpers shared by the tiny-backend tests (importable: pytest puts tests/tiny on sys.path)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


ARCH = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--ffn-hidden-size", "256",
        "--seq-length", "32", "--max-position-embeddings", "32", "--hidden-dropout", "0.0", "--attention-dropout", "0.0"]
GRPO = ["--advantage-estimator", "grpo", "--eps-clip", "0.2", "--eps-clip-high", "0.28", "--entropy-coef", "0.0",
        "--optimizer", "adam", "--lr-decay-style", "constant", "--weight-decay", "0.1", "--adam-beta1", "0.9",
        "--adam-beta2", "0.98", "--lr", "1e-3"]
CLUSTER = ["--actor-num-nodes", "1", "--actor-num-gpus-per-node", "1", "--colocate"]


def task_argv(data: Path, *, num_rollout: int, rbs: int = 16, n: int = 16, gbs: int = 128, eval_interval=None) -> list[str]:
    argv = ["--prompt-data", str(data / "train.jsonl"), "--input-key", "prompt", "--label-key", "label",
            "--rollout-shuffle", "--rollout-batch-size", str(rbs), "--n-samples-per-prompt", str(n),
            "--global-batch-size", str(gbs), "--num-rollout", str(num_rollout), "--rollout-max-response-len", "2",
            "--rollout-temperature", "1.0", "--custom-rm-path", "trainstack.tiny.arithmetic.reward"]
    if eval_interval:
        argv += ["--eval-interval", str(eval_interval), "--eval-prompt-data", "arithmetic", str(data / "eval.jsonl")]
    return argv


def env_for(metrics_file: Path | None = None, **extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TRAINSTACK_METRICS_FILE", None)
    if metrics_file is not None:
        env["TRAINSTACK_METRICS_FILE"] = str(metrics_file)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_tiny(argv: list[str], *, cwd: Path, metrics_file: Path | None = None, timeout: float = 600, **env):
    return subprocess.run([sys.executable, "-m", "trainstack.tiny.train", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env_for(metrics_file, **env))


def read_metrics(path: Path, skip_perf: bool = True) -> dict:
    """(step_key, step) -> metrics of the LAST record (a resumed run re-logs the replayed rollouts)."""
    out = {}
    for line in path.read_text().splitlines():
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        m = {k: v for k, v in d["metrics"].items() if not (skip_perf and k.startswith("perf/"))}
        out[(d["step_key"], d["step"])] = m
    return out
