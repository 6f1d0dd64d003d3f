"""What the run lifecycle (trainstack/lifecycle.py) calls for the Hub: three calls, each a no-op when
`hub.repo_id` is not set."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainstack.hub.sync import SyncWorker
    from trainstack.resume import ResumePlan
    from trainstack.rundir import RunDir
    from trainstack.runspec import RunSpec


def restore(spec: "RunSpec", rundir: "RunDir", plan: "ResumePlan") -> None:
    """The plan chose the Hub's checkpoint: download and check it now, before anything starts."""
    if plan.source == "hub" and plan.hub is not None and plan.action != "finished":
        from trainstack.hub.restore import materialize

        materialize(spec, rundir, plan.hub)


def start_sync(spec: "RunSpec", rundir: "RunDir", lease: Any, plan: "ResumePlan") -> "SyncWorker | None":
    """The sync worker beside the trainer (a thread of this process)."""
    if not spec.hub.enabled:
        return None
    from trainstack.hub.sync import SyncWorker

    on_hub = plan.hub.latest if plan.hub is not None else None
    return SyncWorker(spec, rundir, lease, on_hub=on_hub).start()


def push_finished(spec: "RunSpec", rundir: "RunDir", lease: Any, plan: "ResumePlan") -> None:
    """A finished run whose last checkpoint the Hub does not have (it was down at the end): push it now."""
    if not spec.hub.enabled or plan.source == "hub":
        return
    on_hub = plan.hub.latest if plan.hub is not None else None
    latest = plan.checkpoint.latest_complete
    if latest is not None and (on_hub is None or on_hub < latest):
        from trainstack.hub.sync import SyncWorker

        SyncWorker(spec, rundir, lease, on_hub=on_hub).start().finish(spec.hub.final_timeout_s)


def finish_sync(spec: "RunSpec", worker: "SyncWorker | None", signalled: int | None) -> None:
    """Before the run reports its end: push the last checkpoint, within the grace period after a signal."""
    if worker is None:
        return
    if signalled is not None and worker.signal_deadline is not None:
        timeout = max(worker.signal_deadline - time.monotonic(), 1.0)
    else:
        timeout = spec.hub.final_timeout_s
    worker.finish(timeout)
