"""The soak (benchmarks/soak.py) as a test: its short mode, judged. Random SIGKILL/SIGSTOP/SIGHUP faults
against the launcher, the trainer and a reward plugin's child, and the storage faults (a deleted
lease.json, a full disk, a stalled tracker rename), relaunches racing the frozen or dying holder: 8
faults in 80 rollouts, half of them storage faults. This is also the benchmark's short-mode check
(tests/test_benchmarks.py leaves soak.py to this test). The full soak (50 faults, 600 rollouts) is
`python benchmarks/soak.py`; its figures are in docs/benchmarks.md."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow


def test_faults_never_two_writers_never_lost_work_never_a_secret(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from soak import STORAGE_FAULTS

    out = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINSTACK_BENCH_OUT": str(out), "WANDB_API_KEY": ""}
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--quick"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    r = json.loads((out / "soak.json").read_text())
    assert r["context"]["quick"] is True and "--quick" in r["context"]["command"]  # the benchmark's short mode
    assert r["faults"] == 8, r  # the run did not outlast the faults
    assert sum(bool(r["faults_by_kind"].get(k)) for k in STORAGE_FAULTS) >= 2, r  # storage faults struck
    assert r["epoch_regressions"] == 0 and r["rollbacks"] == 0, r  # never two writers, never back
    assert r["repeated_epochs"] == 0, r  # a deleted lease.json never hands out an epoch twice
    assert r["partial_loads"] == 0 and r["restarts_from_zero"] == 0, r
    assert r["launcher_tracebacks"] == 0, r  # a full disk is one message, never a traceback
    assert r["secret_hits"] == [] and r["files_scanned"] > 50, r
    assert r["bit_identical"], r
    assert r["orphans_left"] == 0, r
    assert r["resumes"] >= 2 and r["lease_epochs"] >= 3, r  # the faults really interrupted training
