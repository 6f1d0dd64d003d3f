"""SLURM: sbatch parameters from `cluster` (unit), and on a real local cluster (scripts/slurm-local.sh up):
a wait=false sweep, status, preemption -> requeue -> resume with identical weights, singleton + lease
fences, the multi-node Ray bootstrap (two tasks on one node), Optuna with wait=true, cancel.

The cluster tests skip without `sbatch`, without root or when slurmctld does not answer;
TRAINSTACK_REQUIRE_SLURM=1 (CI) turns those skips into failures.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SMALL_BATCH, files_under
from trainstack.launch.slurm import SlurmSettings, executor_params, merge_dependency, render_sbatch
from trainstack.config.schema import ClusterSpec

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def _slurm_problem() -> str | None:
    if shutil.which("sbatch") is None:
        return "no sbatch (run scripts/slurm-local.sh up as root)"
    if os.geteuid() != 0:
        return "not root"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as ex:
        return f"scontrol ping failed: {ex}"
    if "UP" not in ping.stdout:
        return "slurmctld is not up (scripts/slurm-local.sh up)"
    return None


PROBLEM = _slurm_problem()
if PROBLEM and os.environ.get("TRAINSTACK_REQUIRE_SLURM") == "1":
    PROBLEM_FATAL = PROBLEM
    PROBLEM = None
else:
    PROBLEM_FATAL = None
slurm = pytest.mark.skipif(PROBLEM is not None, reason=f"SLURM: {PROBLEM}")


@pytest.fixture
def cluster_up(tmp_path):
    if PROBLEM_FATAL:
        pytest.fail(f"TRAINSTACK_REQUIRE_SLURM=1 but {PROBLEM_FATAL}")
    # write the task data once, before jobs start in parallel: arithmetic.prepare's fixed tmp name
    # lets two concurrent first writers hand a reader a half-written file
    from trainstack.tiny.arithmetic import prepare

    prepare(tmp_path / "data")


# Every command of docs/slurm.md, as the tests run it (test_docs_commands_are_tested keeps them in sync).
DOC = {
    "up": "scripts/slurm-local.sh up",
    "status_cluster": "scripts/slurm-local.sh status",
    "down": "scripts/slurm-local.sh down",
    "sweep": "python run.py -m hydra/launcher=slurm hydra.sweep.dir=sweep name=slurm-lr env.num_rollout=40 "
             "args.save_interval=1 algo.lr=1e-3,2e-3,3e-3,4e-3",
    "glob": "python run.py -m hydra/launcher=slurm hydra.launcher.dry=true 'experiment=glob(*,exclude=cpu-*)' "
            "cluster=slurm_8xh100 hydra.sweep.dir=sw",
    "gpu_dry_shared": "python run.py -m hydra/launcher=slurm hydra.launcher.dry=true experiment=qwen3-4B-grpo-dapo "
                      "cluster=slurm_8xh100 cluster.num_nodes=1,2 hydra.sweep.dir=sw",
    "gpu_dry": "python run.py -m hydra/launcher=slurm hydra.launcher.dry=true experiment=qwen3-4B-grpo-dapo "
               "cluster=slurm_8xh100 cluster.num_nodes=1,2 'run_id=qwen3-4B-grpo-dapo-${cluster.num_nodes}n' "
               "hydra.sweep.dir=sw",
    "optuna": "python run.py -m hydra/launcher=slurm hydra.launcher.wait=true hydra/sweeper=optuna "
              "hydra.sweeper.n_trials=2 hydra.sweeper.n_jobs=2 hydra.sweeper.direction=maximize env.num_rollout=3 "
              "'algo.lr=interval(0.0005,0.005)' hydra.sweep.dir=opt",
    "single": "python run.py cluster.launcher=slurm run_id=slurm-demo env.num_rollout=60 args.save_interval=1",
    "held": "python run.py -m hydra/launcher=slurm hydra.sweep.dir=held +hydra.launcher.additional_parameters.hold=true "
            "name=slurm-held env.num_rollout=3 algo.lr=1e-3,2e-3",
    "apart": "python run.py -m hydra/launcher=slurm hydra.launcher.shared_run_dirs=false hydra.sweep.dir=apart "
             "name=slurm-apart env.num_rollout=3 algo.lr=1e-3,2e-3",
    "compare_apart": "trainstack compare apart",
    "status": "trainstack status sweep",
    "status_json": "trainstack status sweep --json",
    "cancel": "trainstack cancel held",
    "bootstrap": "srun python -m trainstack.launch.slurm_job bootstrap --rendezvous DIR --timeout 90 -- python check.py",
    "bootstrap_missing": "srun python -m trainstack.launch.slurm_job bootstrap --rendezvous DIR --expect-nodes 2 "
                         "--timeout 8 -- python check.py",
}


def doc_argv(name: str, **subs: str) -> list[str]:
    argv = shlex.split(DOC[name])
    argv = [subs.get(a, a) for a in argv]
    if argv[0] == "trainstack":
        return [PY, "-m", "trainstack.cli.main", *argv[1:]]
    if argv[0].startswith("scripts/"):
        return [str(ROOT / argv[0]), *argv[1:]]
    argv = [PY if a == "python" else a for a in argv]
    return [str(ROOT / "run.py") if a == "run.py" else a for a in argv]


def run_doc(name: str, *extra: str, cwd: Path, timeout: float = 240, **subs: str) -> subprocess.CompletedProcess:
    return subprocess.run(doc_argv(name, **subs) + list(extra), cwd=cwd, env=env(), capture_output=True, text=True,
                          timeout=timeout)


def env() -> dict[str, str]:
    extra = [str(ROOT), str(ROOT / "plugins")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(extra + [p for p in [os.environ.get("PYTHONPATH")] if p])}


def run_py(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, str(ROOT / "run.py"), *args], cwd=cwd, env=env(), capture_output=True, text=True,
                          timeout=timeout)


def trainstack(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "trainstack.cli.main", *args], cwd=cwd, env=env(), capture_output=True, text=True,
                          timeout=60)


def squeue(job_ids) -> dict[str, tuple[str, str]]:
    out = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T|%r"], capture_output=True, text=True).stdout
    rows = {ln.split("|")[0]: tuple(ln.split("|")[1:3]) for ln in out.splitlines() if ln.count("|") == 2}
    return {j: rows[j] for j in job_ids if j in rows}


def job_state(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    fields = dict(t.split("=", 1) for t in out.split() if "=" in t)
    return fields.get("JobState", "UNKNOWN")


def wait_jobs_done(job_ids, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not squeue(job_ids):
            return
        time.sleep(1)
    raise AssertionError(f"jobs {job_ids} still queued after {timeout} s: {squeue(job_ids)}")


def latest_ckpt(run_dir: Path) -> int:
    try:
        return int((run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip())
    except (OSError, ValueError):
        return -1


def events(run_dir: Path) -> list[dict]:
    try:
        return [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines() if ln.strip()]
    except OSError:
        return []


# ------------------------------------------------------------------------------------------
# unit: sbatch parameters from cluster
# ------------------------------------------------------------------------------------------
def test_sbatch_parameters_from_cluster():
    cluster = ClusterSpec(name="slurm_8xh100", launcher="slurm", num_nodes=2, gpus_per_node=8)
    settings = SlurmSettings(cpus_per_node=96, mem_gb=1000, partition="gpu", account="rl", time_min=4320,
                             sbatch={"qos": "high", "exclusive": True, "dependency": "afterok:7"})
    params = executor_params(cluster, "qwen3-4B-grpo-0123abcd", settings)
    text = render_sbatch(params)
    for line in ("--job-name=qwen3-4B-grpo-0123abcd", "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:8",
                 "--cpus-per-task=96", "--mem=1000GB", "--partition=gpu", "--account=rl", "--time=4320",
                 "--qos=high", "--exclusive", "--dependency=afterok:7,singleton", "--signal=USR2@120"):
        assert f"#SBATCH {line}\n" in text, (line, text)


def test_sbatch_parameters_cpu_cluster_and_fallbacks():
    cluster = ClusterSpec(name="local_cpu", backend="tiny", launcher="slurm", accelerator="cpu", gpus_per_node=1)
    settings = SlurmSettings(time_min=7, signal_delay_s=30, cpus_per_node=2, constraint="fast")
    assert settings.max_requeues == 10
    text = render_sbatch(executor_params(cluster, "tiny-1", settings))
    assert "--gres" not in text and "--mem=" not in text and "--partition" not in text
    for line in ("--job-name=tiny-1", "--cpus-per-task=2", "--time=7", "--signal=USR2@30", "--constraint=fast",
                 "--dependency=singleton", "--nodes=1"):
        assert f"#SBATCH {line}\n" in text, (line, text)
    assert merge_dependency("singleton", True) == "singleton"
    assert merge_dependency(None, False) is None


def test_cluster_slurm_settings_are_typed_and_shown_by_cfg_job(tmp_path):
    """`cluster.slurm.<key>`: checked at compose time (key + fix, exit 2, no traceback), visible in --cfg job;
    the old top-level keys name where they moved."""
    bad = run_py("cluster=slurm_8xh100", "cluster.slurm.partitin=gpu", "cluster.slurm.time_min=soon", "dry_run=true",
                 cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert "cluster.slurm.partitin: unknown key" in bad.stderr and "did you mean 'cluster.slurm.partition'" in bad.stderr
    assert "cluster.slurm.time_min: expected int" in bad.stderr
    moved = run_py("cluster=slurm_8xh100", "cluster.partition=gpu", "dry_run=true", cwd=tmp_path)
    assert moved.returncode == 2 and "use cluster.slurm.partition" in moved.stderr, moved.stderr
    shown = run_py("cluster=slurm_8xh100", "cluster.slurm.partition=gpu", "--cfg", "job", cwd=tmp_path)
    assert shown.returncode == 0 and "  slurm:\n" in shown.stdout and "partition: gpu" in shown.stdout, shown.stdout


def test_requeue_cap(monkeypatch, tmp_path):
    """PointRunner.checkpoint requeues the same call until max_requeues (SLURM_RESTART_COUNT)."""
    import submitit

    from trainstack.launch.slurm_job import Point, PointRunner

    point = Point(run_id="r", run_dir=str(tmp_path), overrides=["a=1"], cwd=str(tmp_path), max_requeues=2)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    again = PointRunner().checkpoint(point)
    assert isinstance(again, submitit.helpers.DelayedSubmission) and again.args == (point,)
    assert isinstance(again.function, PointRunner)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert PointRunner().checkpoint(point) is None


def test_composed_slurm_cluster_dry_sweep(tmp_path):
    """`hydra/launcher=slurm` composes, validates and sizes each point from its own cluster (dry: no SLURM).
    The node count is not part of the run id: two points would be one run and one singleton job name, so
    that sweep is refused naming the key, before anything is written; with a run id per node count it works."""
    shared = run_doc("gpu_dry_shared", cwd=tmp_path)
    assert shared.returncode == 2 and "Traceback" not in shared.stderr, shared.stderr
    assert "2 points would be the same run and SLURM job" in shared.stderr and "cluster.num_nodes" in shared.stderr
    assert files_under(tmp_path) == []
    r = run_doc("gpu_dry", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert manifest["mode"] == "dry" and len(manifest["runs"]) == 2
    one, two = (m["sbatch"] for m in manifest["runs"])
    assert [m["run_id"] for m in manifest["runs"]] == ["qwen3-4B-grpo-dapo-1n", "qwen3-4B-grpo-dapo-2n"]
    assert "#SBATCH --nodes=1\n" in one and "#SBATCH --nodes=2\n" in two
    for text, m in zip((one, two), manifest["runs"]):
        assert "#SBATCH --gres=gpu:8\n" in text and "#SBATCH --cpus-per-task=96\n" in text
        assert "#SBATCH --mem=1000GB\n" in text and "#SBATCH --time=4320\n" in text
        assert f"#SBATCH --job-name={m['run_id']}\n" in text
        assert "#SBATCH --dependency=singleton\n" in text
    assert not (tmp_path / "runs").exists()  # dry: no run dirs


def _without_sbatch() -> dict[str, str]:
    """This machine as one without SLURM: a PATH holding only the virtualenv's bin (no sbatch)."""
    return {**env(), "PATH": str(Path(PY).parent)}


