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
# trainstack_dev (the fakes of Hub and Lium, the parse oracle's judge) is developer support, not in the
# wheel: tests import it from the checkout's devtools/ (a subprocess that needs it: DEVTOOLS on PYTHONPATH).
DEVTOOLS = ROOT / "devtools"
if str(DEVTOOLS) not in sys.path:
    sys.path.insert(0, str(DEVTOOLS))


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


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """A local Hugging Face Hub (trainstack_dev.fakes.hub) that the real huggingface_hub client talks to:
    HF_ENDPOINT points at it, HF_HOME is private to the test, HF_TOKEN is a per-test secret the fake
    requires for writes and private repos. Subprocesses started by the test inherit all three."""
    import secrets as _secrets

    from trainstack_dev.fakes.hub import FakeHub

    token = "hf_" + _secrets.token_hex(16)
    hub = FakeHub(token=token, log_path=str(tmp_path / "hub-requests.jsonl")).start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    yield hub
    hub.stop()


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """The tiny backend's arithmetic task, written once per session (tests/tiny)."""
    from trainstack.tiny.arithmetic import write_task

    d = tmp_path_factory.mktemp("arith")
    write_task(d)
    return d
