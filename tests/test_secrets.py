"""Zero copies of a secret (docs/resume.md): secret values in the environment and in every refused
form, through dry run, a local run (with W&B offline), sweeps, render, diff, compare, status, exec
and failing inputs; then every file under the work dir and every captured line is searched.
(Ray jobs: tests/test_ray_job.py searches Ray's session dirs and job logs too.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from conftest import ROOT, files_under
from hypothesis import given, settings
from hypothesis import strategies as st

from trainstack import secrets

SECRETS = {"WANDB_API_KEY": "ts-secret-wandb-4f9a", "HF_TOKEN": "hf_ts-secret-hf-77c1",
           "HUGGING_FACE_HUB_TOKEN": "hf_ts-secret-hub-0d2e"}
IN_CONFIG = "ts-secret-config-93b7"
SMALL = ["env.num_rollout=3", "args.save_interval=1", "env.rollout_batch_size=4", "env.n_samples_per_prompt=4",
         "env.global_batch_size=16", "env.eval_interval=null"]


@pytest.mark.slow
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


# -------------------------------------------------------------------------------------------------
# redaction: by name and by value, linear time, no false positives on hints
# -------------------------------------------------------------------------------------------------
_ALNUM = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", min_size=6, max_size=40)
_FREE = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_ALNUM, min_size=1, max_size=4), pieces=st.lists(_FREE, max_size=6), data=st.data())
def test_redacted_text_never_holds_a_secret_value(values, pieces, data):
    """Whatever the text around them (keys, quotes, brackets, URLs), no value of a secret-named
    environment variable survives redact_text / scrub."""
    env = {f"MY_{i}_TOKEN": v for i, v in enumerate(values)}
    text = ""
    for p in pieces:
        text += p + data.draw(st.sampled_from(values)) + data.draw(st.sampled_from(["", "=", ":", '"', "@", " "]))
    out_scrub = secrets.scrub(text, env=env)
    for v in values:
        assert v not in out_scrub
    old = dict(os.environ)
    try:
        os.environ.update(env)
        out = secrets.redact_text(text)
    finally:
        os.environ.clear()
        os.environ.update(old)
    for v in values:
        assert v not in out


@pytest.mark.parametrize("shape", ["a", "k=", "x.", "key=[", 'key="', "key=k", "a://b:", "[", "hf_", "bearer ",
                                   '\\"', "wandb_key: {", "https://u:p@"])
def test_redaction_is_linear(shape):
    """An 8,000-character value took 124 s (quadratic); 100,000 characters of the worst shapes take
    well under a second now (asserted loosely: a quadratic scan would take hours)."""
    text = (shape * (100_000 // len(shape) + 1))[:100_000]
    t0 = time.perf_counter()
    out = secrets.redact_text(text)
    assert time.perf_counter() - t0 < 5.0
    assert isinstance(out, str)


def test_redaction_by_name_in_every_spelling():
    cases = {
        "args.wandb_key=abc123": "abc123",
        '{"HF_TOKEN": "hf-secret-1"}': "hf-secret-1",
        'args.train_env_vars="{\\"HF_TOKEN\\":\\"hf-secret-2\\"}"': "hf-secret-2",
        "router_api_key: [k1234, k5678]": "k1234",
        "args.wandb_host=https://user:pw-secret@host": "pw-secret",
    }
    for text, value in cases.items():
        assert value not in secrets.redact_text(text), text


@pytest.mark.parametrize("hint", ["write key=value (quote values with spaces or brackets in your shell)",
                                  "set it  : args.wandb_key=VALUE", "token=${oc.env:HF_TOKEN}", "api_key: <redacted>"])
def test_hints_are_not_redacted(hint):
    """A hint's placeholder is no secret: `write key=value` must not become `key=<redacted>`."""
    assert secrets.redact_text(hint) == hint


