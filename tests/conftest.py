"""Shared fixtures: compose the real conf/ tree on CPU, run the real entry points."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["lium_fixtures"]  # fake_lium

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def reference_runs() -> list[dict]:
    return json.loads((DATA / "reference_runs.json").read_text())["runs"]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run with a scratch cwd so relative paths and anything written land in tmp_path."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_py(*overrides: str, cwd: Path | None = None, timeout: float = 120, env: dict | None = None):
    """The real `python run.py ...` in a subprocess (what users type)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *overrides], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))
