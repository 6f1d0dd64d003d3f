"""Metric sources behind one interface: a run's logged scalars as ``{name: [(step, value), ...]}``.

One module per source, each imported only when used (tensorboard, wandb are heavy):

| source          | module            | reads                                                             |
| --------------- | ----------------- | ----------------------------------------------------------------- |
| ``tensorboard`` | ``tensorboard``   | ``<run_dir>/tensorboard/**/events.out.tfevents.*`` (no server)     |
| ``wandb-offline`` | ``wandb_offline`` | ``<run_dir>/wandb/**/run-*.wandb`` (the offline transaction log) |
| ``jsonl``       | ``jsonl``         | ``<run_dir>/metrics.jsonl``                                        |
| ``wandb``       | ``wandb_api``     | the W&B public API (``wandb.Api()``), runs matched by id / group   |

``auto`` tries tensorboard, then wandb-offline, then jsonl, and uses the first that has data.
Steps are the value of the metric's own step key (``rollout/step`` for ``rollout/*`` and
``perf/*``, ``train/step`` for ``train/*``, ``eval/step`` for ``eval/*``), as slime logs them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Series = dict[str, list[tuple[float, float]]]  # metric -> [(step, value)] sorted by step

LOCAL_SOURCES = ("tensorboard", "wandb-offline", "jsonl")
SOURCES = ("auto", *LOCAL_SOURCES, "wandb")
STEP_KEYS = ("rollout/step", "train/step", "eval/step")


def step_key_for(metric: str) -> str:
    """The x axis slime logs a metric against."""
    head = metric.split("/", 1)[0]
    return {"train": "train/step", "eval": "eval/step"}.get(head, "rollout/step")


@dataclass
class RunMetrics:
    series: Series = field(default_factory=dict)
    source: str = ""  # which source the data came from

    def names(self) -> list[str]:
        return sorted(self.series)


def finish(raw: dict[str, dict[float, float]]) -> Series:
    """{metric: {step: value}} (last write per step wins) -> sorted series; step keys dropped."""
    return {k: sorted(v.items()) for k, v in raw.items() if k not in STEP_KEYS and not k.startswith("_") and v}


def wandb_run_id(run_dir: Path | None, run_id: str) -> str:
    """The W&B run id trainstack gave a run: WANDB_RUN_ID from command.json, else derived from run_id."""
    if run_dir is not None:
        try:
            from trainstack.storage import layout

            env = json.loads((Path(run_dir) / layout.COMMAND).read_text()).get("env") or {}
            if env.get("WANDB_RUN_ID"):
                return str(env["WANDB_RUN_ID"])
        except (OSError, ValueError):
            pass
    return derive_wandb_id(run_id)


def derive_wandb_id(run_id: str) -> str:
    """The id trainstack's launcher gives W&B (one definition: trainstack.config.run_ids.wandb_run_id)."""
    from trainstack.config.run_ids import wandb_run_id as derive

    return derive(run_id)


def with_evals(series: Series, evals: Series) -> Series:
    """The run's own metrics plus what eval-only runs of its checkpoints measured (evals.jsonl); at a step
    both hold, the run's own value stays."""
    out = dict(series)
    for name, pts in evals.items():
        own = dict(out.get(name, []))
        out[name] = sorted({**dict(pts), **own}.items())
    return out


def read_local(run_dir: str | Path, source: str = "auto", read_jsonl: Any = None) -> RunMetrics:
    """A run directory's metrics from one local source (or the first that has data), with its checkpoints'
    eval-only results (evals.jsonl, `trainstack eval`); `read_jsonl`: metrics.jsonl's reader when the caller
    checks the file as it reads it (compare)."""
    from trainstack.metrics.jsonl import read_evals

    run_dir = Path(run_dir)
    found = _read_local(run_dir, source, read_jsonl)
    evals = read_evals(run_dir)
    if evals:
        found.series = with_evals(found.series, evals)
    return found


def _read_local(run_dir: Path, source: str, read_jsonl: Any = None) -> RunMetrics:
    order = LOCAL_SOURCES if source == "auto" else (source,)
    for name in order:
        if name == "tensorboard":
            from trainstack.metrics import tensorboard as mod
        elif name == "wandb-offline":
            from trainstack.metrics import wandb_offline as mod  # type: ignore[no-redef]
        elif name == "jsonl":
            from trainstack.metrics import jsonl as mod  # type: ignore[no-redef]
        else:
            raise ValueError(f"not a local metric source: {name}")
        if source == "auto" and not mod.available(run_dir):
            continue
        series = read_jsonl(run_dir) if name == "jsonl" and read_jsonl is not None else mod.read(run_dir)
        if series or source != "auto":
            return RunMetrics(series=series, source=name)
    return RunMetrics(series={}, source="none")
