"""A run's metrics summed up in one small file (metrics_digest.json): each metric's final value, its
highest and lowest (with their steps) and its last step, per local source, with the size, modification
time and inode of every file it was read from.

`trainstack compare` shows final and best values and the rollouts trained, never a whole series (but
for --plot); over a thousand runs, reading every run's TensorBoard event files was most of its time (3.4
of 4.5 s). The run's writer makes the digest when the run is not running (run/rundir/summary.refresh: its
metrics no longer move), and compare uses it only while every file it was read from is unchanged (a
resumed run, a later `trainstack eval`, a hand edit: it reads the files again). Values are those
`compare.summarise` computes from the series (NaN left out; the first best on ties), so a table from
the digest equals the table from the files (tests/test_metrics_digest.py)."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from trainstack.storage import layout
from trainstack.storage.files import atomic_write

FILE = layout.METRICS_DIGEST
VERSION = 1
Series = dict[str, list[tuple[float, float]]]


def source_files(run_dir: Path) -> list[Path]:
    """Every file a local metric source (or the eval-only results) is read from."""
    from trainstack.metrics import tensorboard, wandb_offline

    return [*tensorboard.event_files(run_dir), *wandb_offline.wandb_files(run_dir), run_dir / layout.METRICS,
            run_dir / layout.EVALS]


def stamps(run_dir: Path) -> dict[str, list[int] | None]:
    out: dict[str, list[int] | None] = {}
    for p in source_files(run_dir):
        try:
            st = p.stat()
            out[os.path.relpath(p, run_dir)] = [st.st_mtime_ns, st.st_size, st.st_ino]
        except OSError:
            out[os.path.relpath(p, run_dir)] = None
    return out


def of_series(series: Series) -> dict[str, dict[str, Any]]:
    """{metric: {"final": [step, value], "max": [...], "min": [...], "last_step": step}} (NaN values left out of
    final/max/min, as summarise leaves them out; last_step over every point, as rollouts_of counts them)."""
    out: dict[str, dict[str, Any]] = {}
    for name, points in series.items():
        pts: list[tuple[float, float]] = [(s, v) for s, v in points if not math.isnan(v)]
        entry: dict[str, Any] = {"last_step": max((s for s, _ in points), default=None)}
        if pts:
            high, low = max(pts, key=_value), min(pts, key=_value)
            entry.update(final=[pts[-1][0], pts[-1][1]], max=[high[0], high[1]], min=[low[0], low[1]])
        out[name] = entry
    return out


def _value(point: tuple[float, float]) -> float:
    return point[1]


def write(run_dir: str | Path) -> None:
    """Read the run's local metrics (the first source that has data, as `compare --source auto` reads them)
    and write the digest. Never fails the writer: a corrupt or missing file leaves compare to read the files."""
    from trainstack.errors import ConfigErrors
    from trainstack.metrics import read_local

    run_dir = Path(run_dir)
    if load(run_dir) is not None:  # current: a refresh after the run ended (a Hub push, an eval) decodes nothing
        return
    try:
        before = stamps(run_dir)
        found = read_local(run_dir, "auto")
        if stamps(run_dir) != before:  # written meanwhile: the next writer makes it
            return
        data = {"version": VERSION, "source": found.source, "made_from": before, "metrics": of_series(found.series)}
        atomic_write(run_dir / FILE, json.dumps(data, sort_keys=True, allow_nan=False) + "\n")
    except (ConfigErrors, OSError, ValueError, TypeError):
        return


def load(run_dir: str | Path) -> tuple[str, dict[str, dict[str, Any]]] | None:
    """(source, metrics) of the run's digest while every file it was read from is unchanged, else None."""
    run_dir = Path(run_dir)
    try:
        data = json.loads((run_dir / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("metrics"), dict) \
            or not isinstance(data.get("source"), str) or data.get("made_from") != stamps(run_dir):
        return None
    return data["source"], data["metrics"]


def summary(entry: dict[str, Any], lower_is_better: bool) -> dict[str, Any]:
    """compare.summarise's answer from a digest entry."""
    if "final" not in entry:
        return {"final": None, "final_step": None, "best": None, "best_step": None}
    best = entry["min" if lower_is_better else "max"]
    return {"final": entry["final"][1], "final_step": _int(entry["final"][0]), "best": best[1],
            "best_step": _int(best[0])}


def _int(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x
