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
# pytest-xdist's workers carry a terminal width (COLUMNS) that the parent's terminal had; trainstack folds
# its output to COLUMNS, so a test sees folded lines only where it asks for them (env={"COLUMNS": ...}).
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)
DATA = Path(__file__).resolve().parent / "data"
# trainstack_dev (the fakes of Hub and Lium, the parse oracle's judge) is developer support, not in the
# wheel: tests import it from the checkout's devtools/ (a subprocess that needs it: DEVTOOLS on PYTHONPATH).
DEVTOOLS = ROOT / "devtools"
if str(DEVTOOLS) not in sys.path:
    sys.path.insert(0, str(DEVTOOLS))


@pytest.fixture(autouse=True)
def _no_hydra_config_carried_over():
    """Hydra's HydraConfig is a process-wide singleton that GlobalHydra.clear() leaves set: a test that sets a
    sweep's config would make the next in-process build on the same worker a point of that sweep (its W&B group
    the sweep's name). Each test starts and ends without one, as a fresh process does."""
    yield
    hc = sys.modules.get("hydra.core.hydra_config")
    if hc is not None:
        hc.HydraConfig.instance().cfg = None


@pytest.fixture(scope="session")
def reference_runs() -> list[dict]:
    return json.loads((DATA / "reference_runs.json").read_text())["runs"]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run with a scratch cwd so relative paths and anything written land in tmp_path."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# A rollout of the CPU default is 16 prompts x 16 samples: about 0.3 s of slime's per-sample code on 2 cores.
# Tests of a run's lifecycle (kills, resumes, launchers, pods) do not test learning: 4 x 8 samples and one
# optimizer step a rollout train about 4x faster through the same code. Tests of learning, and the
# documented commands, keep the default.
SMALL_BATCH = ("env.rollout_batch_size=4", "env.n_samples_per_prompt=8", "env.global_batch_size=32")


def run_py(*overrides: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None):
    """The real `python run.py ...` in a subprocess (what users type)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *overrides], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=timeout, env=full_env)


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def _fake_hub(tmp_path, monkeypatch, xet: bool):
    """A local Hugging Face Hub (trainstack_dev.fakes.hub) that the real huggingface_hub client talks to:
    HF_ENDPOINT points at it, HF_HOME is private to the test, HF_TOKEN is a per-test secret the fake
    requires for writes and private repos. Subprocesses started by the test inherit all of them. The
    fake serves both large-file paths, as the Hub does; `xet` picks the one the client takes."""
    import secrets as _secrets

    from huggingface_hub import constants as hf_constants
    from trainstack_dev.fakes.hub import FakeHub

    token = "hf_" + _secrets.token_hex(16)
    hub = FakeHub(token=token, log_path=str(tmp_path / "hub-requests.jsonl")).start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # hf_xet's chunk and shard caches too
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "0" if xet else "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", not xet)  # read once, at import
    return hub


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """The fake Hub, with the client on the Git LFS path (`HF_HUB_DISABLE_XET=1`, docs/hub.md)."""
    hub = _fake_hub(tmp_path, monkeypatch, xet=False)
    yield hub
    hub.stop()


@pytest.fixture
def fake_hub_xet(tmp_path, monkeypatch):
    """The fake Hub, with the client on its default path, Xet (hf_xet against the fake's CAS)."""
    hub = _fake_hub(tmp_path, monkeypatch, xet=True)
    yield hub
    hub.stop()


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """The tiny backend's arithmetic task, written once per session (tests/tiny)."""
    from trainstack.tiny.arithmetic import write_task

    d = tmp_path_factory.mktemp("arith")
    write_task(d)
    return d


# ------------------------------------------------------------------------------------------
# pytest-xdist (`make test` runs `-n 3 --dist loadgroup`): tests that share something machine-wide
# run on one worker, one after another. Everything else is parallel-safe: each worker is its own
# process (cwd, environment, in-process fakes), scratch dirs come from tmp_path, servers bind
# ephemeral ports, Ray heads get their own ports and temp dirs.
# ------------------------------------------------------------------------------------------
XDIST_FILE_GROUPS = {
    "test_slurm.py": "slurm",  # the one SLURM cluster: a test takes it down and up again
    "test_ray_job.py": "ray",  # Ray heads: 2 cores do not start two in time
    "test_lium.py": "lium", "test_fake_lium.py": "lium", "test_commander.py": "lium",  # fake Lium pods
    "test_soak.py": "soak",  # timing-sensitive fault injection: one soak at a time
}


def xdist_group_of(item: pytest.Item) -> str | None:
    """The group a test must share a worker with, or None (free to run anywhere)."""
    path = Path(str(item.fspath))
    fixtures = set(getattr(item, "fixturenames", ()))
    if "cluster_up" in fixtures or "slurm" in item.name.lower() and path.name == "test_hub_runs.py":
        return "slurm"
    if "fake_lium" in fixtures:
        return "lium"
    params = item.callspec.params if hasattr(item, "callspec") else {}
    if path.name == "test_docs_examples.py" and "doc" in params:
        if getattr(item, "originalname", "") == "test_a_doc_can_follow_the_readme":
            return "docs-README.md"  # in the README's walk directory, after its commands
        if params.get("cmd") in getattr(item.module, "INDEPENDENT", ()):  # type: ignore[attr-defined]
            return None
        return f"docs-{params['doc']}"  # each doc walked alone, in its own directory: one worker, in order
    return XDIST_FILE_GROUPS.get(path.name)


def pytest_itemcollected(item):
    """The group as a marker while collecting, before xdist's pytest_collection_modifyitems reads the
    markers into the node ids that `--dist loadgroup` schedules by."""
    group = xdist_group_of(item)
    if group is not None:
        item.add_marker(pytest.mark.xdist_group(group))


LONG_GROUPS = ("lium", "docs", "slurm", "soak", "ray")  # the minutes-long shared groups, longest first


def _schedule_rank(item: pytest.Item) -> tuple[int, int]:
    marker = item.get_closest_marker("xdist_group")  # set by pytest_itemcollected
    group = marker.args[0] if marker and marker.args else None
    if group is not None and group.startswith("docs-"):
        group = "docs"
    if group in LONG_GROUPS:
        return 0, LONG_GROUPS.index(group)
    return (1, 0) if item.get_closest_marker("slow") else (2, 0)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """What xdist's worker does for `--dist loadgroup`: a grouped test's node id gets `@<group>`, the
    scope the scheduler sends to one worker. xdist 3.8's own hook sets `item._nodeid`, which pytest 9
    no longer reads (node ids are `item._id`), so every test ran wherever it was sent; done here,
    once, for either pytest."""
    if not getattr(config.option, "loadgroup", False):
        return
    # Longest work first, so the run does not end on one worker finishing a long group while the others
    # idle: the shared groups (minutes each), then the other slow tests, then the rest. The scheduler
    # hands out multi-test groups by size first and everything else in this order; a stable sort keeps
    # each group's own order (the docs walk, test_slurm's last test).
    items[:] = sorted(items, key=_schedule_rank)
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if not names or item.nodeid.endswith(suffix):
            continue
        if hasattr(item, "_id"):
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(item.nodeid + suffix)
        else:
            item._nodeid = item.nodeid + suffix
