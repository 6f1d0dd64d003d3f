"""Storage faults (a full disk, a read-only volume, permission denied) wherever they hit, launcher,
trainer or the Hub sync thread, end in exit code 5 with the fix, never a traceback; the preflight
refuses a read-only checkpoints/ (issue #36, docs/resume.md exit codes)."""
from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import SMALL_BATCH, files_under, run_py
from test_preflight import tmpfs  # noqa: F401 - the fixture: a real small / read-only tmpfs (root only)
from trainstack.storage import faults as storage

KINDS = {errno.ENOSPC: "free space", errno.EDQUOT: "free space", errno.EROFS: "read-write",
         errno.EACCES: "chmod -R u+rwX", errno.EPERM: "chmod -R u+rwX", errno.EIO: "dmesg"}


@given(code=st.sampled_from(sorted(KINDS)), inside=st.booleans(), named=st.booleans())
def test_every_storage_fault_is_named_with_its_own_fix(code, inside, named):
    """Property over kind x where it hit: a full/read-only/failing disk is a storage fault wherever it
    names; a permission error only under the run dir (elsewhere it is some other file's problem)."""
    root = "/runs/r1"
    path = f"{root}/checkpoints/iter_0000001/model.pt" if inside else "/usr/bin/python3"
    ex = OSError(code, os.strerror(code), path if named else None)
    expected = code not in (errno.EACCES, errno.EPERM) or (inside and named)
    assert storage.hits(ex, root) is expected
    problem, fix = storage.message(ex, root)
    assert os.strerror(code) in problem and KINDS[code] in fix and "relaunch" in fix
    assert (path in problem) is named


def test_torch_s_write_failure_is_a_storage_fault_and_other_errors_are_not():
    assert storage.hits(RuntimeError("[enforce fail at inline_container.cc:595] . PytorchStreamWriter failed "
                                     "writing file data/0: file write failed"), "/r")
    assert not storage.hits(RuntimeError("CUDA out of memory"), "/r")
    assert not storage.hits(OSError(errno.ECONNREFUSED, "refused"), "/r")


def test_the_hub_sync_thread_survives_a_full_run_dir(tmp_path, capsys):
    """Its events and status writes fail on a full disk: one line with the fix, the sync goes on."""
    from trainstack.hub.sync import SyncWorker

    class FullDisk:
        path = tmp_path

        def event(self, *a, **k):
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "events.jsonl"))

        def status(self):
            return {}

        update_status = event

    worker = SyncWorker.__new__(SyncWorker)
    worker.rundir, worker._told_storage = FullDisk(), False
    worker._event("hub_push_failed", iteration=3)
    worker._event("hub_push", iteration=3)
    err = capsys.readouterr().err
    assert err.count("could not record hub_push_failed") == 1 and "df -h" in err and "hub_push," not in err
    worker._told_storage = False
    FullDisk.event = lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EBADF, "Bad file descriptor"))
    with pytest.raises(OSError):  # not a storage fault: a bug, not hidden
        worker._event("hub_push", iteration=3)


@pytest.mark.slow
def test_a_disk_that_fills_mid_run_ends_in_exit_5_with_the_fix(tmp_path, tmpfs):  # noqa: F811
    """Issue: a 3 MiB tmpfs as paths.runs_root ended in the trainer's raw ENOSPC traceback and a
    summary saying "(running, exit code 1)"."""
    disk = tmpfs("disk", "size=3m")
    res = run_py(f"paths.runs_root={disk}", f"paths.data_root={tmp_path}/data", "run_id=full", "env.num_rollout=40",
                 "args.save_interval=1", *SMALL_BATCH, cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 5, out[-3000:]
    assert "Traceback" not in out and "the run's storage failed: No space left on device" in out
    assert f"free space on that filesystem (df -h {disk}/full)" in out
    assert "(failed, not recorded in status.json, exit code 5)" in res.stderr or "(failed, exit code 5)" in res.stderr


def test_a_read_only_checkpoints_dir_is_refused_by_the_preflight(tmp_path, tmpfs):  # noqa: F811
    """Issue: a read-only checkpoints/ passed the preflight and the trainer then failed with EROFS."""
    run_dir = tmp_path / "runs" / "ro"
    run_dir.mkdir(parents=True)
    (run_dir / "status.json").write_text('{"state": "interrupted"}')
    (run_dir / "checkpoints").symlink_to(tmpfs("ro-src", "size=1m", "ro"))  # a read-only volume
    before = files_under(tmp_path)
    for extra in ((), ("dry_run=true",)):
        res = run_py(f"paths.runs_root={tmp_path}/runs", f"paths.data_root={tmp_path}/data", "run_id=ro", *extra,
                     cwd=tmp_path)
        assert res.returncode == 2, res.stderr
        assert f"error: {run_dir}/checkpoints: is on a read-only filesystem" in res.stderr
        assert f"remount {run_dir}/checkpoints read-write" in res.stderr and "Traceback" not in res.stderr
        assert files_under(tmp_path) == before
