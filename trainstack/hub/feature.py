"""The Hub feature (docs/hub.md) joins the core here: resume from the Hub's newer checkpoint,
restore and sync around the trainer, `trainstack hub ls/pull`. Nothing heavy is imported until a
hook runs (huggingface_hub only when a run has hub.repo_id)."""
from __future__ import annotations

from typing import Any, Optional

from trainstack import hooks


def _lookup(run: Any, local_latest: Optional[int], dry: bool) -> Any:
    hub = getattr(run, "hub", None)
    if hub is None or not hub.enabled:
        return None
    from trainstack.hub.restore import lookup

    return lookup(run, local_latest, dry)


def _before_trainer(ctx: hooks.RunContext) -> None:
    if ctx.spec.hub.enabled:
        from trainstack.hub.hooks import before_trainer

        before_trainer(ctx)


def _trainer_started(ctx: hooks.RunContext) -> Optional[hooks.Companion]:
    if not ctx.spec.hub.enabled:
        return None
    from trainstack.hub.hooks import trainer_started

    return trainer_started(ctx)


def _dry_run_notes(run: Any) -> list[str]:
    if not run.hub.enabled:
        return []
    from trainstack.hub.hooks import dry_run_notes

    return dry_run_notes(run)


def _cli(sub: Any) -> None:
    from trainstack.hub.cli import add_hub

    add_hub(sub)  # hub ls / pull


def register(registry: hooks.Registry) -> None:
    registry.add(hooks.RESUME_LOOKUP, _lookup)
    registry.add(hooks.BEFORE_TRAINER, _before_trainer)
    registry.add(hooks.TRAINER_STARTED, _trainer_started)
    registry.add(hooks.DRY_RUN_NOTES, _dry_run_notes)
    registry.add(hooks.CLI, _cli)
