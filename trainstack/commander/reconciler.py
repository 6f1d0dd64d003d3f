"""The reconciler: makes every run's pods match what the run should be doing.

Each tick, per run:
- should run, no live lease holder: bump the epoch (committed first), rent a pod named for
  (run, epoch) with an idempotency key for (run, epoch) (a retried or restarted rent makes no second
  pod), wait until ready, upload the run's spec, start the worker detached; its secrets travel in
  the exec environment;
- lease expired, pod gone or failed, or the worker never took its lease: remove the pod (billing)
  and provision again after a backoff, up to the run's restart limit;
- finished / failed / cancelled / paused: its pods are removed; cancel and pause first let the
  worker checkpoint and release (the worker learns it from its next renewal); an ended run's volume
  (one the commander made) is deleted `volume_retention_s` after it ended, at once when purged;
- a new pod whose image cannot run trainstack fails the run once (no retries, pod removed);
- spend limit of the run or its sweep reached: the run is paused (and so its pods removed);
- any pod named for one of our runs that is not that run's current pod is removed (a rent whose
  answer was lost, a commander killed between renting and recording).

Provisioning runs in a thread per run so a slow pod never holds the others; the state it goes
through is in the database, so a restarted commander picks up where the old one was (the rent
is retried with the same idempotency key).
"""
from __future__ import annotations

import json
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from trainstack.commander.provider import LiumProvider, NoNode, PodRequest, idempotency_key, pod_name
from trainstack.commander.store import CommanderRun, Store
from trainstack.fencing.fence import ENV_COMMANDER_EPOCH
from trainstack.secrets import FORWARDED_SECRETS

# Not secrets, but where the secrets are good: a Hub mirror or private endpoint, a self-hosted wandb.
# A pod's SSH session starts with a clean environment, so the commander passes them on with the secrets.
FORWARDED_ENDPOINTS = ("HF_ENDPOINT", "WANDB_BASE_URL")
DEAD_STATES = ("FAILED", "STOPPED", "CREATION_FAILED", "TERMINATED", "ERROR")
# A pod is judged lost from the listings only when this many listings in a row agree (and, for a
# pod whose worker holds the lease, only once that lease has lapsed: a renewing worker is alive).
LOST_AFTER_LISTINGS = 2


@dataclass
class CommanderConfig:
    """Timing and identity of one commander (`trainstack commander serve` flags)."""

    public_url: str  # what pods use to reach the commander
    lease_ttl_s: float = 30.0  # a lease not renewed for this long is dead
    heartbeat_s: float = 5.0  # workers renew this often (a few heartbeats per TTL)
    worker_deadline_s: float = 20.0  # a worker that cannot renew for this long stops its trainer (< TTL)
    tick_s: float = 1.0
    probe_s: float = 15.0  # how often the pod list is read from Lium (its API is rate limited)
    start_timeout_s: float = 300.0  # from worker start to its first lease
    stop_timeout_s: float = 120.0  # cancel/pause: time for the final checkpoint before the pod is removed
    backoff_s: float = 10.0  # first delay before re-provisioning; doubles per restart
    backoff_max_s: float = 300.0
    volume_retention_s: float = 7 * 86400.0  # an ended run's volume (one the commander made) is deleted after this
    exit_when_idle_s: float | None = None  # a commander a launch started: exit once no run is active this long
    worker_argv: list[str] = field(default_factory=list)  # default: [<pod python>, -m, trainstack.launch.lium_worker]

    def __post_init__(self) -> None:
        if not 0 < self.worker_deadline_s < self.lease_ttl_s:
            raise ValueError(f"worker deadline ({self.worker_deadline_s} s) must be > 0 and below the lease TTL "
                             f"({self.lease_ttl_s} s)")
        if not 0 < self.heartbeat_s < self.worker_deadline_s:
            raise ValueError(f"heartbeat ({self.heartbeat_s} s) must be > 0 and below the worker deadline")