def test_secret_in_value_finds_every_hiding_place(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf-value-9876")
    assert "$HF_TOKEN" in secrets.secret_in_value("org/hf-value-9876")
    assert "URL" in secrets.secret_in_value("https://user:pw@wandb.example")
    assert secrets.secret_in_value('{"HF_TOKEN": "x"}')
    assert secrets.secret_in_value('{"outer": {"inner": [{"wandb_api_key": "x"}]}}')
    assert secrets.secret_in_value({"a": ["https://u:p@h"]})
    for fine in ("https://wandb.example", "alice/repo", '{"MODE": "offline"}', "{not json", "hf-value"):
        assert secrets.secret_in_value(fine) == "", fine


# -------------------------------------------------------------------------------------------------
# Ray: an allow-list of forwarded variables; the temp dir removed by its creator
# -------------------------------------------------------------------------------------------------
def test_ray_runtime_env_carries_only_the_allow_list(tmp_path, monkeypatch):
    """TRAINSTACK_COMMANDER_TOKEN (and anything else not allowed) never reaches the job's runtime env,
    which Ray logs world-readable and puts on every worker's command line."""
    submitted: dict = {}

    class FakeClient:
        def __init__(self, address):
            pass

        def submit_job(self, **kw):
            submitted.update(kw)

        def list_jobs(self):
            return []

        async def tail_job_logs(self, sid):
            return
            yield

    monkeypatch.setitem(sys.modules, "ray.job_submission", types.SimpleNamespace(JobSubmissionClient=FakeClient))
    from trainstack.launch.ray_job import RayJobRunner
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.run.rundir import RunDir
    from trainstack.run.spec import RunSpec

    monkeypatch.chdir(tmp_path)
    run, cmd = build_from_overrides(["env.num_rollout=2"])
    spec = RunSpec.from_run(run, cmd)
    rundir = RunDir(spec.run_dir)
    rundir.path.mkdir(parents=True)
    env = {**os.environ, "TRAINSTACK_COMMANDER_TOKEN": "commander-sekret-1", "TRAINSTACK_RUN_ID": spec.run_id,
           "TRAINSTACK_LEASE_EPOCH": "3", "TRAINSTACK_ANYTHING": "x", "WANDB_MODE": "offline",
           "HF_TOKEN": "hf-sekret-2"}
    runner = RayJobRunner("http://127.0.0.1:1", spec, env, rundir)
    runner._tail.join(timeout=5)
    env_vars = submitted["runtime_env"]["env_vars"]
    assert "commander-sekret-1" not in json.dumps(submitted) and "hf-sekret-2" not in json.dumps(submitted)
    assert env_vars["TRAINSTACK_RUN_ID"] == spec.run_id and env_vars["TRAINSTACK_LEASE_EPOCH"] == "3"
    assert env_vars["WANDB_MODE"] == "offline" and "TRAINSTACK_ANYTHING" not in env_vars
    extra = set(env_vars) - set(cmd.env)
    assert extra <= set(secrets.RUNTIME_ENV_ALLOWED), extra


def test_local_ray_head_removes_its_temp_dir(tmp_path, monkeypatch):
    import subprocess as sp

    from trainstack.launch import ray_job

    real_popen = sp.Popen
    monkeypatch.setattr(ray_job.subprocess, "Popen",
                        lambda argv, **kw: real_popen(["sleep", "60"], **kw))  # no Ray needed: a stand-in group
    head = ray_job.LocalRayHead(8265, 1, 0, tmp_path / "ray_head.log")
    temp = Path(head.temp_dir)
    assert temp.is_dir() and temp.name.startswith("tsray-")
    head.stop()
    assert not temp.exists()


# -------------------------------------------------------------------------------------------------
# every refused form: exit 2, the key named, the value never echoed, nothing written
# -------------------------------------------------------------------------------------------------
HF = "hf-sekret-value-5150"


@pytest.mark.parametrize("argv,key", [
    (['args.train_env_vars="{\\"HF_TOKEN\\": \\"x-sekret-json-1\\"}"'], "args.train_env_vars"),
    (["args.train_env_vars='{\"a\": {\"HF_TOKEN\": \"x-sekret-json-1\"}}'"], "args.train_env_vars"),
    ([f"hub.repo_id=alice/{HF}"], "hub.repo_id"),
    ([f"name={HF}"], "name"),
    (["--wandb-key", HF], "command line"),
    (["--cfg", HF], "command line"),
    (["args.wandb_host=https://user:pw-sekret-3@wandb.example"], "args.wandb_host"),
    (["tracking.wandb_host=https://user:pw-sekret-3@wandb.example"], "tracking"),
])
def test_secret_in_any_form_is_refused_and_never_echoed(argv, key, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_TOKEN": HF}
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "dry_run=true", *argv], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out[-2000:]
    assert "Traceback" not in out and key in out
    for v in (HF, "x-sekret-json-1", "pw-sekret-3"):
        assert v not in out
    assert files_under(tmp_path) == []


def test_secret_in_a_config_file_under_an_innocent_key(tmp_path):
    (tmp_path / "myconf" / "experiment").mkdir(parents=True)
    (tmp_path / "myconf" / "experiment" / "leaky.yaml").write_text(
        "# @package _global_\nargs:\n  train_env_vars: '{\"HF_TOKEN\": \"x-sekret-file-4\"}'\n"
        f"hub:\n  repo_id: alice/{HF}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_TOKEN": HF}
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "--config-dir", str(tmp_path / "myconf"),
                          "experiment=leaky"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 2, out[-2000:]
    assert "args.train_env_vars" in out and "hub.repo_id" in out
    assert "x-sekret-file-4" not in out and HF not in out
    assert not (tmp_path / "runs").exists()


def test_run_dir_files_never_hold_a_secret_value(tmp_path, monkeypatch):
    """The last net: whatever a caller passes (an exception's text, a status field), a value of a
    secret environment variable never reaches events.jsonl or a file written through atomic_write."""
    from trainstack.run.rundir import RunDir, atomic_write

    monkeypatch.setenv("HF_TOKEN", HF)
    rd = RunDir(tmp_path / "r")
    rd.event("start_failed", error=f"401 for token {HF} at https://user:pw-sekret-3@hub.example")
    rd.update_status(state="failed", error=f"HTTP error, token={HF}")
    atomic_write(tmp_path / "r" / "x.json", json.dumps({"note": HF}))
    for p in (tmp_path / "r").rglob("*"):
        if p.is_file():
            text = p.read_text()
            assert HF not in text and "pw-sekret-3" not in text, p
    assert "<redacted>" in (tmp_path / "r" / "events.jsonl").read_text()


@pytest.mark.parametrize("argv", [["render", "--format", HF], ["status", "--json", "--wide", "--runs-root"],
                                  ["exec", HF]])
def test_trainstack_subcommand_errors_never_echo_a_secret(argv, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_TOKEN": HF}
    res = subprocess.run([sys.executable, "-m", "trainstack", *argv], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert HF not in res.stdout + res.stderr and "Traceback" not in res.stderr
