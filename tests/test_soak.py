"""The soak (benchmarks/soak.py) as a test: 50 random SIGKILL/SIGSTOP/SIGHUP faults against the
launcher, the trainer and a reward plugin's child, relaunches racing the frozen or dying holder."""
from __future__ import annotations

import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow


def test_fifty_faults_never_two_writers_never_lost_work(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from soak import run_soak

    r = run_soak(tmp_path, faults=50, seed=7)
    assert r["faults"] == 50, r  # the run did not outlast the faults
    assert r["epoch_regressions"] == 0, r  # never two trainers publishing for one run
    assert r["partial_loads"] == 0 and r["restarts_from_zero"] == 0, r
    assert r["bit_identical"], r
    assert r["orphans_left"] == 0, r
    assert r["resumes"] >= 5 and r["lease_epochs"] >= 5, r  # the faults really interrupted training
