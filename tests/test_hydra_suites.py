"""Hydra's own launcher test suites (`hydra.test_utils.launcher_common_tests`), run as hydra-submitit-launcher
and hydra-joblib-launcher run them in their tests, against the launcher that runs Hydra task functions:
`trainstack_local` (trainstack's default, in-process). It runs any Hydra app's task function as Hydra's basic
launcher does: 20 of 20 pass. (`hydra/launcher=local|ray_job|slurm|lium` submit trainstack runs, not task
functions: what they keep of Hydra's conventions is stated in tests/test_sweep_results.py.)"""
from __future__ import annotations

import pytest
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite


@pytest.fixture(autouse=True)
def hydra_compat_version_base(monkeypatch):
    """The suites are written for an app that names no version_base (Hydra's 1.1 defaults: each job runs in its
    own output dir); a trainstack run earlier in this test process (`hydra.main(version_base="1.3")`) set 1.3."""
    from hydra.version import VersionBase, __compat_version__

    monkeypatch.setattr(VersionBase.instance(), "version_base", __compat_version__)


@pytest.mark.parametrize("launcher_name, overrides", [("trainstack_local", [])])
class TestTrainstackLocalLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [pytest.param(
    {}, ["-m", "hydra/launcher=trainstack_local", "hydra/hydra_logging=disabled", "hydra/job_logging=disabled"],
    id="trainstack_local")])
class TestTrainstackLocalLauncherIntegration(IntegrationTestSuite):
    pass
