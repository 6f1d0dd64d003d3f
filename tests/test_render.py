"""Rendering by dest with argparse's semantics."""
import json

import pytest

from trainstack.upstream import argtable as at
from trainstack.render.pipeline import build_from_overrides
from trainstack.render.command import render_args, render_dest

T = at.load_table()


@pytest.mark.parametrize("dest,value,tokens", [
    ("sequence_parallel", True, ["--sequence-parallel"]),
    ("sequence_parallel", False, []),
    ("add_bias_linear", False, ["--disable-bias-linear"]),      # store_false: emit when false
    ("add_bias_linear", True, []),
    ("offload_train", None, []),                                # tri-state: null emits nothing
    ("offload_train", True, ["--offload-train"]),
    ("offload_train", False, ["--no-offload-train"]),
    ("eval_prompt_data", ["aime", "/d/aime.jsonl"], ["--eval-prompt-data", "aime", "/d/aime.jsonl"]),
    ("rollout_sample_hook_path", ["a.b", "c.d"],
     ["--rollout-sample-hook-path", "a.b", "--rollout-sample-hook-path", "c.d"]),
    ("train_env_vars", {"B": "2", "A": "1"}, ["--train-env-vars", '{"A":"1","B":"2"}']),
    ("lr", 1e-6, ["--lr", "1e-06"]),
    ("rotary_base", 1000000, ["--rotary-base", "1000000"]),
    ("layernorm_epsilon", 1e-6, ["--norm-epsilon", "1e-06"]),
    ("attention_backend", "flash", ["--attention-backend", "flash"]),
    ("rollout_batch_size", None, []),
])
def test_render_dest(dest, value, tokens):
    assert render_dest(T[dest], value) == tokens


def test_render_order_is_table_order_whatever_the_input_order():
    a = render_args({"lr": 1e-6, "num_layers": 2, "rollout_batch_size": 4, "sglang_mem_fraction_static": 0.5})
    b = render_args({"sglang_mem_fraction_static": 0.5, "rollout_batch_size": 4, "num_layers": 2, "lr": 1e-6})
    assert a == b
    assert a["sglang"] == ["--sglang-mem-fraction-static", "0.5"]
    assert "--rollout-batch-size" in a["slime"] and "--num-layers" in a["megatron"]


def test_paths_are_absolute_and_load_equals_save(in_tmp):
    run, cmd = build_from_overrides(["paths.data_root=rel/data", "paths.runs_root=rel/runs"])
    argv = cmd.argv
    for flag in ("--prompt-data", "--save", "--load"):
        assert argv[argv.index(flag) + 1].startswith(str(in_tmp)), flag
    assert argv[argv.index("--save") + 1] == argv[argv.index("--load") + 1]
    assert argv[argv.index("--save") + 1].endswith(f"{run.run_id}/checkpoints")
    pairs = argv[argv.index("--eval-prompt-data") + 1: argv.index("--eval-prompt-data") + 3]
    assert pairs[0] == "arithmetic" and pairs[1].startswith(str(in_tmp))


def test_args_override_wins_over_groups_and_null_removes_a_flag():
    _, cmd = build_from_overrides(["experiment=qwen3-4B-grpo-dapo", "args.lr=3e-6", "model.attention_backend=null"])
    argv = cmd.argv
    assert argv[argv.index("--lr") + 1] == "3e-06"
    assert "--attention-backend" not in argv


def test_algo_override_like_the_brief():
    _, cmd = build_from_overrides(["algo.lr=2e-6"])
    assert cmd.argv[cmd.argv.index("--lr") + 1] == "2e-06"


def test_runtime_env_for_slime_backend():
    _, cmd = build_from_overrides(["experiment=qwen3-4B-grpo-dapo", "slime.megatron_root=/opt/Megatron-LM",
                                   "runtime_env.env_vars.MY_FLAG=1"])
    assert cmd.env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert cmd.env["PYTHONPATH"].split(":")[0] == "/opt/Megatron-LM"
    assert cmd.env["NCCL_NVLS_ENABLE"] == "1"
    assert cmd.env["MY_FLAG"] == "1"
    assert cmd.entrypoint[1].endswith("/train.py")
    ray = cmd.ray_submit_argv()
    assert ray[:4] == ["ray", "job", "submit", "--address=http://127.0.0.1:8265"]
    assert json.loads(ray[4].split("=", 1)[1])["env_vars"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert "pkill" not in cmd.shell_line() and "ray stop" not in cmd.shell_line()


def test_sft_uses_train_async_and_no_colocate():
    _, cmd = build_from_overrides(["experiment=qwen3-4B-base-sft"])
    assert cmd.entrypoint[1].endswith("/train_async.py")
    assert "--colocate" not in cmd.argv and "--debug-train-only" in cmd.argv
    assert cmd.groups["sglang"] == []


def test_non_colocated_cluster_splits_gpus():
    _, cmd = build_from_overrides(["experiment=qwen3-4B-grpo-dapo", "cluster.colocate=false",
                                   "cluster.rollout_num_gpus=4"])
    argv = cmd.argv
    assert argv[argv.index("--actor-num-gpus-per-node") + 1] == "4"
    assert argv[argv.index("--rollout-num-gpus") + 1] == "4"
    assert "--colocate" not in argv


def test_small_colocated_node_sets_num_gpus_per_node():
    _, cmd = build_from_overrides(["experiment=qwen3-4B-grpo-dapo", "cluster=local_1xh100",
                                   "model.tensor_model_parallel_size=1", "model.rollout_num_gpus_per_engine=1"])
    assert cmd.argv[cmd.argv.index("--num-gpus-per-node") + 1] == "1"


def test_run_id_stable_across_spelling_and_sensitive_to_training_keys():
    a, _ = build_from_overrides(["algo.lr=0.000002"])
    b, _ = build_from_overrides(["args.lr=2e-6"])
    c, _ = build_from_overrides(["algo.lr=3e-6"])
    d, _ = build_from_overrides(["algo.lr=2e-6", "args.tensor_model_parallel_size=1", "paths.runs_root=/elsewhere"])
    assert a.run_id == b.run_id == d.run_id
    assert c.run_id != a.run_id
    e, _ = build_from_overrides(["run_id=my-run"])
    assert e.run_id == "my-run"
