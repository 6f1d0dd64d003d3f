"""One writer per run: the run-directory lease."""
import json
import multiprocessing as mp
import os
import time

import pytest

from trainstack.fencing.lease import Lease, LeaseHeld


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


def _lease_of(path, host, commander_epoch, ttl_s=600):
    """A live lease.json of another pod, as a trainer under `commander_epoch` wrote it."""
    now = time.time()
    rec = {"token": "t" * 32, "host": host, "pid": 1, "since": now, "heartbeat": now, "expires_at": now + ttl_s,
           "ttl_s": ttl_s, "epoch": 3, "trainer_pgid": None}
    if commander_epoch != "absent":
        rec["commander_epoch"] = commander_epoch
    path.write_text(json.dumps(rec))


def test_the_lease_records_the_commander_epoch_it_runs_under(tmp_path, monkeypatch):
    from trainstack.fencing.fence import ENV_COMMANDER_EPOCH
    from trainstack.fencing.lease import read_record

    monkeypatch.setenv(ENV_COMMANDER_EPOCH, "7")
    lease = Lease.acquire(tmp_path / "lease.json", ttl_s=30)
    assert json.loads((tmp_path / "lease.json").read_text())["commander_epoch"] == 7
    assert read_record(tmp_path / "lease.json").commander_epoch == 7 and lease.record.epoch == 1
    lease.release()
    monkeypatch.delenv(ENV_COMMANDER_EPOCH)
    again = Lease.acquire(tmp_path / "lease.json", ttl_s=30)
    assert again.record.commander_epoch is None and again.record.epoch == 2


@pytest.mark.parametrize("recorded, ours, taken", [
    (4, 5, True),  # an older commander epoch: superseded, taken over at once
    (5, 5, False),  # our own epoch: never evicted by us
    (6, 5, False),  # a newer epoch: we are the superseded worker
    ("absent", 5, True),  # a lease.json written before records named the commander epoch (compatible)
    (None, 5, True),  # written outside the commander, held by another host
])
def test_worker_takes_over_only_a_run_dir_lease_of_an_older_commander_epoch(tmp_path, recorded, ours, taken):
    from trainstack.launch.lium_worker import take_over_run_dir_lease

    _lease_of(tmp_path / "lease.json", "lium-old-pod", recorded)
    assert take_over_run_dir_lease(tmp_path, "lium-new-pod", ours) is taken
    assert (tmp_path / "lease.json").exists() is not taken


def test_old_lease_json_without_the_new_field_is_still_valid(tmp_path):
    from trainstack.run.rundir.check import _lease_fields

    _lease_of(tmp_path / "lease.json", "h", "absent")
    assert _lease_fields(json.loads((tmp_path / "lease.json").read_text())) == ""
    assert "commander_epoch has the wrong type" in _lease_fields(
        {**json.loads((tmp_path / "lease.json").read_text()), "commander_epoch": "7"})
    assert "lacks epoch" in _lease_fields({k: v for k, v in json.loads((tmp_path / "lease.json").read_text()).items()
                                          if k != "epoch"})


def test_epochs_never_repeat_when_lease_json_is_deleted_under_a_live_run(tmp_path):
    """Deleting lease.json of a live run must not hand the relaunch the live writer's epoch
    (two writers with one epoch in publish.jsonl): the epoch log keeps counting."""
    from trainstack.fencing.fence import Fence

    path = tmp_path / "lease.json"
    live = Lease.acquire(path, ttl_s=60)
    assert live.record.epoch == 1
    path.unlink()
    relaunch = Lease.acquire(path, ttl_s=60)
    assert relaunch.record.epoch == 2
    assert Fence(str(path), live.record.token, live.record.epoch, 0.1).problem() is not None  # the live one is fenced
    path.unlink()
    (tmp_path / "lease.epochs").unlink()  # both gone: publish.jsonl still remembers
    ck = tmp_path / "checkpoints"
    ck.mkdir()
    (ck / "publish.jsonl").write_text(json.dumps({"iter": 9, "epoch": 3}) + "\n{torn")
    assert Lease.acquire(path, ttl_s=60).record.epoch == 4


def test_a_finished_epoch_3_run_relaunches_above_every_recorded_epoch(tmp_path):
    path = tmp_path / "lease.json"
    for want in (1, 2, 3):
        lease = Lease.acquire(path, ttl_s=60)
        assert lease.record.epoch == want
        lease.release()
    path.unlink()
    assert Lease.acquire(path, ttl_s=60).record.epoch == 4
    assert [int(x) for x in (tmp_path / "lease.epochs").read_text().split()] == [1, 2, 3, 4]
