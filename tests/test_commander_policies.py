"""The reconciler's judgement, tick by tick, against an in-memory provider (fast; the same policies run
end to end against the fake Lium in tests/test_commander.py): a pod missing from one listing is not
lost while its worker renews; the restart budget counts restarts without progress, not preemptions."""
from __future__ import annotations

import json
import time
from typing import Any

from trainstack.commander.provider import NoNode, PodRef
from trainstack.commander.reconciler import CommanderConfig, Reconciler
from trainstack.commander.store import Store


ADMIN = "admin-token-0123456789abcdef"
TRACKER = "/workspace/trainstack/runs/r/checkpoints/latest_checkpointed_iteration.txt"  # volume=null: pod-local


class MemProvider:
    """Pods in a dict; `hide` omits pods from the next listings (a glitch of the provider's API)."""

    def __init__(self) -> None:
        self.pods: dict[str, PodRef] = {}
        self.removed: list[str] = []
        self.hide: dict[str, int] = {}  # pod id -> listings that still omit it
        self.n = 0
        self.capacity = True  # False: no node matches (price cap, sold out)
        self.files: dict[str, bytes] = {}  # the run's volume (outlives pods unless wiped)
        self.started: list[str] = []
        self.volumes_deleted: list[str] = []

    def delete_volume(self, volume_id: str) -> None:
        self.volumes_deleted.append(volume_id)

    def ensure_volume(self, name: str) -> str:
        return "vol-" + name

    def rent(self, req: Any, name: str, key: str, volume_id: str | None) -> PodRef:
        if not self.capacity:
            raise NoNode("no node with 1x any GPU at <= $0.01/h")
        self.n += 1
        ref = PodRef(f"pod-{self.n}", name, 1.0, "RUNNING")
        self.pods[ref.id] = ref
        return ref

    def wait_ready(self, pod_id: str, timeout: float) -> bool:
        return True

    stock = False  # True: pods run an image without trainstack

    def image_problem(self, pod_id: str, python: str) -> str | None:
        return "the pod's image has no trainstack (python3 cannot import it)" if self.stock else None

    def put_file(self, pod_id: str, remote: str, data: bytes) -> None:
        pass

    def start(self, pod_id: str, argv: list[str], env: dict[str, str], log_path: str) -> int:
        self.started.append(pod_id)
        return 4242

    def read(self, pod_id: str, path: str, offset: int = 0, limit: int = 1 << 20) -> bytes | None:
        data = self.files.get(path)
        return None if data is None else data[offset:offset + limit]

    def list_pods(self) -> dict[str, PodRef]:
        out = {}
        for pid, ref in self.pods.items():
            if self.hide.get(pid, 0) > 0:
                self.hide[pid] -= 1
                continue
            out[pid] = ref
        return out

    def remove(self, pod_id: str) -> None:
        self.removed.append(pod_id)
        self.pods.pop(pod_id, None)


