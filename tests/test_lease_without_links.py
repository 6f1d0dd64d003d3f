"""The run-dir lease on filesystems without hard links (Lium network volumes, FUSE, vfat): `link()`
fails with EPERM/ENOTSUP there, and the lease still has one holder at a time."""
import errno
import json
import multiprocessing as mp
import os
import time

import pytest

from test_lease import _try_acquire  # the same race as on a filesystem with hard links
from trainstack.fencing.lease import Lease, LeaseHeld


@pytest.fixture(params=[errno.EPERM, errno.EOPNOTSUPP])
def no_links(request, monkeypatch):
    calls = []

    def refuse(src, dst, *a, **kw):
        calls.append(dst)
        raise OSError(request.param, os.strerror(request.param))

    monkeypatch.setattr(os, "link", refuse)
    return calls


def test_acquire_hold_release_and_reacquire_without_hard_links(tmp_path, no_links):
    path = tmp_path / "lease.json"
    lease = Lease.acquire(path, ttl_s=30)
    assert no_links and lease.holds() and json.loads(path.read_text())["token"] == lease.record.token
    with pytest.raises(LeaseHeld) as held:
        Lease.acquire(path, ttl_s=30)
    assert held.value.holder.pid == os.getpid()
    assert lease.renew()
    lease.release()
    again = Lease.acquire(path, ttl_s=30)
    assert again.record.epoch == lease.record.epoch + 1 and again.holds()
    again.release()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".lease")] == []  # no temp left


def test_concurrent_acquire_without_hard_links_has_one_winner(tmp_path, no_links):
    path = tmp_path / "lease.json"
    ctx = mp.get_context("fork")  # the children inherit the patched os.link
    barrier, results = ctx.Barrier(6), ctx.Queue()
    procs = [ctx.Process(target=_try_acquire, args=(path, barrier, results)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(20)
    outcomes = [results.get(timeout=5) for _ in procs]
    assert sum(1 for o, _ in outcomes if o == "won") == 1, outcomes


def test_an_expired_lease_is_taken_over_without_hard_links(tmp_path, no_links):
    path = tmp_path / "lease.json"
    now = time.time()
    path.write_text(json.dumps({"token": "dead", "host": "other-node", "pid": 1, "since": now - 100,
                                "heartbeat": now - 100, "expires_at": now - 1, "ttl_s": 60, "epoch": 7}))
    lease = Lease.acquire(path, ttl_s=30)
    assert lease.record.epoch == 8 and lease.holds()
    lease.release()


def test_other_link_errors_are_not_hidden(tmp_path, monkeypatch):
    def broken(src, dst, *a, **kw):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "link", broken)
    with pytest.raises(OSError, match="I/O error"):
        Lease.acquire(tmp_path / "lease.json", ttl_s=30)
