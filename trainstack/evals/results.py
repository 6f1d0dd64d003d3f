"""An eval run's results, attached to the checkpoint it evaluated.

After an eval run's trainer exits cleanly, its eval metrics (slime's `eval/<set>`,
`eval/<set>/...`, `eval/<set>-truncated_ratio`) are appended to the source run's `evals.jsonl` as
one record shaped like a metrics.jsonl line, at `eval/step` = the checkpoint's rollout id. An eval
with overrides writes its sets as `eval/<set>@<tag>...` (tag: a hash of the overrides), so it never
reads as the run's own eval. One flocked O_APPEND write: the source may be training meanwhile.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from trainstack.evals.plan import EvalOf


def set_names(args: dict[str, Any]) -> list[str]:
    """The eval sets of an argv's --eval-prompt-data (name, path pairs)."""
    data = args.get("eval_prompt_data") or []
    return [str(data[i]) for i in range(0, len(data) - 1, 2)] if isinstance(data, list) else []


def tagged(metrics: dict[str, float], sets: list[str], tag: str) -> dict[str, float]:
    """`eval/<set>...` -> `eval/<set>@<tag>...` (longest set name first, so `math` never eats `math500`)."""
    if not tag:
        return dict(metrics)
    out = {}
    for key, value in metrics.items():
        for name in sorted(sets, key=len, reverse=True):
            head = f"eval/{name}"
            if key == head or key.startswith(head + "/") or key.startswith(head + "-"):
                key = f"{head}@{tag}{key[len(head):]}"
                break
        out[key] = value
    return out


def measured(run_dir: str | Path, iteration: int) -> dict[str, float]:
    """The eval metrics an eval run logged for `iteration` (its last record for that step wins)."""
    from trainstack.metrics.jsonl import records
    from trainstack.storage import layout

    try:
        text = (Path(run_dir) / layout.METRICS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, float] = {}
    for rec in records(text):
        if rec.get("step_key") == "eval/step" and rec.get("step") == iteration and isinstance(rec.get("metrics"), dict):
            out = {k: float(v) for k, v in rec["metrics"].items()
                   if k.startswith("eval/") and isinstance(v, (int, float)) and not isinstance(v, bool)}
    return out


def attach(spec: Any) -> dict[str, Any] | None:
    """Append the eval run's results to its source run's evals.jsonl; the record, or None when there is none."""
    from trainstack.run.rundir import append_line
    from trainstack.storage import layout

    of = EvalOf.of(spec)
    if of is None:
        return None
    metrics = measured(spec.run_dir, of.iteration)
    if not metrics or not Path(of.run_dir).is_dir():
        return None
    record = {"step_key": "eval/step", "step": of.iteration, "metrics": tagged(metrics, set_names(spec.args), of.tag),
              "eval_run": spec.run_id, "tag": of.tag, "overrides": of.overrides,
              "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    append_line(Path(of.run_dir) / layout.EVALS, json.dumps(record, sort_keys=True, default=str))
    return record


def attached(run_dir: str | Path) -> list[dict[str, Any]]:
    """The records of a run's evals.jsonl, oldest first."""
    from trainstack.metrics.jsonl import records
    from trainstack.storage import layout

    try:
        return records((Path(run_dir) / layout.EVALS).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return []
