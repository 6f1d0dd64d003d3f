"""A run is a stored spec: resolved once, executed as stored (`trainstack exec`), whatever conf/
and the code say later. Plus the pieces that make that hold: one layout module, one launcher
registry, one backend description."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SMALL_BATCH

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def env(root: Path = ROOT) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "plugins")])}


def run_py(*args: str, cwd: Path, root: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([PY, str(root / "run.py"), *args], cwd=cwd, env=env(root), capture_output=True, text=True,
                          timeout=timeout)


def trainstack(*args: str, cwd: Path, root: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "trainstack", *args], cwd=cwd, env=env(root), capture_output=True, text=True,
                          timeout=timeout)


def events(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines() if ln.strip()]


def copy_project(dest: Path) -> Path:
    """The tracked files of this checkout (what a user's clone holds), to edit without touching ours."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    for rel in files:
        src = ROOT / rel
        if (src.is_file() or src.is_symlink()) and not rel.startswith(("tests/", "benchmarks/", "scripts/oracle")):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel, follow_symlinks=False)  # trainstack/conf stays a link to conf/
    if (ROOT / "slime" / "slime").is_dir() and not (dest / "slime").exists():  # a clone's filled submodule: the
        (dest / "slime").symlink_to(ROOT / "slime", target_is_directory=True)  # tiny backend runs slime's rollout
    return dest


def edit_conf_and_code(project: Path) -> None:
    """A conf value and a line of code that would both change the argv (and the run_id) if the run
    were recomposed."""
    env_file = project / "conf" / "env" / "arithmetic.yaml"
    text = env_file.read_text()
    assert re.search(r"^entropy_coef: ", text, re.M), text
    env_file.write_text(re.sub(r"^entropy_coef: .*$", "entropy_coef: 0.0123", text, flags=re.M))
    resolve = project / "trainstack" / "config" / "resolve.py"
    code = resolve.read_text()
    assert "    if tracking.tensorboard:\n" in code
    resolve.write_text(code.replace("    if tracking.tensorboard:\n", "    if not tracking.tensorboard:\n"))


# -------------------------------------------------------------------------------------------------
# the spec
# -------------------------------------------------------------------------------------------------
def test_spec_round_trip_and_views(tmp_path, monkeypatch):
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.run.rundir import RunDir
    from trainstack.run.spec import SPEC_VERSION, RunSpec, load

    monkeypatch.chdir(tmp_path)
    run, cmd = build_from_overrides(["env.num_rollout=7", "algo.lr=2e-3"])
    spec = RunSpec.from_run(run, cmd)
    RunDir(spec.run_dir).write_spec(spec)
    again = load(spec.run_dir)
    assert again == spec and again.spec_version == SPEC_VERSION
    assert again.slime_command().full_argv() == cmd.full_argv()
    stored = json.loads((Path(spec.run_dir) / "command.json").read_text())
    assert stored["argv"] == cmd.argv and stored["run_id"] == run.run_id
    assert again.provenance.trainstack_version and again.provenance.slime_commit == cmd.meta["slime_commit"]
    assert again.overrides == ["env.num_rollout=7", "algo.lr=2e-3"]
    assert again.args["num_rollout"] == 7 and again.resume == run.resume and again.cluster == run.cluster


def test_spec_holds_no_secret(tmp_path, monkeypatch):
    """Secrets come from the executing machine's environment: a config naming one is refused, and
    a secret in the launching shell reaches the trainer without being stored."""
    from trainstack.errors import ConfigErrors
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.run.rundir import RunDir
    from trainstack.run.spec import RunSpec

    monkeypatch.chdir(tmp_path)
    secret = "hf_SECRETVALUE123456"
    with pytest.raises(ConfigErrors) as err:
        build_from_overrides([f"+runtime_env.env_vars.HF_TOKEN={secret}"])
    assert "runtime_env.env_vars.HF_TOKEN" in err.value.render() and secret not in err.value.render()
    monkeypatch.setenv("HF_TOKEN", secret)
    run, cmd = build_from_overrides(["+runtime_env.env_vars.MY_FLAG=1"])
    spec = RunSpec.from_run(run, cmd)
    RunDir(spec.run_dir).write_spec(spec)
    assert spec.command["env"]["MY_FLAG"] == "1"
    from trainstack.run.lifecycle import trainer_env

    assert trainer_env(spec, RunDir(spec.run_dir))["HF_TOKEN"] == secret  # forwarded at run time
    for f in Path(spec.run_dir).rglob("*"):
        if f.is_file():
            assert secret not in f.read_text(errors="replace"), f


@pytest.mark.parametrize("mutation, expected", [
    (lambda d: d.update(spec_version=99), "newer trainstack"),
    (lambda d: d.pop("spec_version"), "not a trainstack run spec"),
    (lambda d: d.pop("command"), "missing or malformed"),
    (lambda d: d["resume"].update(bogus=1), "missing or malformed"),
])
def test_exec_refuses_what_it_cannot_execute(tmp_path, monkeypatch, mutation, expected):
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.run.rundir import RunDir
    from trainstack.run.spec import RunSpec

    monkeypatch.chdir(tmp_path)
    run, cmd = build_from_overrides(["env.num_rollout=2"])
    spec = RunSpec.from_run(run, cmd)
    RunDir(spec.run_dir).write_spec(spec)
    path = Path(spec.run_dir) / "spec.json"
    data = json.loads(path.read_text())
    mutation(data)
    path.write_text(json.dumps(data))
    res = trainstack("exec", run.run_id, cwd=tmp_path)
    assert res.returncode == 2 and expected in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not (Path(spec.run_dir) / "events.jsonl").exists()  # nothing ran


