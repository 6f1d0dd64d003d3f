"""The recorded benchmark results (benchmarks/results/*.json) are each one run's figures: every set of
order statistics of one quantity is ordered (min <= median/p50 <= p95 <= p99 <= max: a p99 above the
max, as commander_latency.json once recorded, is two runs pasted together), and every result says how
it was taken (command, date, load average: benchmarks/benchlib.py)."""
from __future__ import annotations

import json
import re

import pytest

from conftest import ROOT

RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
ORDER = {"min": 0, "p50": 1, "median": 1, "p95": 2, "p99": 3, "max": 4}
STAT = re.compile(r"^(?P<pre>.*?)(?P<stat>min|p50|median|p95|p99|max)(?P<post>_[a-z_]*)?$")


def order_problems(node, path: str = "") -> list[str]:
    """Every group of sibling keys that name order statistics of one quantity (`p50_ms`, `p99_ms`,
    `max_ms`; `wall_min_s`, `wall_median_s`) whose values are out of order."""
    out: list[str] = []
    if isinstance(node, dict):
        groups: dict[tuple[str, str], list[tuple[int, str, float]]] = {}
        for k, v in node.items():
            m = STAT.match(str(k))
            if m and isinstance(v, (int, float)) and not isinstance(v, bool):
                groups.setdefault((m["pre"], m["post"] or ""), []).append((ORDER[m["stat"]], str(k), float(v)))
        for (pre, post), stats in groups.items():
            stats.sort()
            for (ra, ka, va), (rb, kb, vb) in zip(stats, stats[1:]):
                if ra < rb and va > vb:
                    out.append(f"{path or '.'}: {ka} = {va} > {kb} = {vb}")
        for k, v in node.items():
            out += order_problems(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += order_problems(v, f"{path}[{i}]")
    return out


def test_the_checker_catches_a_p99_above_the_max():
    assert order_problems({"list": {"p50_ms": 20.0, "p95_ms": 31.0, "p99_ms": 186.78, "max_ms": 131.7}}) == [
        ".list: p99_ms = 186.78 > max_ms = 131.7"]
    assert order_problems({"a": {"wall_min_s": 1.0, "wall_median_s": 2.0, "cpu_min_s": 3.0, "cpu_median_s": 2.5}}) == [
        ".a: cpu_min_s = 3.0 > cpu_median_s = 2.5"]
    assert order_problems({"x": [{"min": 1, "max": 2}], "p50": 1}) == []


@pytest.mark.parametrize("path", RESULTS, ids=[p.name for p in RESULTS])
def test_a_recorded_result_is_one_consistent_run(path):
    data = json.loads(path.read_text())
    assert order_problems(data) == []
    records = data if isinstance(data, list) else [data]
    for rec in records:
        context = rec.get("context") if isinstance(rec, dict) else None
        if context is None:  # results recorded before benchlib (kept as they were measured)
            continue
        assert context.get("command") and context.get("date") and "load_average_1_5_15" in context, path.name