def test_sweep_without_slurm_is_one_message_and_nothing_is_written(tmp_path):
    for argv in (["-m", "hydra/launcher=slurm", "hydra.sweep.dir=sw", "env.num_rollout=3", "algo.lr=1e-3,2e-3"],
                 ["cluster.launcher=slurm", "env.num_rollout=3"], ["cluster.launcher=slurm", "dry_run=true"]):
        r = subprocess.run([PY, str(ROOT / "run.py"), *argv], cwd=tmp_path, env=_without_sbatch(), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 2, (argv, r.stderr)
        assert "Traceback" not in r.stderr and r.stderr.count("error: ") == 1, r.stderr
        assert "sbatch is not on PATH" in r.stderr and "hydra.launcher.dry=true" in r.stderr
        assert files_under(tmp_path) == [], argv
    dry = subprocess.run([PY, str(ROOT / "run.py"), "-m", "hydra/launcher=slurm", "hydra.launcher.dry=true",
                          "hydra.sweep.dir=sw", "algo.lr=1e-3,2e-3"], cwd=tmp_path, env=_without_sbatch(),
                         capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr  # reviewing a sweep needs no SLURM


def test_every_point_is_checked_before_anything_is_submitted(tmp_path):
    """An invalid second point stops the sweep before the first is stored or submitted (PATH without
    sbatch: even a bug here could not reach a cluster)."""
    r = subprocess.run([PY, str(ROOT / "run.py"), "-m", "hydra/launcher=slurm", "hydra.sweep.dir=sw",
                        "model.hidden_size=64,65", "env.num_rollout=3", "algo.lr=1e-3,2e-3"], cwd=tmp_path,
                       env=_without_sbatch(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("error: point ") == 2 and "model.hidden_size=65" in r.stderr  # both points with 65
    assert "sbatch" not in r.stderr  # the points' own problems first
    assert files_under(tmp_path) == []


def test_sweep_without_submitit_is_one_message(tmp_path):
    """The slurm extra not installed: a `submitit` that cannot be imported."""
    fake = tmp_path / "fake_site" / "submitit"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named submitit')\n")
    hidden = {**env(), "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake_site"), env()["PYTHONPATH"]])}
    code = ("import importlib.util, sys\n"
            "real = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda name, *a: None if name == 'submitit' else real(name, *a)\n"
            f"sys.argv = [{str(ROOT / 'run.py')!r}, '-m', 'hydra/launcher=slurm', 'hydra.launcher.dry=true', "
            "'hydra.sweep.dir=sw', 'algo.lr=1e-3,2e-3']\n"
            f"import runpy; runpy.run_path({str(ROOT / 'run.py')!r}, run_name='__main__')\n")
    r = subprocess.run([PY, "-c", code], cwd=tmp_path, env=hidden, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "error: hydra/launcher: SLURM support is not installed" in r.stderr and "trainstack[slurm]" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake_site"]


def test_experiment_glob_dry_sweep(tmp_path):
    r = run_doc("glob", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    n = len([p for p in (ROOT / "conf" / "experiment").glob("*.yaml") if not p.name.startswith("cpu-")])
    assert len(manifest["runs"]) == n and len({m["run_id"] for m in manifest["runs"]}) == n
    assert all("#SBATCH --cpus-per-task=96" in m["sbatch"] and "#SBATCH --mem=1000G" in m["sbatch"]
               for m in manifest["runs"])


def test_a_gpu_recipe_without_slurm_sizing_is_refused_or_sized_by_the_sweep(tmp_path):
    """A SLURM sweep of recipes whose cluster is local_8xh100 was sized at 1 CPU, 60 minutes and no memory for
    8 GPUs, without a word. Now refused naming both keys; sized through hydra.launcher.<key>, it passes."""
    base = [PY, str(ROOT / "run.py"), "-m", "hydra/launcher=slurm", "hydra.launcher.dry=true",
            "experiment=qwen3-4B-grpo-dapo", "algo.lr=1e-6,2e-6", "hydra.sweep.dir=sw"]
    r = subprocess.run(base, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "error: every point (2): cluster.slurm.cpus_per_node: cluster=local_8xh100 has no SLURM sizing" in r.stderr
    assert "every point (2): cluster.slurm.mem_gb" in r.stderr and not (tmp_path / "sw").exists()
    sized = subprocess.run([*base, "hydra.launcher.cpus_per_task=64", "hydra.launcher.mem_gb=500"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert sized.returncode == 0, sized.stderr
    runs = json.loads((tmp_path / "sw" / "sweep.json").read_text())["runs"]
    assert all("--cpus-per-task=64" in m["sbatch"] and "--mem=500G" in m["sbatch"] for m in runs)


# ------------------------------------------------------------------------------------------
# on the local SLURM cluster
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@slurm
def test_sweep_wait_false_status_and_preemption_resume(tmp_path, cluster_up):
    import submitit
    import torch

    n = 40
    common = ["name=slurm-lr", f"env.num_rollout={n}", "args.save_interval=1"]
    assert all(c in DOC["sweep"] for c in common)
    t0 = time.monotonic()
    r = run_doc("sweep", cwd=tmp_path)
    submit_wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert submit_wall < 30, submit_wall  # returns at once: nothing waited for the jobs
    manifest = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert manifest["submit_s"] > 0  # recorded; the speed target lives in benchmarks/slurm_submit.py
    runs = manifest["runs"]
    assert len(runs) == 4 and all(r_["job_id"] for r_ in runs)
    assert len({r_["run_id"] for r_ in runs}) == 4
    ids = [r_["job_id"] for r_ in runs]
    assert squeue(ids), "the jobs should still be queued or running when run.py returns"

    # the uninterrupted reference of point 0 (same run_id, other runs_root), on this machine
    ref = subprocess.Popen([PY, str(ROOT / "run.py"), *common, "algo.lr=1e-3", "paths.runs_root=ref"], cwd=tmp_path,
                           env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    first = Path(runs[0]["run_dir"])
    deadline = time.monotonic() + 120
    while latest_ckpt(first) < 5:
        assert time.monotonic() < deadline, "point 0 never checkpointed"
        time.sleep(0.2)
    interrupted_at = latest_ckpt(first)
    assert interrupted_at < n - 1
    submitit.SlurmJob(folder=manifest["submitit_folder"], job_id=runs[0]["job_id"])._interrupt()  # preemption

    wait_jobs_done(ids, timeout=240)
    assert ref.wait(timeout=120) == 0
    for r_ in runs:
        st = json.loads((Path(r_["run_dir"]) / "status.json").read_text())
        assert st["state"] == "finished" and st["last_checkpoint"] == n - 1, (r_["run_id"], st)
    ev = events(first)
    kinds = [e["event"] for e in ev]
    assert kinds[0] == "launch" and "signal" in kinds and "resume" in kinds, kinds
    resume = next(e for e in ev if e["event"] == "resume")
    assert resume["from_rollout"] >= interrupted_at + 1 > 1, resume
    assert kinds.count("launch") == 1  # resumed, not restarted
    ckpt = f"checkpoints/iter_{n - 1:07d}/model.pt"
    a = torch.load(first / ckpt, weights_only=False)
    b = torch.load(tmp_path / "ref" / runs[0]["run_id"] / ckpt, weights_only=False)
    differ = [k for k in a if not torch.equal(a[k], b.get(k))]
    assert a.keys() == b.keys() and not differ, f"resumed weights differ in {differ[:3]}; events {ev}"

    # trainstack status: one table for the sweep, from the manifest
    s = run_doc("status_json", cwd=tmp_path)
    assert s.returncode == 0, s.stderr
    rows = json.loads(s.stdout)
    assert [x["run_id"] for x in rows] == [r_["run_id"] for r_ in runs]
    assert {x["scheduler"] for x in rows} == {"COMPLETED"}
    assert all(x["reward"] is not None and x["last_checkpoint"] == n - 1 for x in rows)
    assert [x["varying"] for x in rows] == [["algo.lr=0.001"], ["algo.lr=0.002"], ["algo.lr=0.003"], ["algo.lr=0.004"]]
    assert rows[0]["resumed_from"] == [resume["from_rollout"]]
    table = subprocess.run(doc_argv("status"), cwd=tmp_path, env={**env(), "COLUMNS": "250"}, capture_output=True,
                           text=True, timeout=240)  # a wide terminal: every column (80 columns: tests/test_status.py)
    assert table.returncode == 0 and all(r_["run_id"] in table.stdout for r_ in runs) and "COMPLETED" in table.stdout
    by_id = trainstack("status", runs[1]["run_id"], cwd=tmp_path)
    assert by_id.returncode == 0 and runs[1]["run_id"] in by_id.stdout


@pytest.mark.slow
@slurm
def test_sbatch_refusal_is_a_scheduler_failure_not_bad_input(tmp_path, cluster_up):
    """The config composes and validates; SLURM refuses the job (no such partition): exit 6 with sbatch's
    reason, never 2 ("a problem in the run config"), no traceback."""
    from trainstack.errors import SchedulerFailure

    r = run_py("cluster.launcher=slurm", "cluster.slurm.partition=no-such-partition", "env.num_rollout=2", cwd=tmp_path)
    assert r.returncode == SchedulerFailure.exit_code == 6, r.stderr
    assert "the scheduler failed: sbatch refused" in r.stderr and "no-such-partition" in r.stderr.lower()
    assert "problem in the run config" not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
@slurm
def test_same_run_id_never_runs_twice(tmp_path, cluster_up):
    """Singleton dependency: the second job of a run_id waits; the lease is the second fence."""
    from trainstack.fencing.lease import Lease

    subs = [run_doc("single", cwd=tmp_path) for _ in range(2)]
    assert all(s.returncode == 0 for s in subs), [s.stderr for s in subs]
    run_dir = next((tmp_path / "runs").iterdir())
    ids = [s.stderr.split("as SLURM job ")[1].split()[0] for s in subs]
    assert ids[0] != ids[1]
    both_running, saw_dependency = False, False
    deadline = time.monotonic() + 180
    while (q := squeue(ids)) and time.monotonic() < deadline:
        states = [q[j][0] for j in ids if j in q]
        both_running |= states.count("RUNNING") > 1
        saw_dependency |= any(q[j][1] == "Dependency" for j in q)
        time.sleep(0.3)
    assert not q, f"jobs still queued: {q}"
    assert not both_running and saw_dependency
    kinds = [e["event"] for e in events(run_dir)]
    assert kinds.count("launch") == 1 and kinds[-1] == "finished", kinds  # the second found it finished

    # lease as the second fence: a holder elsewhere keeps the job from starting the trainer
    other = ["cluster.launcher=slurm", "env.num_rollout=61", "args.save_interval=1", "run_id=fenced"]
    lease = Lease.acquire(tmp_path / "runs" / "fenced" / "lease.json", ttl_s=600)
    try:
        s = run_py(*other, cwd=tmp_path)
        assert s.returncode == 0, s.stderr
        jid = s.stderr.split("as SLURM job ")[1].split()[0]
        wait_jobs_done([jid], timeout=120)
    finally:
        lease.release()
    log = (tmp_path / "runs" / "fenced" / "slurm" / jid / f"{jid}_0_log.err").read_text()
    assert "is already running" in log
    assert "launch" not in [e["event"] for e in events(tmp_path / "runs" / "fenced")]


@pytest.mark.slow
@slurm
def test_multinode_ray_bootstrap_two_tasks(tmp_path, cluster_up):
    check = tmp_path / "check.py"
    check.write_text("import json, os, ray\nray.init(address=os.environ['RAY_ADDRESS'], log_to_driver=False)\n"
                     "print('NODES', json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))\n")
    def sbatch(name: str, ntasks: int, doc: str) -> str:
        wrap = shlex.join(doc_argv(doc, DIR=str(tmp_path / name), **{"check.py": str(check)}))
        out = subprocess.run(["sbatch", "--parsable", f"--job-name=ts-test-{name}", "-n", str(ntasks), "-c", "1",
                              "-o", str(tmp_path / f"{name}.out"), f"--chdir={tmp_path}", "--wrap", wrap],
                             env=env(), capture_output=True, text=True, check=True)
        return out.stdout.strip().split(";")[0]

    two = sbatch("two", 2, "bootstrap")
    missing = sbatch("missing", 1, "bootstrap_missing")
    # the same bootstrap inside trainstack's submitit callable: 2 tasks = 2 "nodes", check.py as the run
    import submitit

    from trainstack.launch.slurm_job import Point, PointRunner
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.run.rundir import RunDir
    from trainstack.run.spec import RunSpec

    # a stored run whose command is check.py: the job executes it under the lifecycle with RAY_ADDRESS set
    run, cmd = build_from_overrides([f"paths.runs_root={tmp_path / 'runs'}", "run_id=ray-check"])
    spec = RunSpec.from_run(run, cmd)
    spec.command.update(entrypoint=[PY, str(check)], groups={})
    RunDir(spec.run_dir).write_spec(spec)
    ex = submitit.AutoExecutor(folder=str(tmp_path / "sub" / "%j"), cluster="slurm")
    ex.update_parameters(name="ts-test-runner", nodes=1, tasks_per_node=2, cpus_per_task=1, timeout_min=10)
    point = Point(run_id="ray-check", run_dir=spec.run_dir, overrides=[], cwd=str(tmp_path), needs_ray=True,
                  num_nodes=2, gpus_per_node=0, cpus_per_node=1, metric=None, ray_timeout_s=180)
    runner_job = ex.submit(PointRunner(), point)
    wait_jobs_done([two, missing, runner_job.job_id], timeout=420)  # 3 jobs in turn on 2 CPUs, under load
    results = runner_job.results()
    assert [r["rank"] for r in results] == [0, 1] and results[0]["code"] == 0, results
    assert '"127.0.0.2", "127.0.0.3"' in Path(runner_job.paths.stdout).read_text()
    out = (tmp_path / "two.out").read_text()
    line = next(ln for ln in out.splitlines() if ln.startswith("NODES "))
    assert json.loads(line[6:]) == ["127.0.0.2", "127.0.0.3"], out  # rank 0 head + rank 1 worker
    assert job_state(two) == "COMPLETED"
    err = (tmp_path / "missing.out").read_text()
    assert "missing node(s): rank 1 (host localhost)" in err, err
    assert job_state(missing) == "FAILED"
    for name in ("two", "missing"):  # every Ray process this job started is gone
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert f"tsray-{two if name == 'two' else missing}-" not in ps


@pytest.mark.slow
@slurm
def test_optuna_wait_true_returns_the_metric(tmp_path, cluster_up):
    r = run_doc("optuna", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    import yaml

    res = yaml.safe_load((tmp_path / "opt" / "optimization_results.yaml").read_text())
    assert isinstance(res["best_value"], float) and 0 <= res["best_value"] <= 1
    manifest = json.loads((tmp_path / "opt" / "sweep.json").read_text())
    assert len(manifest["runs"]) == 2
    bad = run_py("-m", "hydra/launcher=slurm", "hydra/sweeper=optuna", "algo.lr=interval(0.0005,0.005)",
                 cwd=tmp_path)
    assert bad.returncode == 2 and "hydra.launcher.wait" in bad.stderr


@pytest.mark.slow
@slurm
def test_run_dirs_the_submit_host_does_not_see_come_back_for_compare(tmp_path, cluster_up):
    """shared_run_dirs=false: the job writes its run dir from the spec it carries and copies the run's metrics
    and status into the submitit folder; compare on the submit host reads them there. One machine plays both
    hosts: the jobs are held while the submit host's run dirs move aside (the node sees none), and after the
    jobs the node's run dirs go and the submit host's come back (holding only what the submit host wrote)."""
    r = run_doc("apart", "+hydra.launcher.additional_parameters.hold=true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    runs = json.loads((tmp_path / "apart" / "sweep.json").read_text())["runs"]
    submit_host = tmp_path / "submit-host"
    submit_host.mkdir()
    for run in runs:
        shutil.move(run["run_dir"], submit_host / run["run_id"])
    subprocess.run(["scontrol", "release", *[x["job_id"] for x in runs]], check=True, capture_output=True)
    wait_jobs_done([x["job_id"] for x in runs], timeout=180)
    for run in runs:
        node = Path(run["run_dir"])
        assert (node / "metrics.jsonl").is_file() and (node / "spec.json").is_file(), files_under(node)
        shutil.rmtree(node)
        shutil.move(submit_host / run["run_id"], node)
        assert not (node / "metrics.jsonl").exists()
    cmp = run_doc("compare_apart", "--json", cwd=tmp_path)
    assert cmp.returncode == 0, cmp.stderr
    rows = json.loads(cmp.stdout)["rows"]
    assert [(x["status"], x["rollouts"]) for x in rows] == [("finished", 3), ("finished", 3)], rows
    assert all(x["metrics"]["rollout/raw_reward"]["final_step"] == 2 for x in rows)
    bad = run_py("-m", "hydra/launcher=slurm", "hydra.launcher.dry=true", "hydra.launcher.shared_run_dirs=false",
                 "experiment=qwen3-4B-grpo-dapo", "cluster=slurm_8xh100", "cluster.num_nodes=2", cwd=tmp_path)
    assert bad.returncode == 2 and "cluster.slurm.shared_run_dirs" in bad.stderr, bad.stderr


@pytest.mark.slow
@slurm
def test_array_mode_one_sbatch(tmp_path, cluster_up):
    """hydra.launcher.array=true: one sbatch array for the sweep; the runs still finish and show in status."""
    r = run_py("-m", "hydra/launcher=slurm", "hydra.launcher.array=true", "hydra.sweep.dir=arr", "env.num_rollout=3",
               "algo.lr=1e-3,2e-3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "arr" / "sweep.json").read_text())
    ids = [x["job_id"] for x in manifest["runs"]]
    assert manifest["mode"] == "array" and len({i.split("_")[0] for i in ids}) == 1 and len(set(ids)) == 2, ids
    wait_jobs_done(ids, timeout=120)
    rows = json.loads(trainstack("status", "arr", "--json", cwd=tmp_path).stdout)
    assert [x["state"] for x in rows] == ["finished", "finished"]
    assert [x["scheduler"] for x in rows] == ["COMPLETED", "COMPLETED"], rows


@pytest.mark.slow
@slurm
def test_cancel_a_sweep(tmp_path, cluster_up):
    """A held sweep: its pending runs have their specs on disk, so status, compare and diff see them; then cancel."""
    r = run_doc("held", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    runs = json.loads((tmp_path / "held" / "sweep.json").read_text())["runs"]
    ids = [x["job_id"] for x in runs]
    assert {s for s, _ in squeue(ids).values()} == {"PENDING"}
    rows = json.loads(trainstack("status", "held", "--json", cwd=tmp_path).stdout)
    assert [(x["state"], x["scheduler"]) for x in rows] == [("submitted", "PENDING")] * 2, rows
    assert all((Path(x["run_dir"]) / "spec.json").is_file() for x in runs)
    cmp_ = json.loads(trainstack("compare", "held", "--json", cwd=tmp_path).stdout)
    assert json.dumps(cmp_).count(runs[0]["run_id"]) >= 1 and runs[1]["run_id"] in json.dumps(cmp_)
    d = trainstack("diff", runs[0]["run_dir"], runs[1]["run_dir"], cwd=tmp_path)
    assert d.returncode == 1 and "algo.lr" in d.stdout and "--lr" in d.stdout, d.stdout + d.stderr
    c = run_doc("cancel", cwd=tmp_path)
    assert c.returncode == 0, c.stderr
    wait_jobs_done(ids, timeout=30)
    assert {job_state(j) for j in ids} == {"CANCELLED"}


@pytest.mark.slow
@slurm
def test_requeued_job_executes_the_stored_spec(tmp_path, cluster_up):
    """Submit a sweep, change a conf file and a line of code, requeue a job: it executes exactly the
    argv stored at submit time (command.json), under the same run_id."""
    import submitit
    from test_run_spec import copy_project, edit_conf_and_code

    project = copy_project(tmp_path / "project")
    work = tmp_path / "work"
    work.mkdir()
    from trainstack.tiny.arithmetic import prepare

    prepare(work / "data")
    penv = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project), str(project / "plugins")])}
    point = ["env.num_rollout=100", "args.save_interval=1", *SMALL_BATCH]
    r = subprocess.run([PY, str(project / "run.py"), "-m", "hydra/launcher=slurm", "hydra.sweep.dir=sw", *point,
                        "algo.lr=1e-3,2e-3"], cwd=work, env=penv, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((work / "sw" / "sweep.json").read_text())
    runs = manifest["runs"]
    first = Path(runs[0]["run_dir"])
    stored = [json.loads((Path(x["run_dir"]) / "command.json").read_text())["argv"] for x in runs]
    deadline = time.monotonic() + 120
    while latest_ckpt(first) < 3:
        assert time.monotonic() < deadline, "point 0 never checkpointed"
        time.sleep(0.2)

    edit_conf_and_code(project)
    recomposed = json.loads(subprocess.run([PY, "-m", "trainstack", "render", *point, "algo.lr=1e-3"], cwd=work,
                                           env=penv, capture_output=True, text=True, check=True).stdout)
    assert recomposed["argv"] != stored[0] and recomposed["run_id"] != runs[0]["run_id"]  # the edits matter
    submitit.SlurmJob(folder=manifest["submitit_folder"], job_id=runs[0]["job_id"])._interrupt()  # requeue

    wait_jobs_done([x["job_id"] for x in runs], timeout=300)
    for x, argv in zip(runs, stored):
        run_dir = Path(x["run_dir"])
        started = [e for e in events(run_dir) if e["event"] in ("launch", "resume")]
        assert started and all(e["argv"][-len(argv):] == argv for e in started), started
        status = json.loads((run_dir / "status.json").read_text())
        assert status["state"] == "finished" and status["run_id"] == x["run_id"], status
    assert [e["event"] for e in events(first)].count("resume") >= 1  # point 0 was requeued and resumed
    assert sorted(p.name for p in (work / "runs").iterdir()) == sorted(x["run_id"] for x in runs)


def test_slurm_launcher_fields_reach_sbatch_or_are_refused(tmp_path):
    """hydra.launcher.<key> of hydra/launcher=slurm is a SlurmSettings field (one declaration of its default),
    an alias with hydra-submitit-launcher's spelling, or refused naming the key that decides it."""
    import dataclasses

    from trainstack.launch.slurm import SBATCH_PASSTHROUGH, SlurmLauncher

    fields = {f.name for f in dataclasses.fields(SlurmSettings)}
    assert set(SBATCH_PASSTHROUGH) <= fields and set(SlurmLauncher.hydra_aliases.values()) <= fields
    FROM_CLUSTER = SlurmLauncher.hydra_refused
    values = {"qos": "high", "comment": "c1", "constraint": "h100", "exclude": "node7", "gres": "gpu:8",
              "cpus_per_gpu": 4, "gpus_per_task": 8, "mem_per_gpu": "80G", "mem_per_cpu": "4G",
              "srun_args": ["--cpu-bind=none"], "stderr_to_stdout": True}
    assert set(values) == set(SBATCH_PASSTHROUGH)
    args = [f"+hydra.launcher.{k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in values.items()]
    r = run_py("-m", "hydra/launcher=slurm", "hydra.launcher.dry=true", "hydra.sweep.dir=sw", "algo.lr=1e-3",
               *[a.lstrip("+") for a in args], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    sbatch = json.loads((tmp_path / "sw" / "sweep.json").read_text())["runs"][0]["sbatch"]
    for line in ("--qos=high", "--comment=c1", "--constraint=h100", "--exclude=node7", "--gres=gpu:8",
                 "--cpus-per-gpu=4", "--gpus-per-task=8", "--mem-per-gpu=80G", "--mem-per-cpu=4G", "--cpu-bind=none"):
        assert line in sbatch, (line, sbatch)
    for key in FROM_CLUSTER:
        r = run_py("-m", "hydra/launcher=slurm", "hydra.launcher.dry=true", "hydra.sweep.dir=sw2", "algo.lr=1e-3",
                   f"hydra.launcher.{key}={'x' if key == 'name' else 2}", cwd=tmp_path)
        assert r.returncode == 2 and f"hydra.launcher.{key}" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_no_plugin_warning_without_the_slurm_extra(tmp_path):
    """Hydra scans every hydra_plugins module; trainstack's must not need hydra-submitit-launcher."""
    code = ("import sys, runpy\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.startswith(('hydra_plugins.hydra_submitit_launcher', 'submitit')):\n"
            "            raise ImportError('blocked: ' + name)\n"
            "sys.meta_path.insert(0, Block())\n"
            f"sys.argv = [{str(ROOT / 'run.py')!r}, 'dry_run=true']\n"
            f"runpy.run_path({str(ROOT / 'run.py')!r}, run_name='__main__')\n")
    r = subprocess.run([PY, "-c", code], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "trainstack_launchers" not in r.stderr and "Error importing" not in r.stderr, r.stderr


def test_docs_commands_are_tested():
    """Every command in docs/slurm.md's bash blocks is one the tests run (DOC)."""
    text = (ROOT / "docs" / "slurm.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    lines = [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert lines and set(lines) <= set(DOC.values()), sorted(set(lines) - set(DOC.values()))
    assert set(DOC.values()) <= set(lines), sorted(set(DOC.values()) - set(lines))


@pytest.mark.slow
@slurm
def test_zz_slurm_local_script_idempotent_and_down_up(tmp_path, cluster_up):
    """scripts/slurm-local.sh: status, `up` when up (idempotent), `down` by pid files, `up` again."""
    st = run_doc("status_cluster", cwd=tmp_path, timeout=60)
    assert st.returncode == 0 and "slurmctld: running" in st.stdout, st.stdout + st.stderr
    t0 = time.monotonic()
    up = run_doc("up", cwd=tmp_path, timeout=300)
    assert up.returncode == 0 and time.monotonic() - t0 < 15, up.stderr
    down = run_doc("down", cwd=tmp_path, timeout=60)
    assert down.returncode == 0, down.stderr
    st = run_doc("status_cluster", cwd=tmp_path, timeout=60)
    assert st.returncode != 0 and "slurmctld: stopped" in st.stdout and "slurmd: stopped" in st.stdout
    up = run_doc("up", cwd=tmp_path, timeout=300)
    assert up.returncode == 0, up.stderr
    assert _slurm_problem() is None


@settings(max_examples=120, deadline=None)
@given(accel=st.sampled_from(["gpu", "cpu"]), gpus=st.integers(0, 8),
       cpus=st.sampled_from([None, 32, "cpus_per_gpu", "sbatch:cpus-per-task"]),
       mem=st.sampled_from([None, 500, "mem_per_gpu", "sbatch:mem"]))
def test_sizing_refuses_exactly_a_gpu_job_without_cpus_or_memory(accel, gpus, cpus, mem):
    """The class around the local_8xh100-on-SLURM case: every way to give a job CPUs (cpus_per_node,
    cpus_per_gpu, sbatch cpus-per-task) and memory (mem_gb, mem_per_gpu, sbatch mem) counts; a CPU job
    or one without GPUs is never refused."""
    from trainstack.launch.slurm import sizing_problems

    settings_: dict = {"sbatch": {}}
    for value, plain in ((cpus, "cpus_per_node"), (mem, "mem_gb")):
        if isinstance(value, int):
            settings_[plain] = value
        elif isinstance(value, str) and value.startswith("sbatch:"):
            settings_["sbatch"][value[7:]] = 8
        elif value:
            settings_[value] = "8G" if value.startswith("mem") else 4
    cluster = ClusterSpec(name="c", accelerator=accel, gpus_per_node=gpus, settings=settings_)
    keys = [e.key for e in sizing_problems(cluster)]
    gpu_job = accel == "gpu" and gpus > 0
    assert ("cluster.slurm.cpus_per_node" in keys) == (gpu_job and cpus is None)
    assert ("cluster.slurm.mem_gb" in keys) == (gpu_job and mem is None)
