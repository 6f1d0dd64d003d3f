"""Zero copies of a secret (docs/resume.md): secret values in the environment and in every refused
form, through dry run, a local run (with W&B offline), sweeps, render, diff, compare, status, exec
and failing inputs; then every file under the work dir and every captured line is searched.
(Ray jobs: tests/test_ray_job.py searches Ray's session dirs and job logs too.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow

SECRETS = {"WANDB_API_KEY": "ts-secret-wandb-4f9a", "HF_TOKEN": "hf_ts-secret-hf-77c1",
           "HUGGING_FACE_HUB_TOKEN": "hf_ts-secret-hub-0d2e"}
IN_CONFIG = "ts-secret-config-93b7"
SMALL = ["env.num_rollout=3", "args.save_interval=1", "env.rollout_batch_size=4", "env.n_samples_per_prompt=4",
         "env.global_batch_size=16", "env.eval_interval=null"]


def test_no_secret_in_any_file_or_printed_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", "HOME": str(tmp_path / "home"),
           **SECRETS}
    captured: list[str] = []

    def run(*argv: str, expect: int | None = 0, tool: bool = False) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "trainstack", *argv] if tool else [sys.executable, str(ROOT / "run.py"), *argv]
        res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        captured.append(f"{res.stdout}\n{res.stderr}")  # (the argv itself holds the refused values)
        if expect is not None:
            assert res.returncode == expect, (argv, res.returncode, res.stderr[-2000:])
        return res

    # every refused form: exit 2, nothing written
    refused = [
        [f"args.wandb_key={IN_CONFIG}"], [f"args.router_control_plane_api_keys=[{IN_CONFIG},x]"],
        [f"args.train_env_vars={{HF_TOKEN:{IN_CONFIG}}}"], [f"runtime_env.env_vars.MY_API_KEY={IN_CONFIG}"],
        [f"cluster.lium.pod={{lium_api_key:{IN_CONFIG}}}"], [f"args.wandb_kye={IN_CONFIG}"],
        [f"args.wandb_key='{IN_CONFIG}"], ["-m", f"args.wandb_key={IN_CONFIG},y", "dry_run=true"],
        ["-m", f"args.train_env_vars={{HF_TOKEN:{IN_CONFIG}}}", "algo.lr=1e-3,2e-3"],
        ["--config-dir", str(tmp_path / "myconf"), "experiment=leaky"],
    ]
    (tmp_path / "myconf" / "experiment").mkdir(parents=True)
    (tmp_path / "myconf" / "experiment" / "leaky.yaml").write_text(
        f"# @package _global_\nargs:\n  train_env_vars: {{WANDB_API_KEY: {IN_CONFIG}}}\n")
    for argv in refused:
        run(*argv, expect=2)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "multirun").exists()

    # what users do every day, with secrets in the environment
    run("dry_run=true", *SMALL)
    run(*SMALL, "run_id=s1", "args.use_wandb=true")
    run(*SMALL, "run_id=s2", "algo.lr=2e-3")
    run("-m", *SMALL, "algo.lr=3e-3,4e-3", "hydra.sweep.dir=multirun/sw")
    run("-m", *SMALL, "algo.lr=5e-3,6e-3", "dry_run=true")
    run("render", "-o", str(tmp_path / "render.json"), tool=True)
    run("render", "--format", "shell", tool=True)
    run("diff", "s1", "s2", tool=True, expect=1)
    run("compare", "s1", "s2", "--csv", str(tmp_path / "cmp.csv"), tool=True)
    run("compare", "multirun/sw", tool=True)
    run("status", tool=True, expect=None)  # lists runs_root (exit 0) once issue 12 lands
    run("status", "multirun/sw", tool=True)
    run("exec", "s1", tool=True)
    run("args", "wandb_key", tool=True)
    run("nonsense", tool=True, expect=None)

    values = [*SECRETS.values(), IN_CONFIG]
    for text in captured:
        for v in values:
            assert v not in text, f"{v} printed: {text[:300]}"
    mine = ("home", "myconf")  # a temporary HOME, and the user's own leaky experiment file
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.relative_to(tmp_path).parts[0] not in mine]
    assert any(p.suffix == ".wandb" for p in files) and any(p.name == "spec.json" for p in files)
    for p in files:
        data = p.read_bytes()
        for v in values:
            assert v.encode() not in data, f"{v} in {p}"
