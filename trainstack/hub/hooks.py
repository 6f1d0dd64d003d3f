"""What the run lifecycle does for the Hub, through trainstack.hooks (registered by
`trainstack/hub/feature.py`); each is a no-op when `hub.repo_id` is not set."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from trainstack.hooks import RunContext
    from trainstack.hub.sync import SyncWorker


def _on_hub(plan: Any) -> Optional[int]:
    state = plan.remotes.get("hub")
    return state.latest if state is not None else None


def before_trainer(ctx: "RunContext") -> None:
    """The plan chose the Hub's checkpoint: download and check it now, before anything starts. A
    finished run whose last checkpoint the Hub does not have (it was down at the end): push it now."""
    spec, plan = ctx.spec, ctx.plan
    if plan.action == "finished":
        push_finished(spec, ctx.rundir, ctx.lease, plan)
    elif plan.source == "hub" and "hub" in plan.remotes:
        from trainstack.hub.restore import materialize

        materialize(spec, ctx.rundir, plan.remotes["hub"])


def push_finished(spec: Any, rundir: Any, lease: Any, plan: Any) -> None:
    if not spec.hub.enabled or plan.source == "hub":
        return
    on_hub = _on_hub(plan)
    latest = plan.checkpoint.latest_complete
    if latest is not None and (on_hub is None or on_hub < latest):
        from trainstack.hub.sync import SyncWorker

        SyncWorker(spec, rundir, lease, on_hub=on_hub).start().finish(spec.hub.final_timeout_s)


class HubSync:
    """The sync worker beside the trainer (a thread of this process), as a lifecycle companion."""

    def __init__(self, spec: Any, worker: "SyncWorker"):
        self.spec, self.worker = spec, worker

    def on_signal(self, signum: int, grace_s: float) -> None:
        self.worker.note_signal(grace_s)  # the final push must fit in the grace period

    def after_trainer(self, signalled: Optional[int]) -> None:
        """Before the run reports its end: push the last checkpoint, within the grace period after a signal."""
        if signalled is not None and self.worker.signal_deadline is not None:
            timeout = max(self.worker.signal_deadline - time.monotonic(), 1.0)
        else:
            timeout = self.spec.hub.final_timeout_s
        self.worker.finish(timeout)


def trainer_started(ctx: "RunContext") -> Optional[HubSync]:
    if not ctx.spec.hub.enabled:
        return None
    from trainstack.hub.sync import SyncWorker

    return HubSync(ctx.spec, SyncWorker(ctx.spec, ctx.rundir, ctx.lease, on_hub=_on_hub(ctx.plan)).start())


def dry_run_notes(run: Any) -> list[str]:
    """A Hub-synced run's dry run reads nothing from the Hub unless asked: say what a launch reads."""
    hub = run.hub
    if not hub.enabled or not hub.restore or hub.dry_run_lookup:
        return []
    return [f"hub: a launch first reads {hub.repo_id} for a newer checkpoint of {run.run_id}; this dry run did not "
            "(hub.dry_run_lookup=true makes it read the Hub too)"]
