"""The Hub feature (docs/hub.md) joins the core here: resume from the Hub's newer checkpoint,
restore and sync around the trainer, `trainstack hub ls/pull`. Nothing heavy is imported until a
hook runs (huggingface_hub only when a run has hub.repo_id)."""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional

from trainstack import hooks

# what the commander hands its pods (trainstack.secrets.FORWARDED_SECRETS): a token file on the
# commander's machine never reaches a pod
POD_TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


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


def register_check(spec: Mapping[str, Any]) -> Optional[str]:
    """A commander with no Hub token refuses Hub-synced runs at registration: its pods get their token
    from its environment, so every push would fail 401 while the pod bills, and the run would end
    `finished` with nothing on the Hub."""
    repo_id = (spec.get("hub") or {}).get("repo_id")
    if not repo_id or any(os.environ.get(v) for v in POD_TOKEN_VARS):
        return None
    return (f"run {spec.get('run_id', '?')} syncs its checkpoints to the Hub (hub.repo_id={repo_id}), but this "
            "commander has no HF_TOKEN to give its pods: every push would be refused (401). Restart the commander "
            "with HF_TOKEN exported (`trainstack commander serve` hands its own HF_TOKEN to the pods), or launch "
            "with hub.repo_id=null")


def _cli(sub: Any) -> None:
    from trainstack.hub.cli import add_hub

    add_hub(sub)  # hub ls / pull


def register(registry: hooks.Registry) -> None:
    registry.add(hooks.RESUME_LOOKUP, _lookup)
    registry.add(hooks.BEFORE_TRAINER, _before_trainer)
    registry.add(hooks.TRAINER_STARTED, _trainer_started)
    registry.add(hooks.DRY_RUN_NOTES, _dry_run_notes)
    registry.add(hooks.CLI, _cli)
    registry.add(hooks.REGISTER_CHECK, register_check)
