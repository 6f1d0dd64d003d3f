"""The dry run is the launch minus the launch: for invalid configs both exit 2 with the same
error keys, and the launch writes nothing (no run dir, no lease, no process)."""
from __future__ import annotations

import re

import pytest

from conftest import files_under, run_py

INVALID = [
    # dapo_math on the tiny backend is a valid config now (slime's own reward hub and chat template run on CPU);
    # without its download (meta.data=null) its files are missing here, which both refuse
    ["env=dapo_math", "env.meta.data=null"],
    ["env=gsm8k", "env.meta.data=null"],
    ["model.hidden_size=65"],
    ["args.entropy_coef=nan"],
    ["algo.lr=-1"],
    ["algo.lr=1e-3", "args.min_lr=1"],
    ["env.rollout_batch_size=0"],
    ["env.global_batch_size=100"],
    ["env.global_batch_size=1024"],
    ["env.n_samples_per_prompt=0"],
    ["env.num_rollout=null"],
    ["env.rollout_temperature=0"],
    ["args.save_interval=null"],
    ["args.save_interval=0"],
    ["args.over_sampling_batch_size=1"],
    ["args.use_dynamic_batch_size=true"],
    ["args.balance_by_flops=true"],
    ["algo.kl_coef=0.1", "algo.kl_loss_coef=0.1"],
    ["args.use_tis=true", "args.use_rollout_logprobs=true"],
    ["args.get_mismatch_metrics=true"],
    ["args.use_opd=true"],
    ["args.debug_train_only=true", "args.debug_rollout_only=true"],
    ["args.enable_mtp_training=true"],
    ["args.only_train_params_name_list=[a]", "args.freeze_params_name_list=[b]"],
    ["args.decoder_last_pipeline_num_layers=1"],
    ["args.rollout_max_context_len=8", "args.rollout_max_prompt_len=8"],
    ["args.loss_type=sft_loss"],
    ["algo=ppo"],
    ["model=qwen3-4B"],
    ["args.rollout_batchsize=4"],
    ["cluster.num_nodes=0"],
    # the machine the trainer runs on (trainstack/preflight/checks.py)
    ["experiment=qwen3-4B-grpo-dapo", "slime.root=/nonexistent/slime"],  # no slime checkout, data or model here
    # (a Ray cluster that does not answer is the launch's to judge: it may be started after the dry run, which
    # warns; tests/test_preflight.py)
    ["args.custom_rm_path=trainstack.nope.reward"],
    ["args.custom_rm_path=trainstack.tiny.arithmetic.rewrd"],
    # slime's plugin contract, checked in the trainer's interpreter (trainstack/preflight/plugin_probe.py)
    ["args.custom_rm_path=trainstack.tiny.arithmetic.score"],  # a plain function: slime awaits the reward
    ["args.group_rm=true"],  # a one-sample reward given groups; slime's eval rollout asserts group_rm is off
    ["env.rollout_max_response_len=32"],  # no room for a prompt in the tiny model's 32 positions
    ["paths.runs_root=/proc/version/runs"],
    ["env.prompt_data=/"],
    ["env.eval_prompt_data=[arithmetic,/nonexistent/eval.jsonl]"],
    ["model.ref_load=/proc/version"],
    ["resume.lease_ttl_s=nan"],
    # a custom generate function with top-p sampling fails slime's training-data assertion (upstream_rules.py)
    ["experiment=cpu-agentic", "args.rollout_top_p=0.9"],
]


def error_keys(stderr: str) -> list[str]:
    return sorted(set(re.findall(r"^error: ([^:]+):", stderr, re.M)))


@pytest.mark.slow
@pytest.mark.parametrize("overrides", INVALID, ids=[" ".join(o) for o in INVALID])
def test_dry_run_and_launch_agree_and_launch_writes_nothing(overrides, tmp_path):
    dry = run_py(*overrides, "dry_run=true", cwd=tmp_path)
    launch = run_py(*overrides, cwd=tmp_path)
    assert dry.returncode == launch.returncode == 2, (dry.stderr[-800:], launch.stderr[-800:])
    assert error_keys(dry.stderr) == error_keys(launch.stderr) != []
    assert "Traceback" not in dry.stderr + launch.stderr
    assert files_under(tmp_path) == [], files_under(tmp_path)


def test_there_are_at_least_30_cases():
    assert len(INVALID) >= 40
