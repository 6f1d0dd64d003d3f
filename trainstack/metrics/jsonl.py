"""metrics.jsonl (``TRAINSTACK_METRICS_FILE``): ``{"step_key", "step", "metrics": {name: value}}`` per line.

A long run's file is megabytes: the complete lines are parsed in one `json.loads` call (as one
JSON array) rather than one call per line, and `tail` reads only the end of the file for what
needs only the latest steps (status: the last rollout and its reward). The writer (the tiny
trainer) appends steps in order and drops the lines of rollouts it redoes after a resume, so
the latest rollout step is in the tail.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from trainstack.metrics import Series, finish
from trainstack.storage.layout import EVALS, METRICS

TAIL_BYTES = 64 * 1024  # a few dozen lines of a tiny run: its last rollouts, their train and eval steps


def available(run_dir: Path) -> bool:
    return (run_dir / METRICS).is_file()


def parse_lines(lines: list[str]) -> list[Any] | None:
    """Every non-blank line parsed, in one call; None when a line is not one JSON value (the
    caller then goes line by line, to skip or to name the bad one)."""
    kept = [ln for ln in lines if ln.strip()]
    try:
        values = json.loads("[" + ",".join(kept) + "]")
    except (ValueError, RecursionError):
        return None
    return values if len(values) == len(kept) else None  # `1, 2` on one line is two values: not a record


def records(text: str) -> list[Any]:
    """The JSON objects of the complete-or-not lines of a metrics file; unparsable lines (a line
    cut by a crash) skipped."""
    lines = text.split("\n")
    values = parse_lines(lines)
    if values is None:
        values = []
        for line in lines:
            if not line.strip():
                continue
            try:
                values.append(json.loads(line))
            except (ValueError, RecursionError):  # a line cut by a crash
                continue
    return [v for v in values if isinstance(v, dict)]


def add(raw: dict[str, dict[float, float]], rec: dict) -> None:
    """One record's values into {metric: {step: value}} (a step written again: the last write wins)."""
    metrics = rec.get("metrics")
    step = rec.get("step")
    if not isinstance(metrics, dict) or isinstance(step, bool) or not isinstance(step, (int, float)) \
            or not math.isfinite(step):
        return
    for k, v in metrics.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raw.setdefault(str(k), {})[float(step)] = float(v)


def read(run_dir: Path, name: str = METRICS) -> Series:
    path = run_dir / name
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return {}
    raw: dict[str, dict[float, float]] = {}
    for rec in records(text):
        add(raw, rec)
    return finish(raw)


def read_evals(run_dir: Path) -> Series:
    """``evals.jsonl``: what eval-only runs of this run's checkpoints measured (trainstack eval), records shaped
    like metrics.jsonl's (``eval/step`` = the checkpoint's rollout id)."""
    return read(run_dir, EVALS)


def tail(path: Path, size: int = TAIL_BYTES) -> tuple[list[str], bool]:
    """(the complete lines of the last `size` bytes, whether that is the whole file); a line cut at
    the window's start is left out, a last line without its newline kept (a reader skips it if cut)."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            start = max(end - size, 0)
            f.seek(start)
            data = f.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return [], True
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if start > 0:
        lines = lines[1:]  # the window began inside a line
    return lines, start == 0


def tail_series(run_dir: Path, want: str, size: int = TAIL_BYTES) -> Series:
    """The series of the file's last lines, the window doubled until it holds a line with metric
    `want` (or is the whole file)."""
    path = run_dir / METRICS
    while True:
        lines, whole = tail(path, size)
        raw: dict[str, dict[float, float]] = {}
        for rec in records("\n".join(lines)):
            add(raw, rec)
        if want in raw or whole:
            return finish(raw)
        size *= 4
