"""Metric sinks with slime's names: wandb (offline without a key), TensorBoard, a JSONL file.

Each ``log(step_key, step, metrics)`` call is one logged step, e.g.
``log("train/step", 12, {"train/loss": ...})``. wandb and tensorboard are imported only
when asked for. ``TRAINSTACK_METRICS_FILE`` gets one JSON line per call, written with a
single O_APPEND write so a SIGKILL never leaves half a line in the middle of the file.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any


def tensorboard_dir(args) -> str:
    env = os.environ.get("TENSORBOARD_DIR")
    if env:
        return env
    exp = args.tb_experiment_name or time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("tensorboard_log", args.tb_project_name, exp)


class Metrics:
    def __init__(self, args):
        self.args = args
        self.wandb_run = None
        self.tb = None
        self.file_fd = None
        path = os.environ.get("TRAINSTACK_METRICS_FILE")
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
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
        config = {k: v for k, v in vars(a).items() if isinstance(v, (int, float, str, bool, type(None), list, dict))}
        self.wandb_run = wandb.init(project=a.wandb_project, entity=a.wandb_team, group=a.wandb_group, name=name,
                                    id=run_id, resume=resume, dir=a.wandb_dir, mode=mode,  # type: ignore[arg-type]
                                    config=config,
                                    settings=wandb.Settings(console="off", x_disable_stats=True))
        for key in ("train", "rollout", "eval", "perf"):
            self.wandb_run.define_metric(f"{key}/step")
        self.wandb_run.define_metric("train/*", step_metric="train/step")
        for key in ("rollout", "perf"):
            self.wandb_run.define_metric(f"{key}/*", step_metric="rollout/step")
        self.wandb_run.define_metric("eval/*", step_metric="eval/step")

    def log(self, step_key: str, step: int, metrics: dict[str, Any]) -> None:
        metrics = {k: float(v) for k, v in metrics.items()}
        if self.file_fd is not None:
            line = json.dumps({"step_key": step_key, "step": step, "metrics": metrics}, sort_keys=True) + "\n"
            os.write(self.file_fd, line.encode())
        if self.wandb_run is not None:
            self.wandb_run.log({step_key: step, **metrics})
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
