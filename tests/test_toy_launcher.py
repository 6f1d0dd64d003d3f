"""docs/launchers.md's walkthrough, run as written: a launcher in a package of its own (a module and
a `*.dist-info/entry_points.txt` in the `trainstack.launchers` group, on PYTHONPATH), then every
command the doc shows. The core names no backend: `trainstack status | cancel | logs` and sweeps
(in-process, and through the one shared Hydra sweep plugin, `hydra/launcher=toy`) ask the launcher."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

DOC = ROOT / "docs" / "launchers.md"


def doc_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.fixture(scope="module")
def toy_pkg(tmp_path_factory) -> Path:
    """The doc's module and entry point, as an installed distribution on a path of its own."""
    code = next(b for b in doc_blocks("python") if b.startswith("# toy_launcher/__init__.py"))
    toml = next(b for b in doc_blocks("toml") if '"trainstack.launchers"' in b)
    name, _, target = toml.splitlines()[1].partition("=")
    root = tmp_path_factory.mktemp("toypkg")
    (root / "toy_launcher").mkdir()
    (root / "toy_launcher" / "__init__.py").write_text(code)
    info = root / "toy_launcher-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-launcher\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[trainstack.launchers]\n{name.strip()} = {target.strip().strip(chr(34))}\n")
    return root


@pytest.fixture
def work(tmp_path, toy_pkg):
    yield tmp_path
    for job in tmp_path.rglob("toy.json"):  # nothing left running
        try:
            os.killpg(json.loads(job.read_text())["pid"], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def env(toy_pkg: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(toy_pkg), str(ROOT)]), "COLUMNS": "300"}


def sh(line: str, cwd: Path, toy_pkg: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """A doc command: `python run.py ...` / `trainstack ...` with this interpreter."""
    argv = shlex.split(line)
    if argv[0] == "python":
        argv = [sys.executable, str(ROOT / argv[1]), *argv[2:]]
    elif argv[0] == "trainstack":
        argv = [sys.executable, "-m", "trainstack", *argv[1:]]
    return subprocess.run(argv, cwd=cwd, env=env(toy_pkg), capture_output=True, text=True, timeout=timeout)


def doc_commands() -> list[str]:
    return [ln.strip() for b in doc_blocks("shell") for ln in b.splitlines()
            if ln.strip() and not ln.startswith("#") and "toy" in ln]


def wait_until(what, timeout: float = 120.0, every: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def pid_of(run_dir: Path) -> int:
    return json.loads((run_dir / "toy.json").read_text())["pid"]


def alive(pid: int) -> bool:
    from trainstack.fencing.lease import pid_alive

    return pid_alive(pid)


def test_the_entry_point_is_found_and_imported_only_when_used(toy_pkg, tmp_path):
    code = ("import sys\nimport trainstack.config.schema as s\nfrom trainstack import registry\n"
            "print(sorted(registry.names()), 'toy' in s.ClusterSpec.CHOICES['launcher'], 'toy_launcher' in sys.modules)\n"
            "registry.get('toy')\nprint('toy_launcher' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env(toy_pkg), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["['lium', 'local', 'ray_job', 'slurm', 'toy'] True False", "True"], r.stdout


def test_its_settings_are_checked_at_compose_time(work, toy_pkg):
    for bad, message in (("cluster.toy.queu=fast", "did you mean 'cluster.toy.queue'"),
                         ("cluster.toy.nice=40", "cluster.toy.nice: must be 0..19"),
                         ("cluster.toy.nice=low", "cluster.toy.nice: expected int")):
        r = sh(f"python run.py cluster.launcher=toy {bad} dry_run=true", work, toy_pkg)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (bad, r.stderr)
    r = sh("python run.py -m hydra/launcher=toy hydra.launcher.queu=x algo.lr=1e-3,2e-3 hydra.sweep.dir=s", work, toy_pkg)
    assert r.returncode == 2 and "hydra.launcher.queu: unknown key" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (work / "s").exists() and not (work / "runs").exists()
    shown = sh("python run.py cluster.launcher=toy cluster.toy.queue=fast --cfg job", work, toy_pkg)
    assert shown.returncode == 0 and "toy:\n    queue: fast" in shown.stdout, shown.stdout


@pytest.mark.slow
def test_doc_walkthrough_submit_status_logs_cancel_and_sweeps(work, toy_pkg):
    cmds = doc_commands()
    submit, status, logs, cancel, sweep, sweep_status, plugin_sweep, plugin_status = cmds
    assert submit.startswith("python run.py cluster.launcher=toy") and sweep.startswith("python run.py -m")

    r = sh(submit, work, toy_pkg)
    assert r.returncode == 0 and "toy: toy-demo started as" in r.stderr, r.stderr
    run_dir = work / "runs" / "toy-demo"
    pid = pid_of(run_dir)
    assert json.loads((run_dir / "spec.json").read_text())["launcher"] == "toy"
    wait_until(lambda: '"rollout/step"' in ((run_dir / "metrics.jsonl").read_text()
                                             if (run_dir / "metrics.jsonl").is_file() else ""))

    r = sh(status, work, toy_pkg)  # the launcher fills its column: no "scancel", no SLURM
    assert r.returncode == 0 and "RUNNING (fast)" in r.stdout and str(pid) in r.stdout, r.stdout + r.stderr
    r = sh(logs, work, toy_pkg)  # from where the launcher keeps it
    assert r.returncode == 0 and "toy-demo" in r.stdout, r.stdout + r.stderr
    r = sh(cancel, work, toy_pkg)
    assert r.returncode == 0 and f"toy: stopping toy-demo ({pid})" in r.stderr and "scancel" not in r.stderr, r.stderr
    wait_until(lambda: not alive(pid), timeout=90)
    row = json.loads(sh(status + " --json", work, toy_pkg).stdout)[0]
    assert row["state"] == "interrupted" and row["scheduler"] == "DONE (fast)" and row["launcher"] == "toy", row

    for line, stat, queue in ((sweep, sweep_status, "default"), (plugin_sweep, plugin_status, "night")):
        r = sh(line, work, toy_pkg)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        sweep_dir = work / shlex.split(line)[-1].split("=", 1)[1]
        manifest = json.loads((sweep_dir / "sweep.json").read_text())
        assert manifest["scheduler"] == "toy" and len(manifest["runs"]) == 2, manifest
        dirs = [Path(x["run_dir"]) for x in manifest["runs"]]
        assert all(json.loads((d / "toy.json").read_text())["queue"] == queue for d in dirs)
        for d in dirs:
            wait_until(lambda d=d: not alive(pid_of(d)), timeout=120)
        r = sh(stat, work, toy_pkg)
        assert r.returncode == 0 and all(x["run_id"] in r.stdout for x in manifest["runs"]), r.stdout + r.stderr
        rows = json.loads(sh(stat + " --json", work, toy_pkg).stdout)
        assert [x["state"] for x in rows] == ["finished", "finished"], rows