def progressed(run: CommanderRun) -> bool:
    """A checkpoint newer than the one the run had at its last restart."""
    return run.last_checkpoint is not None and (run.strike_checkpoint is None
                                                or run.last_checkpoint > run.strike_checkpoint)


def worker_log_path(req: PodRequest, run_id: str, epoch: int) -> str:
    return f"{req.workdir.rstrip('/')}/{run_id}/worker-e{epoch}.log"


class Reconciler:
    def __init__(self, store: Store, config: CommanderConfig, worker_token, provider: Any = None):
        self.store = store
        self.config = config
        self.worker_token = worker_token  # run_id -> the token the run's worker authenticates with
        self.provider = provider or LiumProvider()
        self._busy: dict[str, threading.Thread] = {}
        self._busy_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pods: dict[str, Any] | None = None  # last pod listing
        self._pods_at = 0.0
        self._unlisted: dict[str, int] = {}  # pod id -> listings in a row that showed it gone or dead
        self.started = time.time()

    # ------------------------------------------------------------------ loop
    def start(self) -> None:
        self._grace_after_restart()
        self._thread = threading.Thread(target=self._loop, name="trainstack-reconciler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def _grace_after_restart(self) -> None:
        """After a (re)start, give every live-looking lease one full TTL to be renewed: the workers
        could not reach us while we were down, which says nothing about their pods."""
        now = time.time()
        with self.store.tx() as db:
            db.execute("UPDATE runs SET lease_expires=? WHERE lease_holder IS NOT NULL AND phase IN "
                       "('running','stopping') AND (lease_expires IS NULL OR lease_expires < ?)",
                       (now + self.config.lease_ttl_s, now + self.config.lease_ttl_s))

    def _loop(self) -> None:
        while not self._stop.wait(self.config.tick_s):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the loop must outlive any one bad tick
                traceback.print_exc()

    def tick(self) -> None:
        pods = self._listing()
        for run in self.store.runs(with_pods=True):
            try:
                self._reconcile(run, pods)
            except Exception as ex:  # noqa: BLE001
                self._event(run, "reconcile_error", error=f"{type(ex).__name__}: {ex}")
        pods = self._listing()  # fresh if this tick removed or rented a pod
        if pods is not None:
            self._remove_orphans(pods)

    def _listing(self) -> dict[str, Any] | None:
        if time.monotonic() - self._pods_at < self.config.probe_s and self._pods is not None:
            return self._pods
        try:
            self._pods = self.provider.list_pods()
            self._pods_at = time.monotonic()
            self._count_unlisted(self._pods)
        except Exception as ex:  # noqa: BLE001 - Lium unreachable: decide nothing from a missing listing
            print(f"trainstack commander: listing pods failed: {ex}", flush=True)
            self._pods = None
        return self._pods

    def _count_unlisted(self, pods: dict[str, Any]) -> None:
        """Per open pod of ours, how many listings in a row showed it gone or dead: one listing that
        omits a pod (an API glitch, a replica behind) proves nothing."""
        seen = {}
        for p in self.store.open_pods():
            ref = pods.get(p["pod_id"])
            if ref is None or ref.status in DEAD_STATES:
                seen[p["pod_id"]] = self._unlisted.get(p["pod_id"], 0) + 1
        self._unlisted = seen

    def pod_verdict(self, pod_id: str) -> str | None:
        """The pod's state when the provider agreed on it across `LOST_AFTER_LISTINGS` listings, else None."""
        if self._pods is None or self._unlisted.get(pod_id, 0) < LOST_AFTER_LISTINGS:
            return None
        ref = self._pods.get(pod_id)
        return "GONE" if ref is None else ref.status

    def refresh(self) -> None:
        """Read the pod list at the next tick (after a change we made)."""
        self._pods_at = 0.0

    # ------------------------------------------------------------------ one run
    def _event(self, run: CommanderRun, event: str, **data: Any) -> None:
        with self.store.tx() as db:
            Store.event(db, run.run_id, event, run.epoch, **data)

    def _set(self, run: CommanderRun, event: str | None = None, data: dict | None = None, **fields: Any) -> bool:
        """Fenced on the epoch we read: a concurrent worker write or provisioning wins."""
        with self.store.tx() as db:
            ok = Store.update(db, run.run_id, epoch=run.epoch, **fields)
            if ok and event:
                Store.event(db, run.run_id, event, run.epoch, **(data or {}))
            return ok

    def _reconcile(self, run: CommanderRun, pods: dict[str, Any] | None) -> None:
        now = time.time()
        if run.phase in ("finished", "failed", "cancelled", "paused"):
            self._remove_run_pods(run)
            if run.phase != "paused":  # a paused run resumes from its volume: kept whatever its age
                self._retire_volume(run, now)
            return
        if run.desired == "running":
            reason = self._over_budget(run)
            if reason:
                with self.store.tx() as db:
                    Store.update(db, run.run_id, desired="paused", message=reason)
                    Store.event(db, run.run_id, "spend_limit", run.epoch, reason=reason, cost_usd=run.cost_usd)
                return
        if run.desired in ("cancelled", "paused"):
            self._wind_down(run, now)
            return
        pod_state = None if pods is None or not run.pod_id else self.pod_verdict(run.pod_id)
        if (run.phase == "starting" or (run.phase == "running" and not run.lease_live(now))) and \
                pod_state is not None and (pod_state == "GONE" or pod_state in DEAD_STATES):
            self._set(run, "pod_lost", {"pod_id": run.pod_id, "pod_status": pod_state}, phase="lost",
                      lease_holder=None, lease_expires=None, message=f"pod {run.pod_id} {pod_state.lower()}")
        elif run.phase == "running" and not run.lease_live(now):
            self._set(run, "lease_expired", {"holder": run.lease_holder}, phase="lost", lease_holder=None,
                      lease_expires=None, message="lease expired (worker or pod unresponsive)")
        elif run.phase == "starting" and run.deadline is not None and now > run.deadline:
            self._set(run, "start_timeout", {"pod_id": run.pod_id}, phase="lost",
                      message=f"worker did not take its lease within {self.config.start_timeout_s:.0f} s")
        elif run.phase not in ("lost", "pending", "provisioning"):
            return  # a live run, nothing to do: the listing's record is all this tick needs (no re-read)
        run = self.store.run(run.run_id) or run
        if run.phase == "lost":
            self._remove_run_pods(run)
            strikes = run.strikes
            if strikes and progressed(run):  # it trained since the last restart: a preemption, not a failure
                self._event(run, "restart_budget_reset", strikes=strikes, last_checkpoint=run.last_checkpoint,
                            checkpoint_at_last_restart=run.strike_checkpoint)
                strikes = 0
            if strikes >= run.restart_limit:
                self._set(run, "failed", {"reason": "restart limit"}, phase="failed", strikes=strikes,
                          message=f"gave up after {strikes} restarts without progress (restart_limit="
                                  f"{run.restart_limit}); last: {run.message}")
                return
            delay = min(self.config.backoff_s * (2 ** strikes), self.config.backoff_max_s)
            self._set(run, "backoff", {"delay_s": delay}, phase="pending", restarts=run.restarts + 1,
                      strikes=strikes + 1, strike_checkpoint=run.last_checkpoint, next_attempt=now + delay, pod_id=None)
            return
        if run.phase == "pending" and now >= run.next_attempt:
            with self.store.tx() as db:  # the new epoch is committed before anything is rented
                bumped = db.execute("UPDATE runs SET epoch=epoch+1, phase='provisioning', lease_holder=NULL, "
                                    "lease_expires=NULL, pod_id=NULL, updated=? WHERE run_id=? AND epoch=? AND "
                                    "phase='pending'", (now, run.run_id, run.epoch)).rowcount
                if bumped:
                    Store.event(db, run.run_id, "provisioning", run.epoch + 1)
            run = self.store.run(run.run_id) or run
        if run.phase == "provisioning":
            self._provision_async(run)

    def _wait_for_capacity(self, run: CommanderRun, why: str) -> None:
        """No node matches now: back to `pending` (status shows why and since when), retried with backoff
        doubling up to backoff_max_s, for `capacity_wait_s` from the first miss; then the run fails."""
        now = time.time()
        since = run.capacity_since or now
        waited = now - since
        if waited >= run.capacity_wait_s:
            self._set(run, "failed", {"reason": "no capacity", "waited_s": round(waited)}, phase="failed",
                      capacity_since=None, message=f"no node free for {waited:.0f} s (capacity_wait_s="
                                                   f"{run.capacity_wait_s:.0f}): {why}")
            return
        tries = sum(1 for e in self.store.events(run.run_id) if e["event"] == "no_capacity"
                    and e["time"] >= since - 1)
        delay = min(self.config.backoff_s * (2 ** min(tries, 16)), self.config.backoff_max_s,
                    max(0.0, run.capacity_wait_s - waited))
        self._set(run, "no_capacity", {"error": why, "retry_in_s": round(delay, 1), "waited_s": round(waited)},
                  phase="pending", capacity_since=since, next_attempt=now + delay,
                  message=f"waiting for capacity since {time.strftime('%H:%M:%S', time.gmtime(since))} UTC "
                          f"(up to {run.capacity_wait_s:.0f} s): {why}")

    def _checkpoint_missing(self, run: CommanderRun, pod_id: str, run_dir: str) -> str | None:
        """Why the new pod must not train, when the run had checkpoint N but the pod's run dir holds no
        checkpoint as new (a lost or wiped volume, `volume=null`) and no Hub copy can restore it."""
        if run.last_checkpoint is None or ((run.spec.get("hub") or {}).get("repo_id")):
            return None
        from trainstack.storage import layout

        raw = self.provider.read(pod_id, f"{run_dir}/{layout.CHECKPOINTS}/{layout.TRACKER}", 0, 64)
        try:
            found = int(raw.decode().strip()) if raw else None
        except ValueError:
            found = None
        if found is not None and found >= run.last_checkpoint:
            return None
        have = "no checkpoint" if found is None else f"only checkpoint {found}"
        return (f"volume lost: the run had checkpoint {run.last_checkpoint}, its run dir on the new pod has {have}, "
                f"and there is no Hub copy (hub.repo_id); paused instead of training from rollout 0. Recover the "
                f"volume, or train from rollout 0: trainstack resume {run.run_id} --from-scratch "
                f"(POST /v1/runs/{run.run_id}/resume?from_scratch=true)")

    def _over_budget(self, run: CommanderRun) -> str | None:
        if run.spend_limit is not None and run.cost_usd >= run.spend_limit:
            return f"spend limit reached: ${run.cost_usd:.4f} >= ${run.spend_limit:.4f}"
        if run.sweep:
            limit = self.store.sweep_limit(run.sweep)
            if limit is not None:
                cost = self.store.sweep_cost(run.sweep)
                if cost >= limit:
                    return f"sweep spend limit reached: ${cost:.4f} >= ${limit:.4f}"
        return None

    def _wind_down(self, run: CommanderRun, now: float) -> None:
        final = run.desired  # cancelled | paused
        if run.phase in ("running", "stopping") and run.lease_live(now):
            if run.phase != "stopping":
                self._set(run, "stopping", {"desired": final}, phase="stopping",
                          deadline=now + self.config.stop_timeout_s)
                return
            if run.deadline is None or now < run.deadline:
                return  # the worker checkpoints, reports and releases
            self._event(run, "stop_timeout", pod_id=run.pod_id)
        self._remove_run_pods(run)
        with self.store.tx() as db:  # a new epoch fences out any provisioning or worker still in flight
            if db.execute("UPDATE runs SET epoch=epoch+1, phase=?, lease_holder=NULL, lease_expires=NULL, pod_id=NULL, "
                          "updated=? WHERE run_id=? AND epoch=?", (final, now, run.run_id, run.epoch)).rowcount:
                Store.event(db, run.run_id, final, run.epoch + 1, cost_usd=run.cost_usd)

    def _retire_volume(self, run: CommanderRun, now: float) -> None:
        """An ended run's volume: deleted once `volume_retention_s` has passed since it ended, or at once
        when purged. Only a volume the commander made (`volume: auto`); one named in the settings is the user's."""
        if run.ended is None:
            with self.store.tx() as db:
                Store.update(db, run.run_id, ended=now)
            return
        if not run.volume_id or PodRequest.from_dict(run.settings).volume != "auto":
            return
        if not run.purge and now - run.ended < self.config.volume_retention_s:
            return
        if any(p["removed"] is None for p in run.pods):
            return  # attached: the pod goes first (next tick)
        self.provider.delete_volume(run.volume_id)
        with self.store.tx() as db:
            Store.update(db, run.run_id, volume_id=None)
            Store.event(db, run.run_id, "volume_deleted", run.epoch, volume_id=run.volume_id,
                        reason="purged" if run.purge else f"retention ({self.config.volume_retention_s / 86400:g} days)")

    def _remove_run_pods(self, run: CommanderRun) -> None:
        for p in run.pods:
            if p["removed"] is None:
                self._remove_pod(run.run_id, p["pod_id"], run.epoch)

    def _remove_pod(self, run_id: str, pod_id: str, epoch: int | None) -> None:
        self.provider.remove(pod_id)
        self.store.pod_removed(pod_id)
        with self.store.tx() as db:
            Store.event(db, run_id, "pod_removed", epoch, pod_id=pod_id)
        self.refresh()

    def _remove_orphans(self, pods: dict[str, Any]) -> None:
        """Pods named for one of our (run, epoch) that are not the run's current pod."""
        runs = {r.run_id: r for r in self.store.runs()}
        names = {pod_name(r.run_id, e): (r, e) for r in runs.values() for e in range(1, r.epoch + 1)}
        known = {p["pod_id"]: p for p in self.store.open_pods()}
        for pod_id, ref in pods.items():
            hit = names.get(ref.name)
            if hit is None:
                continue
            run, epoch = hit
            current = run.pod_id == pod_id and run.phase in ("provisioning", "starting", "running", "stopping")
            in_flight = run.phase == "provisioning" and epoch == run.epoch  # being recorded right now
            if current or in_flight or self._is_busy(run.run_id):
                continue
            if pod_id not in known:
                self.store.add_pod(run.run_id, epoch, pod_id, ref.name, 0.0)
            with self.store.tx() as db:
                Store.event(db, run.run_id, "orphan_pod", epoch, pod_id=pod_id, name=ref.name)
            self._remove_pod(run.run_id, pod_id, epoch)

    # ------------------------------------------------------------------ provisioning
    def _is_busy(self, run_id: str) -> bool:
        with self._busy_lock:
            t = self._busy.get(run_id)
            return t is not None and t.is_alive()

    def _provision_async(self, run: CommanderRun) -> None:
        with self._busy_lock:
            t = self._busy.get(run.run_id)
            if t is not None and t.is_alive():
                return
            t = threading.Thread(target=self._provision, args=(run,), name=f"provision-{run.run_id}", daemon=True)
            self._busy[run.run_id] = t
            t.start()

    def _provision(self, run: CommanderRun) -> None:
        req = PodRequest.from_dict(run.settings)
        epoch = run.epoch
        name = pod_name(run.run_id, epoch)
        pod_id = run.pod_id
        try:
            volume_id = run.volume_id
            if req.volume and not volume_id:
                volume_id = (self.provider.ensure_volume(f"trainstack-{run.run_id}"[:63]) if req.volume == "auto"
                             else req.volume)
                self._set(run, "volume", {"volume_id": volume_id}, volume_id=volume_id)
            if pod_id is None or not any(p["pod_id"] == pod_id and p["removed"] is None for p in run.pods):
                pod = self.provider.rent(req, name, idempotency_key(run.run_id, epoch), volume_id)
                pod_id = pod.id
                self.store.add_pod(run.run_id, epoch, pod.id, name, pod.price_per_hour)
                if not self._set(run, "rented", {"pod_id": pod.id, "name": name, "price_per_hour": pod.price_per_hour},
                                 pod_id=pod.id):
                    self._remove_pod(run.run_id, pod.id, epoch)  # superseded meanwhile
                    return
            if not self.provider.wait_ready(pod_id, req.ready_timeout_s):
                raise TimeoutError(f"pod {pod_id} not ready within {req.ready_timeout_s:.0f} s")
            unusable = self.provider.image_problem(pod_id, req.python)
            if unusable:  # every pod of this template would be the same: failed, not retried (nothing trains)
                what = f"template {req.template_id}" if req.template_id else f"image {req.image or '(Lium default)'}"
                self._set(run, "image_unusable", {"pod_id": pod_id, "error": unusable}, phase="failed",
                          message=f"{unusable}; {what} cannot run trainstack: build docker/Dockerfile and set "
                                  "cluster.lium.pod.image (docs/lium.md, section 1)")
                return
            run_dir = req.run_dir(run.run_id)
            spec = dict(run.spec)
            from trainstack.storage import layout

            self.provider.put_file(pod_id, f"{run_dir}/{layout.SPEC}",
                                   (json.dumps(spec, indent=1, sort_keys=True, default=str) + "\n").encode())
            lost = self._checkpoint_missing(run, pod_id, run_dir)
            if lost:  # starting the worker would train from rollout 0: the run waits for the user instead
                with self.store.tx() as db:
                    if Store.update(db, run.run_id, epoch=epoch, desired="paused", message=lost):
                        Store.event(db, run.run_id, "volume_lost", epoch, last_checkpoint=run.last_checkpoint,
                                    pod_id=pod_id)
                return
            argv = self.config.worker_argv or [req.python, "-m", "trainstack.launch.lium_worker"]
            env = {"TRAINSTACK_COMMANDER_URL": self.config.public_url,
                   "TRAINSTACK_COMMANDER_TOKEN": self.worker_token(run.run_id),
                   "TRAINSTACK_RUN_ID": run.run_id, ENV_COMMANDER_EPOCH: str(epoch),
                   "TRAINSTACK_POD_ID": pod_id, "TRAINSTACK_RUN_DIR": run_dir,
                   **{k: os.environ[k] for k in (*FORWARDED_SECRETS, *FORWARDED_ENDPOINTS) if os.environ.get(k)}}
            pid = self.provider.start(pod_id, argv, env, worker_log_path(req, run.run_id, epoch))
            with self.store.tx() as db:  # the worker may have taken its lease already (phase running)
                db.execute("UPDATE runs SET phase='starting', deadline=?, updated=?, message=CASE WHEN "
                           "capacity_since IS NULL THEN message END, capacity_since=NULL "
                           "WHERE run_id=? AND epoch=? AND phase='provisioning'",
                           (time.time() + self.config.start_timeout_s, time.time(), run.run_id, epoch))
                Store.event(db, run.run_id, "worker_started", epoch, pod_id=pod_id, pid=pid,
                            log=worker_log_path(req, run.run_id, epoch))
        except NoNode as ex:  # no capacity: not the pod's fault, so no restart counted; wait within a budget
            self._wait_for_capacity(run, str(ex))
        except Exception as ex:  # noqa: BLE001 - any failure: clean up and retry with backoff
            kind = "provision_failed"
            self._set(run, kind, {"error": f"{type(ex).__name__}: {ex}", "pod_id": pod_id}, phase="lost",
                      message=f"{kind}: {ex}")
        finally:
            self.refresh()
