"""A superseded writer whose tracker rename stalls past its lease, then lands after the next
epoch's publishes (docs/resume.md, the fencing rule): readers decide by the lease epochs in
publish.jsonl, so the late rename never rolls the run back and nothing newer is moved aside."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

from conftest import ROOT

from trainstack.storage.checkpoints import inspect, plan_recovery
from trainstack.fencing.fence import Fence
from trainstack.fencing.lease import Lease
from trainstack.storage.layout import INCOMPLETE_DIR, PUBLISH_LOG, TRACKER
from trainstack.tiny.checkpoint import TrainState, save_checkpoint

STATE = TrainState(model={"w": 1}, optimizer={"o": 1}, scheduler={"s": 1}, rng={"r": 1}, meta={"m": 1})


def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _fence(lease: Lease) -> Fence:
    return Fence(str(lease.path), lease.record.token, lease.record.epoch, 0.1)


def test_a_stalled_tracker_rename_that_lands_late_never_rolls_the_run_back(tmp_path):
    save = tmp_path / "checkpoints"
    old = Lease.acquire(tmp_path / "lease.json", ttl_s=120)  # epoch 1
    assert old.record.epoch == 1
    for n in range(3):
        save_checkpoint(str(save), n, STATE, cursor=b"cursor%d" % n, fence=_fence(old))
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from trainstack.fencing.fence import Fence
        from trainstack.tiny.checkpoint import TrainState, save_checkpoint
        st = TrainState(model={{"w": 1}}, optimizer={{"o": 1}}, scheduler={{"s": 1}}, rng={{"r": 1}}, meta={{"m": 1}})
        save_checkpoint({str(save)!r}, 3, st, cursor=b"cursor3-epoch1",
                        fence=Fence({str(old.path)!r}, {old.record.token!r}, 1, 0.1))
        """)], env={**os.environ, "PYTHONPATH": str(ROOT), "TRAINSTACK_TINY_STALL_PUBLISH": "3"})
    try:
        _wait(lambda: (save / ".stalled").exists(), 60, "the epoch-1 writer never reached its tracker rename")
        old.release()  # its holder froze and the lease ran out (as if past its TTL) while the rename stalled
        new = Lease.acquire(tmp_path / "lease.json", ttl_s=60)  # the relaunch: epoch 2 takes over
        assert new.record.epoch == 2
        for n in range(3, 9):  # resumes from 2 (3 was never published) and publishes 3..8
            save_checkpoint(str(save), n, STATE, cursor=b"cursor%d" % n, fence=_fence(new))
        assert (save / TRACKER).read_text() == "8"
        (save / ".release-stall").touch()  # the stalled rename lands now
        assert writer.wait(60) == 0
    finally:
        writer.kill()
    assert (save / TRACKER).read_text() == "3"  # the race happened: the tracker regressed
    lines = [json.loads(x) for x in (save / PUBLISH_LOG).read_text().splitlines()]
    assert lines[-1]["epoch"] == 1 and lines[-2] == {**lines[-2], "iter": 8, "epoch": 2}
    st_ = inspect(str(save), verify=True)
    assert st_.latest_complete == 8 and st_.unpublished == () and "epoch 2 published iter_0000008" in st_.problem
    from test_checkpoints import _Run

    from trainstack.run.resume import RESUME, plan
    from trainstack.run.rundir import RunDir

    rp = plan(_Run(tmp_path), RunDir(tmp_path))  # what the relaunch does: resume after 8, not after 3
    assert rp.action == RESUME and rp.from_rollout == 9
    rec = plan_recovery(st_)
    assert rec is not None and rec.move_aside == () and rec.tracker == 8
    assert rec.apply(str(save)) == []
    assert (save / TRACKER).read_text() == "8"
    assert all((save / f"iter_{n:07d}").is_dir() for n in range(9))
    # only epoch 1's unpublished iter_3, set aside by epoch 2's own save of 3, never by the recovery
    assert [p.name.split(".")[0] for p in (save / INCOMPLETE_DIR).iterdir()] == ["iter_0000003"]
    assert plan_recovery(inspect(str(save), verify=True)) is None


def _publish(save, n, epoch):
    d = save / f"iter_{n:07d}"
    d.mkdir(parents=True, exist_ok=True)
    with open(save / PUBLISH_LOG, "a") as f:
        f.write(json.dumps({"iter": n, "epoch": epoch}) + "\n")


def test_the_newest_publish_of_the_highest_epoch_wins_over_log_order_and_the_tracker(tmp_path):
    save = tmp_path
    for n in range(0, 40, 4):
        save_checkpoint(str(save), n, STATE, cursor=b"c%d" % n)  # no fence: lines without an epoch
    log = save / PUBLISH_LOG
    log.write_text("".join(json.dumps({"iter": n, "epoch": 1 if n <= 8 else 2}) + "\n" for n in range(0, 40, 4))
                   + json.dumps({"iter": 8, "epoch": 1}) + "\n" + "{torn")
    (save / TRACKER).write_text("8")
    st_ = inspect(str(save))
    assert st_.latest_complete == 36 and st_.unpublished == ()
    (save / TRACKER).write_text("36")
    assert plan_recovery(inspect(str(save))) is None
    (save / TRACKER).unlink()  # a deleted tracker is also recovered from the log
    assert inspect(str(save)).latest_complete == 36


def test_a_tracker_ahead_of_the_log_is_followed(tmp_path):
    """A publish whose log line is not written yet (killed between the two), or a Hub restore."""
    for n in (4, 8):
        save_checkpoint(str(tmp_path), n, STATE, cursor=b"c")
    (tmp_path / PUBLISH_LOG).write_text(json.dumps({"iter": 4, "epoch": 3}) + "\n")
    assert inspect(str(tmp_path)).latest_complete == 8
