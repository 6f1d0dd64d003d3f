"""The inputs feature (docs/inputs.md) joins the core here: pinned sources in the run id, the input
plan in the dry run, paths a launch will create trusted by the preflight, the prepare step before
the trainer (every launcher: it runs in the lifecycle, on the executing host), `trainstack prepare`.
Nothing heavy is imported until a hook runs (huggingface_hub only when something is downloaded)."""
from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping

from trainstack import hooks

RECORD = "inputs.json"  # in the run dir: what the run was prepared from (commit shas, cache entries)


def _identity(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    from trainstack.inputs.sources import read

    config = {g: {"meta": meta.get(g) or {}} for g in ("model", "env")}
    sources, _ = read(config, {"hf_checkpoint": "-"})  # only the sources' names and revisions count here
    pins = sources.identity()
    return {"inputs": pins} if pins else {}


def _rules(ctx: Any) -> list:
    """Malformed sources are bad input (exit 2, before anything is written)."""
    from trainstack.inputs.sources import read

    return read(ctx.run.config, ctx.run.args)[1]


def _prepared_paths(config: Mapping[str, Any], args: Mapping[str, Any]) -> Iterable[str]:
    from trainstack.inputs.sources import read

    sources, errors = read(config, args)
    return [] if errors else sources.paths()


def _dry_run_notes(run: Any) -> list[str]:
    from trainstack.inputs.prepare import for_run, plan

    sources, conv = for_run(run.config, run.args, run.cluster, "")
    items = plan(sources, conv)
    if not items:
        return []
    lines = ["inputs (prepared on the host that runs the trainer, before it starts; cached content-addressed "
             "under paths.models_root / paths.data_root; this plan reads this machine's cache only, no network):"]
    for item in items:
        lines.append("  " + item.line())
        if item.command and item.state == "convert":
            lines.append("    conversion: " + " ".join(item.command))
    return lines


def _recorded(run_dir: str) -> dict[str, str]:
    try:
        with open(os.path.join(run_dir, RECORD), encoding="utf-8") as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return {}
    return {i["source"].split("@")[0]: i["sha"] for i in rec.get("items", []) if i.get("sha")}


def prepare_spec(spec: Any, rundir: Any) -> None:
    """Before the trainer, lease held: make the run's inputs present; a resume reuses the commits its
    first launch resolved (recorded in the run dir)."""
    from trainstack.inputs.prepare import for_run, prepare

    slime_commit = getattr(spec.provenance, "slime_commit", "") or ""
    sources, conv = for_run(spec.config, spec.args, spec.cluster, slime_commit)
    if not sources.model and not sources.datasets:
        return
    result = prepare(sources, conv, recorded=_recorded(spec.run_dir))
    record = result.record()
    path = os.path.join(spec.run_dir, RECORD)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    rundir.event("inputs_prepared", seconds=record["seconds"],
                 items=[{k: i[k] for k in ("kind", "source", "sha", "state")} for i in record["items"]])


def _cli(sub: Any) -> None:
    from trainstack.inputs.cli import add_prepare

    add_prepare(sub)


def register(registry: hooks.Registry) -> None:
    registry.add(hooks.IDENTITY, _identity)
    registry.add(hooks.RULES, _rules)
    registry.add(hooks.DRY_RUN_NOTES, _dry_run_notes)
    registry.add(hooks.PREPARED_PATHS, _prepared_paths)
    registry.add(hooks.PREPARE_INPUTS, prepare_spec)
    registry.add(hooks.CLI, _cli)
