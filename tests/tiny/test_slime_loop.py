"""The tiny backend runs slime's own rollout code: each case where the old re-implementation
differed from slime 624b824a (issue #20, "Tiny vs slime") now behaves as slime does.

Most cases run one rollout in-process through ``trainstack.tiny.rollout.SlimeRollouts`` (slime's
``generate_rollout`` over HTTP to the tiny server); the failure stop runs the trainer."""
from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_py
from tiny_helpers import ARCH, CLUSTER, GRPO, read_metrics, run_tiny, task_argv
from trainstack.errors import ConfigErrors

PLUGINS = '''
import asyncio, os, time
from trainstack.tiny.arithmetic import score

CALLS = []
INFLIGHT = [0, 0]  # now, max

def sync_reward(args, sample, **kw):  # a plain function: slime awaits it
    return score(sample.response, sample.label)

async def logged_reward(args, sample, **kw):
    CALLS.append(sample.status.name)
    return score(sample.response, sample.label)

def sync_generate(args, sample, sampling_params):  # slime awaits it too
    return sample

def two_arg_hook(args, sample):  # slime passes only the kwargs a hook accepts
    sample.metadata["hooked"] = True

async def abort_generate(args, sample, sampling_params):
    from trainstack.tiny.sample import Sample
    sample.status = Sample.Status.ABORTED
    return sample

async def fail_generate(args, sample, sampling_params):
    from trainstack.tiny.sample import Sample
    sample.tokens = [4, 5]
    sample.response, sample.response_length, sample.loss_mask, sample.rollout_log_probs = "", 0, [], []
    sample.status = Sample.Status.FAILED
    sample.reward = 0.0
    return sample

async def slow_generate(args, sample, sampling_params):
    from slime.rollout.sglang_rollout import generate
    INFLIGHT[0] += 1
    INFLIGHT[1] = max(INFLIGHT)
    await asyncio.sleep(0.05)
    INFLIGHT[0] -= 1
    return await generate(args, sample, sampling_params)
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    d = tmp_path / "plug"
    d.mkdir()
    name = f"slimeloop_plugins_{os.getpid()}_{time.monotonic_ns()}"
    (d / f"{name}.py").write_text(textwrap.dedent(PLUGINS))
    monkeypatch.syspath_prepend(str(d))
    monkeypatch.setenv("PYTHONPATH", str(d) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return name


def _rollouts(argv):
    """SlimeRollouts over a fresh tiny policy (slime's GenerateState singleton reset per config)."""
    from trainstack.tiny.model import setup_determinism
    from trainstack.tiny.train import build_policy
    from trainstack.tiny.validate import main_parse

    from trainstack.tiny.rollout import SlimeRollouts

    from trainstack.tiny import slime_upstream

    slime_upstream.load()
    setup_determinism(1)
    args = main_parse(argv).args
    from slime.rollout.sglang_rollout import GenerateState

    GenerateState.clear_instances()
    holder = {}
    ro = SlimeRollouts(args, lambda: holder["p"].model)
    holder["p"] = build_policy(args, 10)
    return ro, args


def _argv(data, **kw):
    return ARCH + GRPO + CLUSTER + task_argv(data, **{"num_rollout": 1, "rbs": 2, "n": 4, "gbs": 8, **kw})


def _swap(argv, old, new):
    return [new if a == old else a for a in argv]


def test_sync_reward_function_fails_as_on_slime(data_dir, plugins):
    ro, _ = _rollouts(_swap(_argv(data_dir), "trainstack.tiny.arithmetic.reward", f"{plugins}.sync_reward"))
    try:
        with pytest.raises(TypeError, match="await"):
            ro.generate(0)
    finally:
        ro.close()


def test_sync_generate_function_fails_as_on_slime(data_dir, plugins):
    ro, _ = _rollouts(_argv(data_dir) + ["--custom-generate-function-path", f"{plugins}.sync_generate"])
    try:
        with pytest.raises(TypeError, match="await"):
            ro.generate(0)
    finally:
        ro.close()


def test_two_arg_sample_hook_runs(data_dir, plugins):
    ro, _ = _rollouts(_argv(data_dir) + ["--rollout-sample-hook-path", f"{plugins}.two_arg_hook"])
    try:
        res = ro.generate(0)
    finally:
        ro.close()
    assert res.samples and all(s.metadata.get("hooked") for s in res.samples)


def test_rm_type_math_is_all_or_nothing(data_dir):
    argv = [a for a in _argv(data_dir, n=8) if a not in ("--custom-rm-path", "trainstack.tiny.arithmetic.reward")]
    ro, _ = _rollouts(argv + ["--rm-type", "math"])
    try:
        res = ro.generate(0)
    finally:
        ro.close()
    assert {float(s.reward) for s in res.samples} <= {0.0, 1.0}  # the tiny copy gave near-miss partial credit


def test_no_reward_for_aborted_samples(data_dir, plugins):
    """slime's generate_and_rm returns an ABORTED sample without calling the reward function."""
    import importlib

    from slime.rollout.sglang_rollout import generate_and_rm_group
    from slime.utils.async_utils import run

    ro, args = _rollouts(_swap(_argv(data_dir), "trainstack.tiny.arithmetic.reward", f"{plugins}.logged_reward")
                         + ["--custom-generate-function-path", f"{plugins}.abort_generate"])
    try:
        group = ro.data_source.get_samples(1)[0]
        out = run(generate_and_rm_group(args, group, dict(temperature=1.0, max_new_tokens=2)))
    finally:
        ro.close()
    assert all(s.status.name == "ABORTED" and s.reward is None for s in out)
    assert importlib.import_module(plugins).CALLS == []


def test_group_samples_run_concurrently(data_dir, plugins):
    import importlib

    ro, _ = _rollouts(_argv(data_dir, rbs=1, n=4, gbs=4) + ["--custom-generate-function-path", f"{plugins}.slow_generate"])
    try:
        ro.generate(0)
    finally:
        ro.close()
    assert importlib.import_module(plugins).INFLIGHT[1] == 4  # the whole group in flight at once (tiny: 1)


def test_rollout_rewards_are_normalised(data_dir):
    ro, _ = _rollouts(_argv(data_dir, rbs=2, n=8, gbs=16))
    try:
        res = ro.generate(0)
    finally:
        ro.close()
    td = res.train_data
    for g in range(2):  # grpo: rewards are group-normalised by slime's _post_process_rewards
        rows = td["rewards"][g * 8:(g + 1) * 8]
        assert abs(sum(rows) / 8) < 1e-5
    assert td["raw_reward"] != td["rewards"] or len(set(td["raw_reward"])) == 1
    # Sample.rollout_id is the sample's own (slime's data source leaves it unset; the conversion numbers
    # each sample), not overwritten with the rollout's index as the tiny copy did
    assert all(s.rollout_id is None for s in res.samples)
    assert len(set(td["rollout_ids"])) == len(res.samples)


def test_top_k_one_is_greedy(data_dir):
    ro, _ = _rollouts(_argv(data_dir, rbs=2, n=8, gbs=16) + ["--rollout-top-k", "1"])
    try:
        res = ro.generate(0)
    finally:
        ro.close()
    for g in range(2):
        assert len({tuple(s.tokens) for s in res.samples[g * 8:(g + 1) * 8]}) == 1


def test_max_prompt_len_filters_and_context_len_caps(tmp_path, data_dir):
    """With --sglang-allow-auto-truncate the server cuts max_new_tokens to the context, as SGLang does; without
    it the same run is refused before it starts (5-token prompts + 2 new tokens do not fit 6: tiny/limits.py)."""
    rows = [{"prompt": "1+2=", "label": "3"}, {"prompt": "11+2=", "label": "13"}, {"prompt": "111+2=", "label": "113"}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = _argv(data_dir, rbs=1, n=2, gbs=2)
    argv = _swap(argv, str(data_dir / "train.jsonl"), str(tmp_path / "d.jsonl"))
    argv += ["--rollout-max-prompt-len", "5", "--rollout-max-context-len", "6"]
    with pytest.raises(ConfigErrors, match="Requested token count exceeds"):
        _rollouts(argv)
    ro, _ = _rollouts(argv + ["--sglang-allow-auto-truncate"])
    try:
        assert len(ro) == 2  # slime's Dataset drops the 6-token prompt
        res = ro.generate(0)
    finally:
        ro.close()
    for s in res.samples:
        assert len(s.tokens) <= 6 and s.response_length <= 6 - (len(s.tokens) - s.response_length)


def test_top_p_below_one_returns_replay_data(data_dir):
    """slime's generate asks for the nucleus ids when --rollout-top-p != 1 and asserts them in the train data."""
    ro, _ = _rollouts(_argv(data_dir) + ["--rollout-top-p", "0.7"])
    try:
        res = ro.generate(0)
    finally:
        ro.close()
    assert "rollout_top_p_token_ids" in res.train_data
    s = res.samples[0]
    assert len(s.rollout_top_p_token_offsets) == s.response_length + 1


def test_server_tokens_do_not_depend_on_batching():
    """A request's tokens come from the request, not from what it was batched with."""
    import random

    import torch

    from trainstack.tiny.generate import Request, decode, derive_seed
    from trainstack.tiny.model import ModelConfig, build_model, setup_determinism
    from trainstack.tiny.tokenizer import TinyTokenizer

    setup_determinism(1)
    tok = TinyTokenizer()
    cfg = ModelConfig(vocab_size=tok.vocab_size, num_layers=2, hidden_size=64, num_attention_heads=4,
                      ffn_hidden_size=256, max_position_embeddings=32)
    model = build_model(cfg, 3)

    def req(i):
        return Request(tok.encode(f"{10 + i}+3="), 4, 1.0, 1.0, -1, frozenset({tok.eos_token_id}), (),
                       random.Random(derive_seed(i)))

    alone = []
    for i in range(6):
        r = req(i)
        decode(model, [r], 32, tok.decode)
        alone.append((r.output_ids, r.logprobs))
    batch = [req(i) for i in range(6)]
    decode(model, batch[::-1], 32, tok.decode)
    assert [(r.output_ids, r.logprobs) for r in batch] == alone
    assert torch.get_num_threads() == 1


@given(st.lists(st.floats(0, 1), min_size=1, max_size=30), st.floats(0, 0.99), st.integers(1, 5))
@settings(max_examples=200, deadline=None)
def test_failure_watch_stops_after_n_bad_rollouts(fracs, limit, n):
    from trainstack.tiny.failures import FailureWatch

    w = FailureWatch(max_frac=limit, rollouts=n)
    streak = 0
    for i, f in enumerate(fracs):
        streak = streak + 1 if f > limit else 0
        verdict = w.observe(i, f, last=i == len(fracs) - 1)
        if streak >= n or (i == len(fracs) - 1 and f >= 1.0):
            assert verdict is not None and "failed" in verdict
            return
        assert verdict is None


def test_failure_stop_env_settings():
    from trainstack.tiny.failures import FailureWatch

    w = FailureWatch.from_env({"TRAINSTACK_MAX_FAILED_FRAC": "0.2", "TRAINSTACK_MAX_FAILED_ROLLOUTS": "1",
                               "TRAINSTACK_FAILURE_STOP": "0"})
    assert (w.max_frac, w.rollouts, w.enabled) == (0.2, 1, False)
    assert w.observe(0, 1.0, last=True) is None


def test_train_async_entrypoint_is_refused_for_a_tiny_run(tmp_path):
    r = run_py(f"paths.runs_root={tmp_path}/runs", f"paths.data_root={tmp_path}/data", "slime.entrypoint=train_async.py",
               "cluster.colocate=false", "cluster.gpus_per_node=2", "cluster.rollout_num_gpus=1", "dry_run=true",
               cwd=tmp_path)  # (colocated async is refused for any backend)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "slime.entrypoint" in r.stderr and "synchronous loop (train.py) only" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_all_failed_run_stops_failed(tmp_path, data_dir, plugins):
    from trainstack.tiny.failures import EXIT_FAILURE_RATE

    argv = _argv(data_dir, num_rollout=5) + ["--custom-generate-function-path", f"{plugins}.fail_generate"]
    m = tmp_path / "m.jsonl"
    r = run_tiny(argv, cwd=tmp_path, metrics_file=m, TRAINSTACK_MAX_FAILED_ROLLOUTS="2")
    assert r.returncode == EXIT_FAILURE_RATE, r.stderr[-3000:]
    assert "too many failed or aborted samples" in r.stderr and "2 consecutive rollouts" in r.stderr
    fr = [v["rollout/failed_frac"] for (k, _), v in sorted(read_metrics(m).items()) if k == "rollout/step"]
    assert fr == [1.0, 1.0]  # stopped after the second, not after all five
    r = run_tiny(_argv(data_dir, num_rollout=1) + ["--custom-generate-function-path", f"{plugins}.fail_generate"],
                 cwd=tmp_path, TRAINSTACK_MAX_FAILED_ROLLOUTS="9")
    assert r.returncode == EXIT_FAILURE_RATE  # never a success while every sample failed
    r = run_tiny(argv, cwd=tmp_path, TRAINSTACK_FAILURE_STOP="0")
    assert r.returncode == 0, r.stderr[-3000:]


# run the trainer and report, at exit, which heavy modules it executed (slime_upstream, optim: none of these)
REPORT_MODULES = """
import atexit, json, runpy, sys
def report():
    ray = sys.modules.get("ray")
    print("MODULES " + json.dumps({
        "ray": "ray._raylet" in sys.modules, "wandb": "wandb.sdk" in sys.modules,
        "torch._dynamo": "torch._dynamo" in sys.modules, "slime.ray.rollout": "slime.ray.rollout" in sys.modules,
        "transformers.processing_utils": "transformers.processing_utils" in sys.modules,
        "ray deferred": type(ray).__name__ == "_Deferred"}), file=sys.stderr, flush=True)
atexit.register(report)
sys.argv = ["train"] + sys.argv[1:]
runpy.run_module("trainstack.tiny.train", run_name="__main__")
"""


@pytest.mark.slow
def test_run_log_names_slime_functions_and_eval_cadence(tmp_path, data_dir):
    import subprocess
    import sys

    from tiny_helpers import env_for

    m = tmp_path / "m.jsonl"
    r = subprocess.run([sys.executable, "-c", REPORT_MODULES, *_argv(data_dir, num_rollout=3, eval_interval=2)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env_for(m))
    assert r.returncode == 0, r.stderr[-3000:]
    modules = json.loads(next(ln for ln in r.stderr.splitlines() if ln.startswith("MODULES "))[8:])
    assert modules == {"ray": False, "wandb": False, "torch._dynamo": False, "slime.ray.rollout": False,
                       "transformers.processing_utils": False, "ray deferred": True}  # seconds of start-up each
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("[tiny] rollout: slime "))
    from trainstack.tiny.rollout import SLIME_FUNCTIONS

    assert f"slime 624b824a's own rollout code ({len(SLIME_FUNCTIONS)} functions from " in line
    assert len(line) < 250  # no longer the ~450-character list of the functions (the constant names them)
    assert "Eval arithmetic" not in r.stderr  # slime's eval bar, drawn with disable=False, quiet under TQDM_DISABLE
    evals = sorted(s for (k, s) in read_metrics(m) if k == "eval/step")
    assert evals == [0, 1]  # before training and after rollout 1 (interval 2); slime adds none after the last
    assert Path(tmp_path).exists()