class Harness:
    def __init__(self, tmp, restart_limit: int = 5, capacity_wait_s: float = 3600, volume: str | None = None,
                 **config: Any) -> None:
        self.store = Store(tmp / "c.db")
        self.provider = MemProvider()
        self.config = CommanderConfig(public_url="http://commander", lease_ttl_s=30, heartbeat_s=1,
                                      worker_deadline_s=20, probe_s=0, backoff_s=0, backoff_max_s=0, **config)
        self.rec = Reconciler(self.store, self.config, lambda run_id: "tok", provider=self.provider)
        now = time.time()
        with self.store.tx() as db:
            db.execute("INSERT INTO runs(run_id, spec, settings, desired, phase, restart_limit, capacity_wait_s, created, "
                       "updated) VALUES ('r','{}',?,'running','pending',?,?,?,?)",
                       (json.dumps({"volume": volume}), restart_limit, capacity_wait_s, now, now))

    def api(self):
        """The commander's HTTP API over the same store (what `trainstack resume/cancel` call)."""
        from fastapi.testclient import TestClient

        from trainstack.commander.api import create_app

        return TestClient(create_app(self.store, self.config, ADMIN, lambda run_id: "tok", self.rec),
                          headers={"Authorization": f"Bearer {ADMIN}"})

    def spent(self, usd: float) -> None:
        """A pod of the run that billed `usd` (price $1/h) and is gone."""
        now = time.time()
        with self.store.tx() as db:
            db.execute("INSERT INTO pods(pod_id, run_id, epoch, name, price_per_hour, rented, removed) "
                       "VALUES (?,?,?,?,?,?,?)", (f"old-{now}", "r", 0, "old", 1.0, now - usd * 3600, now))

    def tick(self) -> None:
        self.rec.tick()
        for t in list(self.rec._busy.values()):
            t.join(10)

    def run(self):
        r = self.store.run("r")
        assert r is not None
        return r

    def worker_takes_lease(self, checkpoint: int | None = None) -> None:
        """What the API's acquire/renew does for the current epoch's worker."""
        with self.store.tx() as db:
            Store.update(db, "r", epoch=self.run().epoch, phase="running", lease_holder="w",
                         lease_expires=time.time() + 30,
                         **({} if checkpoint is None else {"last_checkpoint": checkpoint}))

    def node_lost(self) -> None:
        """The node dies: the pod is no longer listed and its worker's lease lapses."""
        self.provider.pods.pop(self.run().pod_id or "", None)
        with self.store.tx() as db:
            Store.update(db, "r", lease_expires=time.time() - 1)

    def events(self) -> list[str]:
        return [e["event"] for e in self.store.events("r")]


def started(h: Harness) -> None:
    for _ in range(5):
        h.tick()
        if h.run().phase == "starting":
            return
    raise AssertionError(f"no pod started: {h.run().phase} {h.events()}")


def test_a_pod_missing_from_one_listing_is_not_deleted_while_its_worker_renews(tmp_path):
    h = Harness(tmp_path)
    started(h)
    h.worker_takes_lease()
    pod = h.run().pod_id
    assert pod is not None
    h.provider.hide[pod] = 3  # three listings in a row omit it; its worker keeps renewing
    for _ in range(4):
        h.tick()
        h.worker_takes_lease()
    r = h.run()
    assert (r.phase, r.pod_id, r.restarts, r.epoch) == ("running", pod, 0, 1)
    assert h.provider.removed == [] and "pod_lost" not in h.events()


def test_a_starting_pod_is_lost_only_when_listings_agree(tmp_path):
    h = Harness(tmp_path)
    started(h)
    pod = h.run().pod_id
    assert pod is not None
    h.provider.hide[pod] = 1  # one glitch: nothing happens
    h.tick()
    h.tick()
    assert (h.run().phase, h.provider.removed) == ("starting", [])
    del h.provider.pods[pod]  # really gone: two listings agree, and it is replaced
    h.tick()
    h.tick()
    assert "pod_lost" in h.events() and h.provider.removed == [pod]


def test_a_lapsed_lease_and_an_unlisted_pod_is_a_lost_pod(tmp_path):
    h = Harness(tmp_path)
    started(h)
    h.worker_takes_lease()
    pod = h.run().pod_id
    h.node_lost()
    started(h)
    r = h.run()
    assert r.epoch == 2 and r.pod_id != pod and r.restarts == 1 and pod in h.provider.removed


def test_restart_budget_counts_restarts_without_progress(tmp_path):
    """restart_limit=1 and two node losses with training between: the run goes on; a third loss with no
    new checkpoint since the last restart fails it."""
    h = Harness(tmp_path, restart_limit=1)
    started(h)
    h.worker_takes_lease(checkpoint=9)
    h.provider.files[TRACKER] = b"9"  # the volume holds what the worker reported
    h.node_lost()
    started(h)
    assert (h.run().epoch, h.run().restarts, h.run().strikes) == (2, 1, 1)
    h.worker_takes_lease(checkpoint=29)  # 20 more rollouts trained on the second pod
    h.provider.files[TRACKER] = b"29"
    h.node_lost()
    started(h)
    r = h.run()
    assert (r.phase, r.epoch, r.restarts, r.strikes, r.strike_checkpoint) == ("starting", 3, 2, 1, 29)
    assert "restart_budget_reset" in h.events()
    h.worker_takes_lease()  # no new checkpoint on this pod
    h.node_lost()
    for _ in range(4):
        h.tick()
    r = h.run()
    assert r.phase == "failed" and "restarts without progress (restart_limit=1)" in (r.message or "")
    assert r.restarts == 2 and not h.provider.pods  # nothing left billing


