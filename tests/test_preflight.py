"""Every check before anything is written: the launch host checks the slime checkout, input paths of
the right kind, plugin modules, a writable runs_root with room for a checkpoint, before a run dir,
a lease or a process exists; the dry run runs the same checks; remote launchers list them as
deferred, and `trainstack exec` runs them on the host that executes the run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import files_under, run_py
from tests.fakes import fake_gpu_host
from trainstack.errors import ConfigErrors
from trainstack.render.pipeline import build_from_overrides
from trainstack.preflight.checks import preflight
from trainstack.upstream.select import table_label

QWEN = ["experiment=qwen3-4B-grpo-dapo", "args.no_save_optim=true", "slime.root=slime"]  # this machine: ./slime


def checks(overrides: list[str], where: Path, launching: bool = False):
    """(report, error keys) of the preflight for these overrides, composed in `where`."""
    old = os.getcwd()
    os.chdir(where)
    try:
        run, cmd = build_from_overrides(overrides)
        try:
            return preflight(run, cmd, launching=launching), []
        except ConfigErrors as err:
            return None, err.errors
    finally:
        os.chdir(old)


def keys(errors) -> list[str]:
    return sorted({e.key for e in errors})


LOCAL_INPUTS = ["model.meta.hf_repo=null", "env.meta.data=null"]  # no sources: inputs are the user's paths


def test_a_local_slime_run_needs_the_checkout_and_its_inputs_here(tmp_path):
    report, errors = checks([*QWEN, *LOCAL_INPUTS], tmp_path)
    assert report is None
    assert keys(errors) == ["env.eval_prompt_data", "env.prompt_data", "model.hf_checkpoint", "model.ref_load",
                            "slime.root"]
    _, errors = checks(QWEN, tmp_path)  # with the presets' sources the launch prepares them (docs/inputs.md)
    assert keys(errors) == ["slime.root"]
    slime = next(e for e in errors if e.key == "slime.root")
    assert f"{tmp_path}/slime/train.py does not exist on this machine" in slime.problem
    assert "git submodule update --init slime" in slime.fix
    fake_gpu_host(tmp_path, QWEN)
    report, errors = checks(QWEN, tmp_path)
    assert errors == [] and report.runs_here
    assert report.notes == [f"slime checkout: {tmp_path}/slime (train.py present on this machine); relative "
                            "slime.root values are taken from the directory you launch in",
                            "slime's parser stack (Megatron-LM, SGLang) is not installed here: the command is checked "
                            f"against trainstack's table for {table_label()}; `trainstack exec` on the trainer's host "
                            "runs slime's own parser"]


def test_a_remote_launcher_defers_the_host_checks(tmp_path):
    report, errors = checks([*QWEN, "cluster=slurm_8xh100"], tmp_path)
    assert errors == [] and not report.runs_here
    assert "NOT present on this machine" in report.notes[0] and "the slurm host needs it" in report.notes[0]
    assert report.deferred[0] == f"slime checkout {tmp_path}/slime has train.py"
    assert any(d.startswith("model.ref_load: ") and d.endswith("is a directory") for d in report.deferred)
    assert report.deferred[-1].endswith("is writable with room for one checkpoint")
    # a ray_job launcher with a remote address too; with a loopback address it is local
    report, errors = checks([*QWEN, "cluster.ray_job.address=http://10.1.2.3:8265"], tmp_path)
    assert errors == [] and not report.runs_here and report.deferred
    _, errors = checks([*QWEN, "cluster.ray_job.address=http://localhost:8265"], tmp_path)
    assert "slime.root" in keys(errors)


def test_a_local_ray_address_nobody_answers_is_a_warning_the_launch_decides(tmp_path):
    """ray_job at a loopback address with no cluster there now and no head to start: the launch refuses it
    (RayJobLauncher.execute) unless one is started in between, so the dry run says so as a warning; a remote
    address is not asked."""
    fake_gpu_host(tmp_path, QWEN)
    local = [*QWEN, "cluster.ray_job.start_head=false", "cluster.ray_job.address=http://127.0.0.1:9"]
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        run, cmd = build_from_overrides(local)
        preflight(run, cmd, launching=False)
        assert any(w.startswith("no Ray cluster answers at http://127.0.0.1:9 now") and
                   "cluster.ray_job.start_head=true" in w for w in run.warnings), run.warnings
        run, cmd = build_from_overrides([*QWEN, "cluster.ray_job.start_head=false",
                                         "cluster.ray_job.address=http://10.1.2.3:9"])
        preflight(run, cmd, launching=False)
        assert not any("Ray cluster" in w for w in run.warnings)
    finally:
        os.chdir(old)


def test_dry_run_lists_deferred_checks(tmp_path):
    res = run_py(*QWEN, "cluster=lium_8xh100", "cluster.lium.pod.image=you/trainstack-slime:0.1", "dry_run=true", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "launch (the trainer runs on a lium host)" in res.stdout
    assert "deferred to the host that runs it" in res.stdout and "model.hf_checkpoint: " in res.stdout
    assert files_under(tmp_path) == []


def test_the_dry_run_refuses_a_lium_pod_without_an_image_as_the_launch_does(tmp_path):
    """`dry_run=true` said "ready to launch" where the launch refused (no template, no image: Lium's stock
    PyTorch image has no trainstack); now both refuse at cluster.lium.pod.image, a sweep once, nothing written."""
    res = run_py(*QWEN, "cluster=lium_8xh100", "dry_run=true", cwd=tmp_path)
    assert res.returncode == 2 and "error: cluster.lium.pod.image: neither" in res.stderr, res.stderr
    sweep = run_py("-m", "hydra/launcher=lium", *QWEN, "cluster=lium_8xh100", "algo.lr=1e-6,2e-6", "dry_run=true",
                   f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert sweep.returncode == 2 and sweep.stderr.count("cluster.lium.pod.image: neither") == 1, sweep.stderr
    assert "error: every point (2): cluster.lium.pod.image" in sweep.stderr
    assert files_under(tmp_path) == []


@settings(max_examples=100, deadline=None)
@given(shared=st.lists(st.booleans(), min_size=1, max_size=8), n_own=st.integers(0, 3))
def test_a_sweep_reports_an_error_every_point_shares_once_and_the_others_per_point(shared, n_own):
    """A 256-point sweep printed the same launcher error 256 times: an error every point has is one
    message ("every point (N)"), one only some points have names each of them, and none is lost."""
    from trainstack.errors import ConfigError
    from trainstack.sweep.points import PointErrors

    common = ConfigError("cluster.lium.pod.image", "no image", "set it")
    failed = PointErrors()
    for num, has in enumerate(shared):
        failed.point()
        own = [ConfigError(f"args.k{num}_{i}", "bad", "fix") for i in range(n_own)]
        failed.add(num, [f"algo.lr={num}"], ([common] if has else []) + own)
    out = failed.errors()
    together = [e for e in out if e.key.startswith("every point")]
    per_point = [e for e in out if e.key.endswith("cluster.lium.pod.image") and e.key.startswith("point ")]
    if all(shared) and len(shared) > 1:
        assert len(together) == 1 and together[0].key == f"every point ({len(shared)}): cluster.lium.pod.image"
        assert not per_point
    else:
        assert not together and len(per_point) == sum(shared)
    assert len(out) == len(together) + len(per_point) + len(shared) * n_own


@settings(max_examples=60, deadline=None)
@given(template=st.one_of(st.none(), st.just(""), st.text(min_size=1, max_size=12)),
       image=st.one_of(st.none(), st.just(""), st.text(min_size=1, max_size=12)))
def test_lium_settings_problems_refuse_exactly_a_pod_with_neither_template_nor_image(template, image):
    from trainstack.launch.lium import LiumLauncher

    from trainstack.config.schema import ClusterSpec

    cluster = ClusterSpec(name="lium_cpu", launcher="lium", settings={"pod": {"template_id": template, "image": image}})
    problems = LiumLauncher.settings_problems(cluster)
    assert bool(problems) == (not template and not image)
    assert all(p.key == "cluster.lium.pod.image" for p in problems)


def test_inputs_must_be_the_right_kind(tmp_path):
    fake_gpu_host(tmp_path, QWEN)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    _, errors = checks([*QWEN, *LOCAL_INPUTS, "env.prompt_data=adir", "model.ref_load=afile",
                        "model.hf_checkpoint=nowhere"], tmp_path)
    by_key = {e.key: e for e in errors}
    assert set(by_key) == {"env.prompt_data", "model.ref_load", "model.hf_checkpoint"}
    assert "is a directory, not a file" in by_key["env.prompt_data"].problem
    assert "is a file, not a directory" in by_key["model.ref_load"].problem
    assert "does not exist" in by_key["model.hf_checkpoint"].problem
    assert by_key["env.prompt_data"].source == "command line `env.prompt_data=adir`"


def test_plugin_paths_are_imported_by_the_trainers_interpreter(tmp_path):
    """The trainer's interpreter imports each plugin, with the trainer's PYTHONPATH (trainstack/preflight/plugin_probe.py)."""
    _, errors = checks(["args.custom_rm_path=trainstack.nope.reward"], tmp_path)
    assert keys(errors) == ["args.custom_rm_path"] and "No module named 'trainstack.nope'" in errors[0].problem
    _, errors = checks(["args.custom_rm_path=trainstack.tiny.arithmetic.rewrd"], tmp_path)
    assert "has no 'rewrd'" in errors[0].problem
    _, errors = checks(["args.custom_rm_path=not-a-path"], tmp_path)
    assert "not a dotted path" in errors[0].problem
    plug = tmp_path / "myplugins"
    plug.mkdir()
    (plug / "myreward.py").write_text("async def reward(args, sample, **kwargs):\n    return 1.0\n")
    (plug / "exits.py").write_text("import sys\nsys.exit('no config file')\n\nasync def reward(args, sample):\n"
                                   "    return 1.0\n")
    report, errors = checks([f"runtime_env.pythonpath=[{plug}]", "args.custom_rm_path=myreward.reward"], tmp_path)
    assert errors == []  # found on the trainer's PYTHONPATH
    _, errors = checks([f"runtime_env.pythonpath=[{plug}]", "args.custom_rm_path=exits.reward"], tmp_path)
    assert "importing 'exits' in the trainer's interpreter" in errors[0].problem  # what the trainer would hit
    assert "SystemExit: no config file" in errors[0].problem and f"{plug}/exits.py:2" in errors[0].problem


def test_runs_root_must_be_a_writable_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    _, errors = checks(["paths.runs_root=file/runs"], tmp_path)
    assert keys(errors) == ["paths.runs_root"] and "is a file" in errors[0].problem


def _mount_tmpfs(path: Path, *options: str) -> bool:
    path.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(path)], capture_output=True)
    return res.returncode == 0


@pytest.fixture
def tmpfs(tmp_path):
    mounted = []

    def mount(name: str, *options: str) -> Path:
        p = tmp_path / name
        if os.geteuid() != 0 or not _mount_tmpfs(p, *options):
            pytest.skip("needs root to mount a small tmpfs (a real full / read-only disk)")
        mounted.append(p)
        return p

    yield mount
    for p in mounted:
        subprocess.run(["umount", str(p)], capture_output=True)


def test_a_full_or_read_only_runs_root_is_refused_before_anything_is_written(tmp_path, tmpfs):
    small = tmpfs("small", "size=64k")  # one tiny-model checkpoint with Adam state is ~1.2 MB
    res = run_py(f"paths.runs_root={small}/runs", cwd=tmp_path)
    assert res.returncode == 2 and "error: paths.runs_root:" in res.stderr and "free" in res.stderr, res.stderr
    assert list(small.iterdir()) == [] and files_under(tmp_path / "data") == []
    dry = run_py(f"paths.runs_root={small}/runs", "dry_run=true", cwd=tmp_path)
    assert dry.returncode == 2 and "error: paths.runs_root:" in dry.stderr
    ro = tmpfs("ro", "size=10m", "ro")
    res = run_py(f"paths.runs_root={ro}", cwd=tmp_path)
    assert res.returncode == 2 and "not writable" in res.stderr, res.stderr


def test_start_ray_head_starts_nothing_before_a_missing_checkout_is_reported(tmp_path):
    res = run_py("experiment=qwen3-4B-grpo-dapo", "slime.root=slime", "cluster=local_1xh100", "model.tensor_model_parallel_size=1",
                 "model.rollout_num_gpus_per_engine=1", "cluster.ray_job.start_head=true", cwd=tmp_path, timeout=60)
    assert res.returncode == 2, res.stderr
    assert "error: slime.root:" in res.stderr and "nothing was launched" in res.stderr
    assert files_under(tmp_path) == []  # no run dir, so no logs/ray_head.log: no Ray head was started


def test_exec_checks_the_executing_host_first(tmp_path):
    """A run stored on one machine and executed where an input is missing: refused before the lease."""
    from trainstack.run.rundir import RunDir
    from trainstack.run.spec import RunSpec

    fake_gpu_host(tmp_path, QWEN)
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        run, cmd = build_from_overrides([*QWEN, *LOCAL_INPUTS, "cluster=slurm_8xh100"])
    finally:
        os.chdir(old)
    spec = RunSpec.from_run(run, cmd)
    RunDir(spec.run_dir).write_spec(spec)
    Path(run.args["ref_load"]).rmdir()  # a user's own input (no source to prepare it from) missing there
    before = files_under(tmp_path)
    res = subprocess.run([sys.executable, "-m", "trainstack", "exec", run.run_id], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert res.returncode == 2, res.stderr
    assert "error: args.ref_load:" in res.stderr and "Qwen3-4B_torch_dist does not exist on this machine" in res.stderr
    assert files_under(tmp_path) == before  # no lease, no events, no status
    assert json.loads((Path(spec.run_dir) / "spec.json").read_text())["run_id"] == run.run_id
