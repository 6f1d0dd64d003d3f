"""Status tells the truth about runs whose parts froze or whose Hub copy fell behind (issue #36): a
frozen trainer under a live launcher is `stale`, a frozen launcher's run ends `interrupted`, and a
run whose every Hub push failed says so."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT

from trainstack.fencing.lease import Lease
from trainstack.run.rundir import RunDir
from trainstack.run.rundir.hub_state import hub_note
from trainstack.storage.layout import TRAINER_HEARTBEAT
from trainstack.run.rundir.liveness import judge


def _running(tmp: Path, ttl: float = 600) -> Lease:
    RunDir(tmp).update_status(state="running")
    return Lease.acquire(tmp / "lease.json", ttl_s=ttl)


def test_a_frozen_trainer_under_a_live_launcher_is_stale(tmp_path):
    lease = _running(tmp_path, ttl=30)
    beat = tmp_path / TRAINER_HEARTBEAT
    now = time.time()
    beat.write_text(json.dumps({"pid": 4242, "epoch": lease.record.epoch, "time": now - 5}))
    assert judge(tmp_path, RunDir(tmp_path).status(), now).state == "running"
    beat.write_text(json.dumps({"pid": 4242, "epoch": lease.record.epoch, "time": now - 31}))
    j = judge(tmp_path, RunDir(tmp_path).status(), now)
    assert j.state == "stale" and "trainer pid 4242: no heartbeat for 31 s" in j.why and "kill -CONT 4242" in j.fix
    beat.write_text(json.dumps({"pid": 4242, "epoch": lease.record.epoch - 1, "time": now - 900}))
    assert judge(tmp_path, RunDir(tmp_path).status(), now).state == "running"  # an earlier launch's trainer
    lease.release()


def test_the_guard_beats_only_while_its_trainer_runs(tmp_path):
    """The real guard over a real child: SIGSTOP the child and the heartbeat stops; SIGCONT, it goes on."""
    from trainstack.fencing.fence import Fence, margin_for

    lease = _running(tmp_path)
    fence = Fence(str(lease.path), lease.record.token, lease.record.epoch, margin_for(lease.record.ttl_s))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINSTACK_TRAINER_HEARTBEAT_S": "0.2", **fence.to_env()}
    guard = subprocess.Popen([sys.executable, "-m", "trainstack.run.trainer_guard", "--", sys.executable, "-c",
                              "import time; time.sleep(60)"], env=env, stdout=subprocess.DEVNULL, start_new_session=True)
    beat = tmp_path / TRAINER_HEARTBEAT
    try:
        deadline = time.monotonic() + 30
        while not beat.exists():
            assert time.monotonic() < deadline and guard.poll() is None
            time.sleep(0.05)
        child = json.loads(beat.read_text())["pid"]
        assert json.loads(beat.read_text())["epoch"] == lease.record.epoch
        os.kill(child, signal.SIGSTOP)
        time.sleep(0.5)  # a beat in flight lands
        frozen = json.loads(beat.read_text())["time"]
        time.sleep(1.0)
        assert json.loads(beat.read_text())["time"] == frozen  # five beats skipped
        os.kill(child, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while json.loads(beat.read_text())["time"] == frozen:
            assert time.monotonic() < deadline, "the heartbeat did not resume"
            time.sleep(0.05)
    finally:
        os.killpg(guard.pid, signal.SIGKILL)  # its own session: the guard and its child only
        guard.wait()
        lease.release()


def test_a_frozen_launcher_s_run_ends_interrupted(tmp_path):
    """The launcher froze, its guard stopped the trainer before the lease lapsed (SIGTERM, final
    checkpoint) and recorded it; the launcher, back, records interrupted/143, not failed."""
    from test_status_liveness import _Done, _spec

    from trainstack.run import lifecycle

    spec = _spec(tmp_path)

    class StoppedByGuard(_Done):
        def wait(self) -> int:
            lease = json.loads((Path(spec.run_dir) / "lease.json").read_text())
            RunDir(spec.run_dir).event("trainer_stopped_by_guard", reason="the lease is about to expire", code=143,
                                       lease_epoch=lease["epoch"])
            return 143

    assert lifecycle.execute(spec, lambda env, rd: StoppedByGuard(143)) == 143
    status = RunDir(spec.run_dir).status()
    assert status["state"] == "interrupted" and status["exit_code"] == 143
    assert lifecycle.execute(spec, lambda env, rd: _Done(143)) == 143  # a trainer killed by someone else
    assert RunDir(spec.run_dir).status()["state"] == "failed"


def test_a_run_whose_hub_pushes_all_failed_says_so(tmp_path):
    from trainstack.reports.status import collect, fill

    rd = RunDir(tmp_path)
    rd.update_status(state="finished", run_id="r", hub={"repo_id": "alice/ckpts", "last_pushed": None, "pending": 1,
                                                       "failures": 7, "last_error": "401 Client Error: Unauthorized"})
    for i in (0, 1, 1):
        rd.event("hub_push_failed", iteration=i, error="401 Client Error: Unauthorized")
    assert fill(collect([str(tmp_path)]))[0].state == "finished, hub: 0/2 pushed, 401"
    rd.event("hub_push", iteration=1)
    assert hub_note(rd.status(), rd.events()) is None  # the Hub caught up: a plain finished
    rd.event("hub_push_failed", iteration=3, error="ConnectionError: the Hub did not answer")
    assert hub_note({"hub": {}}, rd.events()) == "hub: 1/2 pushed, ConnectionError: the Hub did not answer"
    assert hub_note({}, rd.events()) is None  # a run without Hub sync