def test_no_free_node_waits_within_its_budget_and_counts_no_restart(tmp_path):
    h = Harness(tmp_path, restart_limit=0)  # a restart would fail the run at once
    h.provider.capacity = False
    for _ in range(5):
        h.tick()
    r = h.run()
    assert r.phase == "pending" and r.restarts == 0 and r.strikes == 0 and r.capacity_since is not None
    assert (r.message or "").startswith("waiting for capacity since") and "$0.01/h" in (r.message or "")
    assert h.events().count("no_capacity") >= 2
    h.provider.capacity = True  # a node frees up
    started(h)
    r = h.run()
    assert (r.phase, r.restarts, r.capacity_since, r.message) == ("starting", 0, None, None)


def test_no_free_node_past_the_budget_fails_the_run_naming_why(tmp_path):
    h = Harness(tmp_path, capacity_wait_s=0.3)
    h.provider.capacity = False
    h.tick()
    assert h.run().phase == "pending"
    time.sleep(0.4)
    for _ in range(3):
        h.tick()
    r = h.run()
    assert r.phase == "failed" and "capacity_wait_s=0" in (r.message or "") and "$0.01/h" in (r.message or "")
    assert r.restarts == 0 and h.provider.n == 0


def test_a_lost_volume_without_a_hub_copy_pauses_the_run_instead_of_training_from_zero(tmp_path):
    h = Harness(tmp_path)
    started(h)
    h.worker_takes_lease(checkpoint=29)
    h.provider.files[TRACKER] = b"29"
    h.node_lost()
    started(h)  # the volume came back with checkpoint 29: the new pod's worker resumes from it
    assert len(h.provider.started) == 2
    h.worker_takes_lease()
    h.provider.files.clear()  # the volume is lost with the node
    h.node_lost()
    for _ in range(6):
        h.tick()
    r = h.run()
    assert (r.phase, r.desired, r.last_checkpoint) == ("paused", "paused", 29)
    assert "volume lost: the run had checkpoint 29" in (r.message or "") and "from_scratch=true" in (r.message or "")
    assert len(h.provider.started) == 2 and not h.provider.pods  # no worker on the empty pod, nothing billing
    assert "volume_lost" in h.events()


def test_a_run_with_a_hub_copy_or_no_checkpoint_yet_starts_on_an_empty_volume(tmp_path):
    h = Harness(tmp_path)
    started(h)  # a new run: nothing to lose
    with h.store.tx() as db:
        Store.update(db, "r", spec={"hub": {"repo_id": "me/run"}})
    h.worker_takes_lease(checkpoint=29)
    h.node_lost()
    started(h)  # empty volume, but the worker restores checkpoint 29 from the Hub
    assert len(h.provider.started) == 2 and h.run().desired == "running"


def test_a_database_of_an_older_commander_gains_the_new_columns(tmp_path):
    """A commander upgraded in place keeps its runs: the columns added for these policies are added."""
    import sqlite3

    from trainstack.commander import store as store_mod

    old = store_mod.SCHEMA
    for line in ("  strikes INTEGER NOT NULL DEFAULT 0,\n", "  strike_checkpoint INTEGER,\n",
                 "  capacity_wait_s REAL NOT NULL DEFAULT 3600,\n", "  capacity_since REAL,\n"):
        assert line in old
        old = old.replace(line, "")
    db = sqlite3.connect(tmp_path / "c.db")
    db.executescript(old)
    db.execute("INSERT INTO runs(run_id, spec, settings, desired, phase, restarts, created, updated) "
               "VALUES ('r','{}','{}','running','running',3,1,1)")
    db.commit()
    db.close()
    r = Store(tmp_path / "c.db").run("r")
    assert r is not None and (r.restarts, r.strikes, r.strike_checkpoint, r.capacity_wait_s) == (3, 0, None, 3600)


