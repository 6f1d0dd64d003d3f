"""Metric sinks with slime's names: wandb (offline without a key), TensorBoard, a JSONL file.

Each ``log(step_key, step, metrics)`` call is one logged step, e.g.
``log("train/step", 12, {"train/loss": ...})``. wandb and tensorboard are imported only
when asked for. ``TRAINSTACK_METRICS_FILE`` gets one JSON line per call, written with a
single O_APPEND write so a SIGKILL never leaves half a line in the middle of the file.

A resumed run redoes the rollouts after its checkpoint: before appending, the lines of those
rollouts (and of their train and eval steps) are dropped from the file, so it holds each step once.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def tensorboard_dir(args) -> str:
    env = os.environ.get("TENSORBOARD_DIR")
    if env:
        return env
    exp = args.tb_experiment_name or time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("tensorboard_log", args.tb_project_name, exp)


def first_steps(first_rollout: int, steps_per_rollout: int) -> dict[str, int]:
    """The first step of each step key that a run starting at `first_rollout` logs (again)."""
    return {"rollout/step": first_rollout, "eval/step": first_rollout,
            "train/step": first_rollout * max(int(steps_per_rollout or 1), 1)}


def drop_redone_steps(path: str, first: dict[str, int]) -> None:
    """Keep only the lines of steps before `first` (per step key); a line cut by a kill goes too.
    Written to a temp file and renamed over the old one, so a kill here loses nothing."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return
    kept = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        step, bound = rec.get("step"), first.get(str(rec.get("step_key")))
        if bound is not None and isinstance(step, (int, float)) and step >= bound:
            continue
        kept.append(line + "\n")
    from pathlib import Path

    from trainstack.run.rundir import atomic_write

    atomic_write(Path(path), "".join(kept))


class Metrics:
    def __init__(self, args, first_rollout: int = 0):
        self.args = args
        self.wandb_run: Any = None
        self.wandb_step = 0  # W&B's _step, continued across restarts
        self.tb: Any = None
        self.file_fd: int | None = None
        path = os.environ.get("TRAINSTACK_METRICS_FILE")
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            if first_rollout > 0:  # resumed: the steps redone from here are logged once, by this run
                drop_redone_steps(path, first_steps(first_rollout, args.num_steps_per_rollout))
            self.file_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if args.use_wandb:
            self._init_wandb()
        if args.use_tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=tensorboard_dir(args))

    def _init_wandb(self) -> None:
        import wandb

        a = self.args
        mode = a.wandb_mode or os.environ.get("WANDB_MODE")
        if mode is None:
            mode = "online" if (os.environ.get("WANDB_API_KEY") or a.wandb_key) else "offline"
        run_id = a.wandb_run_id or os.environ.get("WANDB_RUN_ID")
        resume = os.environ.get("WANDB_RESUME") or ("allow" if run_id else None)
        if a.wandb_key and mode == "online":
            wandb.login(key=a.wandb_key, host=a.wandb_host)
        name = a.wandb_group if not a.wandb_random_suffix else \
            f"{a.wandb_group}_{run_id or wandb.util.generate_id()}"  # type: ignore[attr-defined]
        if os.environ.get("TRAINSTACK_RUN_ID") and not a.wandb_random_suffix:  # trainstack/config/wandb_naming.py
            name = os.environ["TRAINSTACK_RUN_ID"]
        step = 0
        if run_id and mode == "offline":  # a restart continues the history of its earlier offline runs
            from trainstack.reports.wandb_sync import next_step

            step = next_step(Path(a.wandb_dir or ".") / "wandb", run_id)
        config = {k: v for k, v in vars(a).items() if isinstance(v, (int, float, str, bool, type(None), list, dict))}
        self.wandb_run = wandb.init(project=a.wandb_project or "trainstack", entity=a.wandb_team, group=a.wandb_group,
                                    name=name,
                                    id=run_id, resume=resume, dir=a.wandb_dir, mode=mode,  # type: ignore[arg-type]
                                    config=config,
                                    settings=wandb.Settings(console="off", x_disable_stats=True))
        for key in ("train", "rollout", "eval", "perf"):
            self.wandb_run.define_metric(f"{key}/step")
        self.wandb_run.define_metric("train/*", step_metric="train/step")
        for key in ("rollout", "perf"):
            self.wandb_run.define_metric(f"{key}/*", step_metric="rollout/step")
        self.wandb_run.define_metric("eval/*", step_metric="eval/step")
        self.wandb_step = max(step, int(getattr(self.wandb_run, "step", 0) or 0))  # online resume: the server's

    def log(self, step_key: str, step: int, metrics: dict[str, Any]) -> None:
        metrics = {k: float(v) for k, v in metrics.items()}
        if self.file_fd is not None:
            line = json.dumps({"step_key": step_key, "step": step, "metrics": metrics}, sort_keys=True) + "\n"
            os.write(self.file_fd, line.encode())
        if self.wandb_run is not None:
            self.wandb_run.log({step_key: step, **metrics}, step=self.wandb_step)
            self.wandb_step += 1
        if self.tb is not None:
            for k, v in metrics.items():
                self.tb.add_scalar(k, v, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()
        if self.file_fd is not None:
            os.close(self.file_fd)
            self.file_fd = None