def test_exec_unknown_target_and_missing_spec(tmp_path):
    res = trainstack("exec", "no-such-run", cwd=tmp_path)
    assert res.returncode == 2 and "no-such-run" in res.stderr and "Traceback" not in res.stderr
    old = tmp_path / "runs" / "old-run"
    old.mkdir(parents=True)
    (old / "status.json").write_text("{}")  # a run dir from before specs existed
    res = trainstack("exec", "old-run", cwd=tmp_path)
    assert res.returncode == 2 and "no stored spec" in res.stderr and "run_id=old-run" in res.stderr


# -------------------------------------------------------------------------------------------------
# exec: SIGKILL, then the stored run resumes; conf and code edits change nothing
# -------------------------------------------------------------------------------------------------
def _wait_for_checkpoint(run_dir: Path, at_least: int, proc: subprocess.Popen, timeout: float = 120) -> int:
    tracker = run_dir / "checkpoints" / "latest_checkpointed_iteration.txt"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            n = int(tracker.read_text().strip())
            if n >= at_least:
                return n
        except (OSError, ValueError):
            pass
        assert proc.poll() is None, "the run ended before it was killed"
        time.sleep(0.1)
    raise AssertionError("no checkpoint")


@pytest.mark.slow
def test_exec_after_sigkill_resumes_the_stored_run_despite_edits(tmp_path):
    project = copy_project(tmp_path / "project")
    work = tmp_path / "work"
    work.mkdir()
    overrides = ["env.num_rollout=100", "args.save_interval=2", "run_id=stored", *SMALL_BATCH]
    launcher = subprocess.Popen([PY, str(project / "run.py"), *overrides], cwd=work, env=env(project),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    run_dir = work / "runs" / "stored"
    killed_at = _wait_for_checkpoint(run_dir, 4, launcher)
    os.killpg(launcher.pid, signal.SIGKILL)  # launcher and trainer, no goodbye
    launcher.wait()
    stored_argv = json.loads((run_dir / "command.json").read_text())["argv"]

    edit_conf_and_code(project)
    recomposed = json.loads(subprocess.run([PY, "-m", "trainstack", "render", *overrides], cwd=work, env=env(project),
                                           capture_output=True, text=True, check=True).stdout)["argv"]
    assert recomposed != stored_argv  # the edits would change the run if it were recomposed

    res = trainstack("exec", "stored", cwd=work, root=project)
    assert res.returncode == 0, res.stderr[-2000:]
    ev = events(run_dir)
    resume = [e for e in ev if e["event"] == "resume"]
    assert [e["event"] for e in ev].count("launch") == 1 and len(resume) == 1, ev
    assert resume[0]["from_rollout"] >= killed_at + 1
    assert resume[0]["argv"][-len(stored_argv):] == stored_argv  # exactly the stored command ran
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    assert (run_dir / "checkpoints" / "iter_0000099" / "meta.json").is_file()


# -------------------------------------------------------------------------------------------------
# launchers: one interface, one registry
# -------------------------------------------------------------------------------------------------
def test_launcher_names_come_from_the_registry():
    from trainstack import registry
    from trainstack.launch.base import Launcher
    from trainstack.config.schema import ClusterSpec

    assert ClusterSpec.CHOICES["launcher"] == registry.names()
    for name in registry.names():
        launcher = registry.get(name)
        assert isinstance(launcher, Launcher) and launcher.name == name


def test_unregistered_launcher_refused(tmp_path):
    res = run_py("cluster.launcher=nope", "dry_run=true", cwd=tmp_path)
    assert res.returncode == 2 and "cluster.launcher" in res.stderr and "local" in res.stderr
    assert "Traceback" not in res.stderr


def test_slurm_sweep_under_the_local_launcher_is_refused(tmp_path):
    res = run_py("-m", "cluster.launcher=slurm", "algo.lr=1e-3,2e-3", "hydra.sweep.dir=sw", cwd=tmp_path)
    assert res.returncode == 2 and "hydra/launcher=slurm" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "runs").exists()  # nothing was written, nothing submitted


# -------------------------------------------------------------------------------------------------
# one owner of the run directory's names; one backend description
# -------------------------------------------------------------------------------------------------
def test_run_dir_file_names_live_in_one_module():
    from trainstack.storage import layout

    names = [v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str) and "." in v]
    assert {"spec.json", "command.json", "events.jsonl", "sweep.json", "latest_checkpointed_iteration.txt"} <= set(names)
    offenders = []
    for path in list((ROOT / "trainstack").rglob("*.py")) + list((ROOT / "plugins").rglob("*.py")):
        if path == ROOT / "trainstack" / "storage" / "layout.py":
            continue
        text = path.read_text()
        offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if f'"{n}"' in text or f"'{n}'" in text]
    assert not offenders, offenders


def test_tiny_capabilities_are_one_object_and_every_estimator_validates(tmp_path, monkeypatch):
    from trainstack.rules import validate
    from trainstack.config.backends import TINY
    from trainstack.errors import ConfigErrors
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.preflight.checks import preflight
    from trainstack.tiny import flags

    assert validate.TINY_CAPABILITIES is flags.CAPABILITIES is TINY.capabilities
    monkeypatch.chdir(tmp_path)
    for est in TINY.capabilities.estimators:
        run, cmd = build_from_overrides([f"algo.advantage_estimator={est}", "algo.normalize_advantages=true"])
        preflight(run, cmd, launching=False)  # the trainer's own parse and checks agree
    with pytest.raises(ConfigErrors, match="tiny CPU trainer implements"):
        build_from_overrides(["algo.advantage_estimator=ppo"])
