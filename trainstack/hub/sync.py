"""The background sync worker: a thread in the launcher process, beside the trainer (never in it).

It watches the run's tracker, selects every `hub.every`-th complete checkpoint (the run's last one
always, at the end), and pushes them one at a time (push.py). The queue is one slot: when uploads
fall behind, the newest selected checkpoint replaces the waiting one (`hub_skip` event). A failed
push is retried with exponential backoff (1 s, 2 s, ... up to `hub.retry_max_s`) for as long as the
run goes on; nothing it does waits on, or is waited on by, the trainer. A process that lost the
run's lease stops pushing (`hub_fenced`). `finish()` pushes the last checkpoint within a deadline:
`hub.final_timeout_s` on a normal end, what is left of `resume.grace_s` after a SIGTERM.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from trainstack.fencing.fence import Fenced
from trainstack.hub import layout
from trainstack.hub.push import PushJob, PushResult, push_checkpoint
from trainstack.run.rundir import now_iso
from trainstack.storage.checkpoints import inspect, is_complete
from trainstack.storage.layout import iter_name

if TYPE_CHECKING:
    from trainstack.fencing.lease import Lease
    from trainstack.hub.client import HubClient
    from trainstack.run.rundir import RunDir
    from trainstack.run.spec import RunSpec


def _say(msg: str) -> None:
    print(f"trainstack: hub: {msg}", file=sys.stderr, flush=True)


class SyncWorker:
    """Pushes one run's selected checkpoints to its Hub repo from a daemon thread."""

    def __init__(self, spec: "RunSpec", rundir: "RunDir", lease: "Lease", on_hub: int | None = None,
                 client_factory: Callable[[], "HubClient"] | None = None, poll_s: float = 0.5):
        self.spec, self.rundir, self.lease = spec, rundir, lease
        self.hub = spec.hub
        self.save_dir = str(spec.args.get("save") or rundir.checkpoints)
        self.poll_s = poll_s
        self.pushed = on_hub  # the iteration the Hub's pointer names
        self.seen = on_hub if on_hub is not None else -1  # newest iteration already counted for selection
        self.count = 0  # complete checkpoints counted since the last selected one
        self.wanted: int | None = None  # the one queue slot
        self.failures = 0
        self.next_try = 0.0
        self.last_error: str | None = None
        self.last: PushResult | None = None
        self.final = False
        self.fenced = False
        self.abandoned = False  # finish() gave up waiting: nothing more may be pushed
        self.signal_deadline: float | None = None
        self._client_factory = client_factory
        self._client: HubClient | None = None
        self._rollouts: dict[str, int] | None = None
        self._wake = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trainstack-hub-sync", daemon=True)
        self._told_storage = False

    # --- lifecycle side ----------------------------------------------------------------------
    def start(self) -> "SyncWorker":
        self._thread.start()
        return self

    def note_signal(self, grace_s: float) -> None:
        """SIGINT/SIGTERM reached the run: the final push must fit in the grace period."""
        if self.signal_deadline is None:
            self.signal_deadline = time.monotonic() + grace_s

    def finish(self, timeout_s: float) -> bool:
        """Push the last complete checkpoint (waiting at most timeout_s); True when the Hub has it."""
        self.final = True
        self._wake.set()
        done = self._done.wait(max(timeout_s, 0.0))
        if not done:
            self.abandoned = True
            self._wake.set()
        latest = inspect(self.save_dir).latest_complete
        on_hub = latest is None or (self.pushed is not None and self.pushed >= latest)
        if not on_hub and not self.fenced:
            self._event("hub_behind", latest_checkpoint=latest, last_pushed=self.pushed,
                              waited_s=round(timeout_s, 1), last_error=self.last_error)
            _say(f"the Hub has {'no checkpoint' if self.pushed is None else iter_name(self.pushed)} of this run, the "
                 f"run dir has {iter_name(latest) if latest is not None else '-'}; relaunch the run (it resumes, "
                 "finds nothing to train or continues, and pushes) once the Hub answers")
        return on_hub

    # --- the thread ------------------------------------------------------------------------
    def _fence(self) -> bool:
        return not self.abandoned and self.lease.holds()

    def _loop(self) -> None:
        try:
            self._client_for()  # the client's import and setup happen while the trainer starts, not on a save
            while True:
                self._scan()
                if self.final:
                    self._select_last()
                if self.fenced or self.abandoned or (self.final and self.wanted is None):
                    return
                if self.wanted is not None and time.monotonic() >= self.next_try:
                    self._attempt(self.wanted)
                    continue  # look at the tracker again before deciding anything else
                wait = self.poll_s if self.wanted is None else min(self.poll_s, max(self.next_try - time.monotonic(),
                                                                                     0.01))
                self._wake.wait(wait)
                self._wake.clear()
        except Exception as ex:  # noqa: BLE001 - the sync must never take the run down
            from trainstack.hub.client import describe_error

            self._event("hub_sync_crashed", error=describe_error(ex))
            _say(f"the sync worker stopped: {describe_error(ex)}")
        finally:
            self._done.set()

    def _complete_between(self, low: int, high: int) -> list[int]:
        import os

        out: list[int] = []
        try:
            names = os.listdir(self.save_dir)
        except OSError:
            return out
        for name in names:
            m = layout.ITER_RE.match(name)
            if m and low < int(m.group(1)) <= high and is_complete(self.save_dir, int(m.group(1))):
                out.append(int(m.group(1)))
        return sorted(out)

    def _scan(self) -> None:
        """Count the complete checkpoints written since the last look; select every `every`-th."""
        latest = inspect(self.save_dir).latest_complete
        if latest is None or latest <= self.seen:
            return
        for i in self._complete_between(self.seen, latest):
            self.count += 1
            if self.count >= self.hub.every:
                self.count = 0
                self._want(i)
        self.seen = latest

    def _select_last(self) -> None:
        latest = inspect(self.save_dir).latest_complete
        if latest is not None and latest > (self.pushed if self.pushed is not None else -1):
            if self.wanted is None or self.wanted < latest:
                self._want(latest)

    def _want(self, i: int) -> None:
        if self.pushed is not None and i <= self.pushed:
            return
        if self.wanted is not None and self.wanted < i:
            self._event("hub_skip", iteration=self.wanted, reason=f"superseded by {iter_name(i)} before it "
                              "was pushed (the newest checkpoint wins)")
        self.wanted = i

    def _client_for(self) -> "HubClient":
        if self._client is None:
            if self._client_factory is not None:
                self._client = self._client_factory()
            else:
                from trainstack.hub.client import HubClient

                assert self.hub.repo_id is not None
                self._client = HubClient(self.hub.repo_id, private=self.hub.private)
        return self._client

    def _attempt(self, i: int) -> None:
        from trainstack.hub.client import describe_error

        if not self._fence():
            return self._fenced(i)
        t0 = time.monotonic()
        try:
            client = self._client_for()
            if self.hub.push_rollouts and self._rollouts is None:
                base = layout.in_run(self.spec.run_id, layout.ROLLOUT_DATA) + "/"
                self._rollouts = {e.path[len(base):]: e.size or 0
                                  for e in client.ls(base.rstrip("/"), recursive=True) if e.size is not None}
            res = push_checkpoint(client, self._job(i), self._fence, self._rollouts)
        except Fenced:
            return self._fenced(i)
        except Exception as ex:  # noqa: BLE001 - every failure is retried
            self.failures += 1
            delay = min(self.hub.retry_max_s, 2.0 ** (self.failures - 1))
            self.next_try = time.monotonic() + delay
            from trainstack.hub.client import credentials_hint

            self.last_error = describe_error(ex)
            hint = credentials_hint(ex, str(self.hub.repo_id))
            self._event("hub_push_failed", iteration=i, attempt=self.failures, error=self.last_error,
                              retry_in_s=delay, seconds=round(time.monotonic() - t0, 3), hint=hint)
            self._status(pending=i)
            if self.failures in (1, 5) or self.failures % 20 == 0:
                _say(f"pushing {iter_name(i)} failed ({self.last_error}); retrying in {delay:.0f} s, training "
                     "continues" + (f". {hint}" if hint else ""))
            return
        self.failures, self.next_try, self.last_error = 0, 0.0, None
        if self.wanted == i:
            self.wanted = None
        if res.skipped:
            self._event("hub_skip", iteration=i, reason=res.skipped)
            self.pushed = max(self.pushed if self.pushed is not None else -1, i)
            return
        self.pushed, self.last = i, res
        self._event("hub_push", repo_id=self.hub.repo_id, iteration=i, commit=res.commit,
                          files_commit=res.files_commit, files=res.files, bytes=res.bytes, hf_commit=res.hf_commit,
                          hf_missing=res.hf_missing or None, rollouts=len(res.rollouts), deleted=res.deleted,
                          seconds=round(res.seconds, 3), transfer=getattr(self._client, "transfer", None))
        self._status(pending=self.wanted, pushed=res)
        _say(f"pushed {iter_name(i)} to {self.hub.repo_id} (commit {res.commit[:12] if res.commit else '-'}, "
             f"{res.files} files, {res.bytes / 1e6:.1f} MB, {res.seconds:.1f} s)")

    def _fenced(self, i: int) -> None:
        self.fenced = True
        if not self.abandoned:
            self._event("hub_fenced", iteration=i, reason="this process no longer holds the run's lease; "
                              "a newer writer pushes its checkpoints")

    def _job(self, i: int) -> PushJob:
        import socket

        from trainstack.run.binding import training_relevant

        spec_json = json.dumps(self.spec.to_json(), indent=1, sort_keys=True, default=str).encode()
        return PushJob(run_id=self.spec.run_id, iteration=i, save_dir=self.save_dir,
                       lease_epoch=self.lease.record.epoch,
                       args=training_relevant(self.spec.args), inputs=self.spec.inputs, spec_json=spec_json,
                       hf_template=self.spec.args.get("save_hf"),
                       rollout_template=self.spec.args.get("save_debug_rollout_data") if self.hub.push_rollouts
                       else None, keep=self.hub.keep, host=socket.gethostname())

    def _event(self, event: str, **fields: Any) -> None:
        """An event from the sync, which a full or read-only run dir must not stop (nor crash the thread)."""
        try:
            self.rundir.event(event, **fields)
        except OSError as ex:
            self._unrecorded(ex, event)

    def _unrecorded(self, ex: OSError, what: str) -> None:
        from trainstack.storage import faults as storage

        if not storage.is_storage_error(ex):
            raise ex
        if not self._told_storage:
            self._told_storage = True
            problem, fix = storage.message(ex, str(self.rundir.path))
            _say(f"could not record {what} in the run dir ({problem}); the sync goes on. fix: {fix}")

    def _status(self, pending: int | None, pushed: PushResult | None = None) -> None:
        """status.json `hub`: what the Hub has of this run and what is waiting (merged, so a previous launch's
        last push stays visible until this one pushes)."""
        hub = dict(self.rundir.status().get("hub") or {})
        hub.update(repo_id=self.hub.repo_id, pending=pending, failures=self.failures, last_error=self.last_error)
        if pushed is not None:
            hub.update(last_pushed=pushed.iteration, commit=pushed.commit, files_commit=pushed.files_commit,
                       pushed_at=now_iso())
        try:
            self.rundir.update_status(hub=hub)
        except OSError as ex:
            self._unrecorded(ex, "the Hub state")
