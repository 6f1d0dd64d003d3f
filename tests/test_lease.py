"""One writer per run: the run-directory lease."""
import json
import multiprocessing as mp
import os
import time

import pytest

from trainstack.lease import Lease, LeaseHeld


def _try_acquire(path, barrier, results):
    barrier.wait()
    try:
        lease = Lease.acquire(path, ttl_s=30)
        results.put(("won", os.getpid()))
        time.sleep(1.0)
        lease.release()
    except LeaseHeld as held:
        results.put(("held", held.holder.pid))


def test_concurrent_acquire_exactly_one_wins(tmp_path):
    path = tmp_path / "lease.json"
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(6), ctx.Queue()
    procs = [ctx.Process(target=_try_acquire, args=(path, barrier, results)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(20)
    outcomes = [results.get(timeout=5) for _ in procs]
    assert sum(1 for o, _ in outcomes if o == "won") == 1
    winner = next(pid for o, pid in outcomes if o == "won")
    assert all(pid == winner for o, pid in outcomes if o == "held")


def test_second_acquire_names_the_holder(tmp_path):
    lease = Lease.acquire(tmp_path / "lease.json", ttl_s=30)
    with pytest.raises(LeaseHeld) as exc:
        Lease.acquire(tmp_path / "lease.json", ttl_s=30)
    assert exc.value.holder.pid == os.getpid()
    assert "pid" in exc.value.holder.describe() and "since" in exc.value.holder.describe()
    lease.release()
    again = Lease.acquire(tmp_path / "lease.json", ttl_s=30)
    assert again.record.epoch == lease.record.epoch + 1  # fencing number survives a clean release
    again.release()


def test_expired_lease_of_another_host_is_taken_over_with_a_new_epoch(tmp_path, monkeypatch):
    path = tmp_path / "lease.json"
    now = time.time()
    path.write_text(json.dumps({"token": "dead", "host": "other-node", "pid": 1, "since": now - 100,
                                "heartbeat": now - 100, "expires_at": now - 1, "ttl_s": 60, "epoch": 7}))
    lease = Lease.acquire(path, ttl_s=30)
    assert lease.record.epoch == 8 and lease.holds()
    lease.release()


def test_live_lease_of_another_host_is_respected_until_expiry(tmp_path):
    path = tmp_path / "lease.json"
    now = time.time()
    path.write_text(json.dumps({"token": "alive", "host": "other-node", "pid": 1, "since": now,
                                "heartbeat": now, "expires_at": now + 2, "ttl_s": 2, "epoch": 1}))
    with pytest.raises(LeaseHeld):
        Lease.acquire(path, ttl_s=30)
    time.sleep(2.2)
    Lease.acquire(path, ttl_s=30).release()


def test_dead_local_holder_is_taken_over_at_once(tmp_path):
    ctx = mp.get_context("fork")
    p = ctx.Process(target=lambda: (Lease.acquire(tmp_path / "lease.json", ttl_s=600), os._exit(0)))
    p.start()
    p.join()
    lease = Lease.acquire(tmp_path / "lease.json", ttl_s=30)  # holder pid is gone on this host
    assert lease.record.epoch == 2
    lease.release()


def test_heartbeat_renews_and_detects_loss(tmp_path):
    lease = Lease.acquire(tmp_path / "lease.json", ttl_s=0.9)
    lost = []
    lease.start_heartbeat(on_lost=lambda: lost.append(True))
    first = lease.record.expires_at
    time.sleep(0.8)
    assert json.loads((tmp_path / "lease.json").read_text())["expires_at"] > first  # renewed
    (tmp_path / "lease.json").write_text(json.dumps({**json.loads((tmp_path / "lease.json").read_text()),
                                                     "token": "thief"}))
    time.sleep(0.8)
    assert lost == [True] and lease.lost.is_set()
    lease.release()
    assert json.loads((tmp_path / "lease.json").read_text())["token"] == "thief"  # never deletes another's lease
