"""metrics.jsonl (``TRAINSTACK_METRICS_FILE``): ``{"step_key", "step", "metrics": {name: value}}`` per line."""
from __future__ import annotations

import json
import math
from pathlib import Path

from trainstack.metrics import Series, finish
from trainstack.rundir.layout import METRICS


def available(run_dir: Path) -> bool:
    return (run_dir / METRICS).is_file()


def read(run_dir: Path) -> Series:
    raw: dict[str, dict[float, float]] = {}
    path = run_dir / METRICS
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):  # a line cut by a crash
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("metrics"), dict):
                continue
            step = rec.get("step")
            if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step):
                continue
            for k, v in rec["metrics"].items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    raw.setdefault(str(k), {})[float(step)] = float(v)  # a step written again: the last write wins
    return finish(raw)
