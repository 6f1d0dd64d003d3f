"""pytest setup for the tiny-backend tests: the ``slow`` marker and the arithmetic data fixture."""
from __future__ import annotations

from pathlib import Path

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: tiny-trainer end-to-end runs (seconds to a minute each)")


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    from trainstack.tiny.arithmetic import write_task

    d = tmp_path_factory.mktemp("arith")
    write_task(d)
    return d


