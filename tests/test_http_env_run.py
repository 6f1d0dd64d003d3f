"""HTTP envs as runs: env=liveweb renders an argv whose plugin imports in slime's workers, the dry run
names the env server and whether it answers, meta.http_env is typed and checked, and
experiment=cpu-agentic starts its env server, learns through it, stops it, and resumes bit-identically."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_py
from tests.fakes.http_env import CountingEnv, env_server
from trainstack.errors import ConfigErrors
from trainstack.render.pipeline import build_from_overrides

LIVEWEB = ["env=liveweb", "model=qwen3-4B", "cluster=local_8xh100"]
# a dry run on a remote launcher defers the host checks (no slime checkout or data here) and still
# tells which env server the generate function will use
LIVEWEB_REMOTE = ["env=liveweb", "model=qwen3-4B", "cluster=lium_8xh100", "cluster.lium.pod.image=you/trainstack-slime:0.1"]


def errors_of(overrides: list[str]) -> list:
    with pytest.raises(ConfigErrors) as e:
        build_from_overrides(overrides)
    return e.value.errors


def test_liveweb_argv_makes_the_plugin_importable_in_slimes_workers(in_tmp):
    run, cmd = build_from_overrides(LIVEWEB)
    argv = cmd.argv
    assert argv[argv.index("--custom-generate-function-path") + 1] == "trainstack_plugins.http_env.generate.generate"
    cfg_path = argv[argv.index("--custom-config-path") + 1]
    assert cfg_path == os.path.join(run.run_dir, "http_env.yaml") and os.path.isabs(cfg_path)
    assert "--apply-chat-template" not in argv  # the generate function renders the chat template itself
    # a Ray worker has only the runtime env's PYTHONPATH: the plugin and its settings module import from it
    probe = ("import inspect, trainstack_plugins.http_env.generate as g; "
             "print(list(inspect.signature(g.generate).parameters), inspect.iscoroutinefunction(g.generate))")
    res = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path[:0] = {sys.path[1:]!r}; {probe}"],
                         env={"PYTHONPATH": cmd.env["PYTHONPATH"]}, cwd="/", capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "['args', 'sample', 'sampling_params', 'evaluation'] True"


def test_dry_run_says_which_env_server_and_whether_it_answers(in_tmp):
    res = run_py(*LIVEWEB_REMOTE, "dry_run=true", cwd=in_tmp, env={"TRAINSTACK_HTTP_ENV_URL": "http://127.0.0.1:9"})
    assert res.returncode == 0, res.stderr
    assert "env server at http://127.0.0.1:9" in res.stdout and "/health does NOT answer" in res.stdout
    assert "trainstack env serve liveweb" in res.stdout
    with env_server(CountingEnv()) as (url, _):
        res = run_py(*LIVEWEB_REMOTE, "dry_run=true", cwd=in_tmp, env={"TRAINSTACK_HTTP_ENV_URL": url})
    assert res.returncode == 0 and f"env server at {url}" in res.stdout
    assert "/health answers: env chain_sum, protocol 1, 0/8 sessions" in res.stdout
    assert not (in_tmp / "runs").exists()  # a dry run writes nothing
    res = run_py("experiment=cpu-agentic", "dry_run=true", cwd=in_tmp)
    assert res.returncode == 0 and "a launch starts `trainstack env serve chain_sum`" in res.stdout


def test_http_env_settings_are_typed_and_checked(in_tmp):
    errs = errors_of([*LIVEWEB, "env.meta.http_env.max_turns=0", "env.meta.http_env.reward=mean"])
    keys = {e.key: e for e in errs}
    assert "env.meta.http_env.max_turns" in keys and "conf/env/liveweb.yaml" not in keys["env.meta.http_env.max_turns"].source
    assert "sum, last, terminal" in keys["env.meta.http_env.reward"].fix
    errs = errors_of([*LIVEWEB, "+env.meta.http_env.max_turn=3"])
    assert errs[0].key == "env.meta.http_env.max_turn" and "max_turns" in errs[0].fix
    errs = errors_of([*LIVEWEB, "args.custom_config_path=/tmp/mine.yaml"])
    assert errs[0].key == "args.custom_config_path" and "env.meta.http_env" in errs[0].fix
    errs = errors_of([*LIVEWEB, "+env.meta.http_env.serve={env: liveweb}"])
    assert errs[0].key == "env.meta.http_env.url"
    errs = errors_of(["experiment=cpu-agentic", "model.hf_checkpoint=null"])
    assert errs[0].key == "env.meta.http_env.tokenizer" and "hf_checkpoint" in errs[0].fix
    errs = errors_of([*LIVEWEB, "cluster=slurm_8xh100", "cluster.num_nodes=2", "~env.meta.http_env.url",
                      "+env.meta.http_env.serve={env: liveweb}"])
    assert errs[0].key == "env.meta.http_env.serve.host"


def test_run_identity_follows_training_settings_not_the_server_url(in_tmp):
    base = build_from_overrides(LIVEWEB)[0].run_id
    assert build_from_overrides([*LIVEWEB, "env.meta.http_env.url=http://elsewhere:1"])[0].run_id == base
    assert build_from_overrides([*LIVEWEB, "env.meta.http_env.timeout_s=60"])[0].run_id == base
    assert build_from_overrides([*LIVEWEB, "env.meta.http_env.max_turns=5"])[0].run_id != base


def rewards(run_dir) -> list[float]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["metrics"]["rollout/raw_reward"] for r in rows if r["step_key"] == "rollout/step"]


@pytest.mark.slow
def test_cpu_agentic_starts_its_env_server_learns_through_it_and_stops_it(in_tmp):
    res = run_py("experiment=cpu-agentic", "env.num_rollout=40", "args.eval_interval=null", "run_id=agentic",
                 cwd=in_tmp, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    run_dir = in_tmp / "runs" / "agentic"
    r = rewards(run_dir)
    assert len(r) == 40
    first, last = sum(r[:5]) / 5, sum(r[-5:]) / 5
    assert last > first + 0.3 and last > 0.9, (first, last)  # reward per episode is 0..2 (two turns)
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    started = next(e for e in events if e["event"] == "http_env_server_started")
    assert any(e["event"] == "http_env_server_stopped" for e in events)
    with pytest.raises(ProcessLookupError):
        os.kill(started["server_pid"], 0)  # the server is gone with the run
    written = (run_dir / "http_env.yaml").read_text()
    assert started["url"] in written and "max_turns: 2" in written


def test_the_tiny_thinking_template_rewrites_history_as_qwen3_does(tmp_path):
    """The tiny tokenizer's thinking template has Qwen3's shape: the generation prompt carries an empty think
    block that the re-rendered history drops (so a prefix check of re-rendered turns fails every episode)."""
    from transformers import AutoTokenizer

    from trainstack.tiny import hf_tokenizer

    tok = AutoTokenizer.from_pretrained(str(hf_tokenizer.write(tmp_path / "tk", "thinking")))
    first = tok.apply_chat_template([{"role": "user", "content": "3+4"}], tokenize=False, add_generation_prompt=True)
    again = tok.apply_chat_template([{"role": "user", "content": "3+4"},
                                     {"role": "assistant", "content": "<think>5</think>7"},
                                     {"role": "user", "content": "+2"}], tokenize=False, add_generation_prompt=True)
    assert first == "3+4=<think></think>" and again == "3+4=7+2=<think></think>"
    assert not again.startswith(first + "5</think>7")  # the model's own turn is not a prefix of the re-render
    assert tok.encode("<think></think>", add_special_tokens=False) == [tok.convert_tokens_to_ids("<think>"),
                                                                     tok.convert_tokens_to_ids("</think>")]


@pytest.mark.slow
def test_cpu_agentic_trains_through_a_qwen3_style_thinking_template(in_tmp):
    """Issue #20: with Qwen3's template every multi-turn sample was `failed` (reward 0, nothing trained). With
    the tiny model's Qwen3-style thinking template, no sample fails and each episode's tokens carry the think
    blocks the template put there (13 tokens: "3+4=<think></think>7+2=<think></think>9" instead of 9)."""
    res = run_py("experiment=cpu-agentic", "model.hf_checkpoint=${paths.data_root}/chain_sum/tokenizer-thinking",
                 "env.num_rollout=3", "args.eval_interval=null", "run_id=thinking", cwd=in_tmp, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(x)["metrics"] for x in (in_tmp / "runs" / "thinking" / "metrics.jsonl").read_text().splitlines()
            if json.loads(x)["step_key"] == "rollout/step"]
    assert len(rows) == 3 and all(m["rollout/failed_frac"] == 0.0 and m["rollout/aborted_frac"] == 0.0 for m in rows)
    assert all(m["rollout/total_lengths"] == 13.0 for m in rows)
    assert sum(m["rollout/raw_reward"] for m in rows) > 0


@pytest.mark.slow
def test_a_resumed_agentic_run_ends_bit_identical(in_tmp):
    import torch

    common = ["experiment=cpu-agentic", "args.eval_interval=null", "args.save_interval=2"]
    assert run_py(*common, "env.num_rollout=4", "run_id=straight", cwd=in_tmp, timeout=600).returncode == 0
    assert run_py(*common, "env.num_rollout=2", "run_id=resumed", cwd=in_tmp, timeout=600).returncode == 0
    res = run_py(*common, "env.num_rollout=4", "run_id=resumed", cwd=in_tmp, timeout=600)
    assert res.returncode == 0 and "resuming from rollout 1" in res.stderr
    a, b = (torch.load(in_tmp / "runs" / rid / "checkpoints" / "iter_0000003" / "model.pt")
            for rid in ("straight", "resumed"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert rewards(in_tmp / "runs" / "straight") == rewards(in_tmp / "runs" / "resumed")[-4:]


@pytest.mark.slow
def test_an_env_server_that_does_not_come_up_fails_the_run_before_the_trainer_starts(in_tmp):
    res = run_py("experiment=cpu-agentic", "env.num_rollout=2", "+env.meta.http_env.serve.options={turns: 9}",
                 "run_id=bad", cwd=in_tmp, timeout=300)
    assert res.returncode == 1 and "the trainer was not started" in res.stderr and "Traceback" not in res.stderr
    run_dir = in_tmp / "runs" / "bad"
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    failed = next(e for e in events if e["event"] == "http_env_server_failed")
    assert "exited with code 2" in failed["reason"]
    assert "serve.options.turns" in (run_dir / "logs" / "http_env_server.log").read_text()
    assert json.loads((run_dir / "status.json").read_text())["state"] == "failed"
    assert not (run_dir / "metrics.jsonl").exists()  # the trainer never ran