def paused_at_spend_limit(h: Harness) -> None:
    with h.store.tx() as db:
        Store.update(db, "r", spend_limit=0.5)
    h.spent(0.6)
    for _ in range(4):
        h.tick()
    r = h.run()
    assert (r.phase, r.desired) == ("paused", "paused") and "spend limit reached" in (r.message or "")


def test_a_run_paused_at_its_spend_limit_resumes_with_a_new_limit_and_stays_running(tmp_path):
    """Before: `resume` of a run paused by its spend limit paused it again at the next tick (the limit could be
    raised only by relaunching). Now the resume sets the new limit, and the run is provisioned and stays up."""
    h = Harness(tmp_path)
    paused_at_spend_limit(h)
    api = h.api()
    same = api.post("/v1/runs/r/resume", json={})
    assert same.status_code == 409 and "--spend-limit" in same.json()["detail"]  # would re-pause: refused, says how
    assert h.run().phase == "paused"
    low = api.post("/v1/runs/r/resume", json={"spend_limit": 0.55})
    assert low.status_code == 409 and "$0.5" in low.json()["detail"]  # a new limit already spent is refused too
    ok = api.post("/v1/runs/r/resume", json={"spend_limit": 5.0})
    assert ok.status_code == 200, ok.text
    assert ok.json()["spend_limit"] == 5.0
    for _ in range(5):
        h.tick()
    r = h.run()
    assert (r.desired, r.phase, r.spend_limit) == ("running", "starting", 5.0), h.events()
    assert h.events().count("spend_limit") == 1 and "spend_limit_set" in h.events()


def test_a_run_of_a_sweep_paused_at_the_sweep_limit_resumes_with_a_new_sweep_limit(tmp_path):
    h = Harness(tmp_path)
    with h.store.tx() as db:
        Store.update(db, "r", sweep="sw")
    h.store.set_sweep_limit("sw", 0.5)
    h.spent(0.6)
    for _ in range(4):
        h.tick()
    assert h.run().phase == "paused"
    api = h.api()
    refused = api.post("/v1/runs/r/resume", json={"spend_limit": 9.0})  # the run's own limit is not the one reached
    assert refused.status_code == 409 and "--sweep-spend-limit" in refused.json()["detail"]
    assert api.post("/v1/runs/r/resume", json={"sweep_spend_limit": 2.0}).status_code == 200
    for _ in range(4):
        h.tick()
    assert (h.run().desired, h.run().phase) == ("running", "starting") and h.store.sweep_limit("sw") == 2.0


def finished(h: Harness) -> None:
    started(h)
    with h.store.tx() as db:
        Store.update(db, "r", phase="finished")


def test_an_ended_runs_volume_is_deleted_after_the_retention_and_at_once_when_purged(tmp_path):
    kept = Harness(tmp_path / "a", volume="auto")  # default retention: 7 days
    finished(kept)
    for _ in range(3):
        kept.tick()
    assert kept.provider.volumes_deleted == [] and kept.run().volume_id == "vol-trainstack-r"
    assert kept.run().ended is not None and kept.provider.removed  # the pod went at once, the volume stays
    short = Harness(tmp_path / "b", volume="auto", volume_retention_s=0.2)
    finished(short)
    short.tick()
    time.sleep(0.3)
    for _ in range(2):
        short.tick()
    assert short.provider.volumes_deleted == ["vol-trainstack-r"] and short.run().volume_id is None
    assert "volume_deleted" in short.events()
    purged = Harness(tmp_path / "c", volume="auto")
    finished(purged)
    purged.tick()
    assert purged.api().post("/v1/runs/r/cancel?purge=true").status_code == 200  # an ended run can be purged
    for _ in range(2):
        purged.tick()
    assert purged.provider.volumes_deleted == ["vol-trainstack-r"]


