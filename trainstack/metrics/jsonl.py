"""metrics.jsonl (``TRAINSTACK_METRICS_FILE``): ``{"step_key", "step", "metrics": {name: value}}`` per line."""
from __future__ import annotations

import json
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
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:  # a line cut by a crash
                continue
            step = rec.get("step")
            for k, v in (rec.get("metrics") or {}).items():
                if isinstance(v, (int, float)) and step is not None:
                    raw.setdefault(k, {})[float(step)] = float(v)
    return finish(raw)