def test_a_purged_running_run_loses_its_volume_only_after_its_pod_and_a_named_volume_is_never_deleted(tmp_path):
    h = Harness(tmp_path / "a", volume="auto")
    started(h)
    h.worker_takes_lease()
    assert h.api().post("/v1/runs/r/cancel?purge=true").json()["purge"] is True
    h.tick()  # asks the worker to stop; the pod and the volume stay
    assert h.provider.volumes_deleted == [] and h.run().phase == "stopping"
    with h.store.tx() as db:  # the worker checkpointed and released
        Store.update(db, "r", phase="cancelled", lease_holder=None, lease_expires=None)
    for _ in range(3):
        h.tick()
    assert h.provider.removed and h.provider.volumes_deleted == ["vol-trainstack-r"]
    mine = Harness(tmp_path / "b", volume="vol-of-the-user", volume_retention_s=0)
    finished(mine)
    assert mine.api().post("/v1/runs/r/cancel?purge=true").status_code == 200
    for _ in range(3):
        mine.tick()
    assert mine.provider.volumes_deleted == [] and mine.run().volume_id == "vol-of-the-user"


def test_a_pod_whose_image_has_no_trainstack_fails_the_run_once_and_is_removed(tmp_path):
    h = Harness(tmp_path, restart_limit=5)
    h.provider.stock = True
    for _ in range(4):
        h.tick()
    r = h.run()
    assert r.phase == "failed" and "has no trainstack" in (r.message or "") and "cluster.lium.pod.image" in (r.message or "")
    assert h.provider.n == 1 and h.provider.started == [] and not h.provider.pods  # no worker, no retry, nothing billing


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["429", "5xx", "conn"]), st.floats(0, 20)), max_size=6),
       st.floats(0, 200))
def test_with_backoff_waits_at_least_each_retry_after_and_never_past_its_budget(failures, budget):
    """Any sequence of transient failures (429 with a Retry-After, 5xx, connection errors): every pause is at
    least what a 429 asked; the pauses never add up past the budget; past it the last failure is raised."""
    import requests
    from lium.sdk.exceptions import LiumRateLimitError, LiumServerError

    from trainstack.commander import provider

    clock = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    pending = []
    for kind, after in failures:
        ex: Exception
        if kind == "429":
            ex = LiumRateLimitError("rate")
            ex.retry_after = after
        else:
            ex = LiumServerError("503") if kind == "5xx" else requests.ConnectionError("down")
        pending.append(ex)
    asked = [getattr(e, "retry_after", 0.0) or 0.0 for e in pending]

    def call():
        if pending:
            raise pending.pop(0)
        return "ok"

    real = provider.time.monotonic
    provider.time.monotonic = lambda: clock[0]  # type: ignore[assignment]
    try:
        try:
            got = provider.with_backoff(call, "prop", budget_s=budget, sleep=sleep)
        except (LiumRateLimitError, LiumServerError, requests.ConnectionError):
            got = None
    finally:
        provider.time.monotonic = real  # type: ignore[assignment]
    assert sum(slept) <= budget + 1e-9
    assert all(s >= a for s, a in zip(slept, asked))
    assert (got == "ok") == (len(slept) == len(failures))


@settings(max_examples=25, deadline=None)
@given(st.floats(0.01, 50), st.floats(0.01, 100))
def test_a_spend_limit_pause_resumes_exactly_when_the_new_limit_is_above_the_spend(spent, new_limit):
    """(A new limit a few microdollars above the spend is reached again by the new pod's first seconds: that
    pause is the limit doing its job, so the margin here is a cent.)"""
    import tempfile
    from pathlib import Path

    from hypothesis import assume

    assume(abs(new_limit - spent) > 0.01)

    with tempfile.TemporaryDirectory() as d:
        h = Harness(Path(d))
        with h.store.tx() as db:
            Store.update(db, "r", spend_limit=spent / 2)
        h.spent(spent)
        for _ in range(3):
            h.tick()
        assert h.run().phase == "paused"
        cost = h.run().cost_usd
        answer = h.api().post("/v1/runs/r/resume", json={"spend_limit": new_limit})
        assert (answer.status_code == 200) == (new_limit > cost), answer.text
        for _ in range(3):
            h.tick()
        assert h.run().phase == ("starting" if new_limit > cost else "paused")
        assert h.events().count("spend_limit") == 1  # never paused again by the limit it was resumed with
