"""slime's run-time paths as rules (trainstack/rules/runtime_rules.py, context_length.py, tiny/limits.py),
each against slime's source in the submodule: the cited lines still read so, slime's own functions do
what the rule says they do, every case is refused by its rule alone (without the rule it passes),
and its fixed neighbour is accepted. The two refusals slime would have run are acceptances now."""
from __future__ import annotations

import asyncio
import json
import os
import types
from pathlib import Path

import pytest

from conftest import SMALL_BATCH, run_py
from tests.fakes import fake_gpu_host
from trainstack.rules import runtime_rules
from trainstack.errors import ConfigErrors
from trainstack.render.pipeline import build_from_overrides, compose
from trainstack.preflight.checks import preflight
from trainstack.config.resolve import resolve
from trainstack.rules.validate import Ctx, validate

ROOT = Path(__file__).resolve().parents[1]
SLIME = ROOT / "slime"
QWEN = ["experiment=qwen3-4B-grpo-dapo"]
FULLY_ASYNC = "slime.rollout.fully_async_rollout.generate_rollout_fully_async"
OPD = ["args.use_opd=true"]

# slime file:lines a rule cites -> text on them
CITED = {
    "slime/utils/arguments.py:1968-1969": "args.eval_function_path = args.rollout_function_path",
    "train.py:50-51": "if args.eval_interval is not None and rollout_id == 0 and not args.skip_eval_before_train:",
    "train.py:36-37": "if args.num_rollout == 0 and args.eval_interval is not None:",
    "train.py:90-91": "if should_run_periodic_action(rollout_id, args.eval_interval, num_rollout_per_epoch):",
    "train_async.py:72-73": "if should_run_periodic_action(rollout_id, args.eval_interval, num_rollout_per_epoch):",
    "slime/rollout/fully_async_rollout.py:272-273": "fully-async rollout doesn't support evaluation mode",
    "slime/rollout/sft_rollout.py:29": "assert not evaluation",
    "slime/rollout/sglang_rollout.py:477": "assert not args.group_rm",
    "slime/rollout/sglang_rollout.py:499": "assert not args.group_rm",
    "slime/rollout/sglang_rollout.py:617-620": "sample.reward[reward_key]",
    "slime/utils/types.py:246-247": "self.reward if not args.reward_key else self.reward[args.reward_key]",
    "slime/rollout/rm_hub/math_dapo_utils.py:288-292": '"score": reward,',
    "slime/rollout/rm_hub/__init__.py:69-71": 'rm_type.startswith("boxed_")',
    "slime/utils/arguments.py:1887-1888": "args.eval_reward_key = args.reward_key",
    "slime/rollout/on_policy_distillation.py:27-29": "return await resp.json()",
    "slime/observability/rollout_metrics.py:232": "sum(rewards) / len(rewards)",
    "slime/utils/arguments.py:1790-1795": "--opd-teacher-load is required when --opd-type=megatron",
    "slime/utils/arguments.py:1806-1811": "--opd-teacher-load should not be set when --opd-type=sglang",
    "slime/backends/megatron_utils/loss.py:687-689": "requires teacher_log_probs",
    "slime/utils/arguments.py:1961-1962": "args.offload_train = True",
    "slime/utils/arguments.py:1909": 'args.use_critic = args.advantage_estimator == "ppo"',
    "slime/ray/placement_group.py:47-48": 'bundles = [{"GPU": 1, "CPU": 1} for _ in range(num_gpus)]',
    "slime/ray/placement_group.py:101": "actor_num_gpus = args.actor_num_nodes * args.actor_num_gpus_per_node",
    "slime/rollout/sglang_rollout.py:99": "max_new_tokens=args.rollout_max_response_len",
    "slime/utils/data.py:278-279": "filter_long_prompt(origin_samples, tokenizer, processor, max_length)",
}
needs_slime = pytest.mark.skipif(not (SLIME / "slime" / "__init__.py").is_file(), reason="slime/ submodule not filled")


@needs_slime
@pytest.mark.parametrize("source", sorted(CITED))
def test_each_cited_slime_line_reads_so(source):
    path, _, span = source.rpartition(":")
    first, _, last = span.partition("-")
    lines = (SLIME / path).read_text(encoding="utf-8").splitlines()[int(first) - 1:int(last or first)]
    assert any(CITED[source] in line for line in lines), (source, lines)


def _run(overrides: list[str], where: Path):
    """(run, command) composed in `where`; the command None when the run does not validate."""
    old = os.getcwd()
    os.chdir(where)
    try:
        try:
            return build_from_overrides(overrides)
        except ConfigErrors:
            cfg, origin = compose(overrides)
            return resolve(cfg, origin), None
    finally:
        os.chdir(old)


# (overrides, the rule, the key it names) ... and a neighbour it accepts
REFUSED = [
    (["args.rollout_function_path=" + FULLY_ASYNC], "eval_function_serves_eval", "args.rollout_function_path"),
    (["args.eval_function_path=slime.rollout.sft_rollout.generate_rollout"], "eval_function_serves_eval",
     "args.eval_function_path"),
    (["args.group_rm=true"], "group_rm_eval", "args.group_rm"),
    (["env.custom_rm_path=null", "args.rm_type=dapo"], "reward_shape", "args.rm_type"),
    (["env.custom_rm_path=null", "args.rm_type=boxed_dapo"], "reward_shape", "args.rm_type"),
    (["env.custom_rm_path=null", "args.rm_type=math", "args.reward_key=score"], "reward_shape", "args.reward_key"),
    ([*QWEN, "args.eval_reward_key=acc"], "reward_shape", "args.eval_reward_key"),
    ([*QWEN, "args.custom_rm_path=slime.rollout.on_policy_distillation.reward_func", "args.rm_url=http://t:1/generate"],
     "opd_reward_in_eval", "args.custom_rm_path"),
    ([*QWEN, "args.custom_rm_path=slime.rollout.on_policy_distillation.reward_func", "env.eval_interval=null"],
     "opd_settings", "args.rm_url"),
    ([*QWEN, *OPD, "args.opd_type=sglang", "args.opd_teacher_load=/teacher",
      "args.custom_reward_post_process_path=slime.rollout.on_policy_distillation.post_process_rewards"],
     "opd_settings", "args.opd_teacher_load"),
    ([*QWEN, *OPD, "args.opd_type=megatron"], "opd_settings", "args.opd_type"),
    ([*QWEN, *OPD, "args.opd_type=sglang"], "opd_settings", "args.opd_type"),
    ([*QWEN, "args.sglang_context_length=40960", "env.rollout_max_response_len=61440"], "response_fits_context",
     "env.rollout_max_response_len"),
    ([*QWEN, "args.sglang_context_length=40960", "args.rollout_max_prompt_len=2048",
      "env.rollout_max_response_len=40000"], "response_fits_context", "env.rollout_max_response_len"),
]
ACCEPTED = [
    ["args.rollout_function_path=" + FULLY_ASYNC, "args.eval_function_path=slime.rollout.sglang_rollout.generate_rollout"],
    ["args.rollout_function_path=" + FULLY_ASYNC, "env.eval_interval=null"],
    ["args.group_rm=true", "env.eval_interval=null"],
    ["env.custom_rm_path=null", "args.rm_type=dapo", "args.reward_key=score"],
    ["env.custom_rm_path=null", "args.rm_type=math"],
    [*QWEN, "args.custom_rm_path=slime.rollout.on_policy_distillation.reward_func", "args.rm_url=http://t:1/generate",
     "env.eval_interval=null"],
    [*QWEN, *OPD, "args.opd_type=sglang", "args.rm_url=http://t:1/generate",
     "args.custom_rm_path=slime.rollout.on_policy_distillation.reward_func", "env.eval_interval=null",
     "args.custom_reward_post_process_path=slime.rollout.on_policy_distillation.post_process_rewards"],
    [*QWEN, *OPD, "args.opd_type=megatron", "args.opd_teacher_load=/teacher"],
    [*QWEN, "args.sglang_context_length=40960", "env.rollout_max_response_len=32768"],
    [*QWEN, "args.sglang_context_length=40960", "env.rollout_max_response_len=61440",
     "args.sglang_allow_auto_truncate=true"],
]


def _rule(name: str):
    return getattr(runtime_rules, name)


@pytest.mark.parametrize("overrides, rule, key", REFUSED, ids=[" ".join(c[0]) for c in REFUSED])
def test_refused_by_its_rule_alone(overrides, rule, key, tmp_path):
    run, _ = _run(overrides, tmp_path)
    errors = validate(run)
    assert key in [e.key for e in errors], [e.render() for e in errors]
    mine = _rule(rule)(Ctx(run))
    assert key in [e.key for e in mine]
    others = [e for e in errors if e.key == key and e not in mine]
    assert others == []  # without the rule the key would pass (the mutation test of the parse oracle, here)
    assert "slime" in mine[0].problem or "SGLang" in mine[0].problem  # each names what it ports


@pytest.mark.parametrize("overrides", ACCEPTED, ids=[" ".join(o) for o in ACCEPTED])
def test_the_fixed_neighbour_is_accepted(overrides, tmp_path):
    run, _ = _run(overrides, tmp_path)
    assert [e.render() for e in validate(run)] == []


# slime's own code does what the rules say ------------------------------------------------------------------
@pytest.fixture(scope="module")
def slime_code():
    from trainstack.tiny import slime_upstream

    slime_upstream.load()


@needs_slime
def test_slimes_eval_paths_fail_as_the_rules_say(slime_code):
    from slime.rollout import fully_async_rollout, sft_rollout, sglang_rollout

    with pytest.raises(ValueError, match="doesn't support evaluation"):
        fully_async_rollout.generate_rollout_fully_async(types.SimpleNamespace(), 0, None, evaluation=True)
    with pytest.raises(AssertionError):
        sft_rollout.generate_rollout(types.SimpleNamespace(), 0, None, evaluation=True)
    with pytest.raises(AssertionError, match="Group RM is not supported for eval rollout"):
        asyncio.run(sglang_rollout.eval_rollout(types.SimpleNamespace(group_rm=True), 0))


@needs_slime
def test_slimes_reward_shapes_are_as_the_rules_say(slime_code):
    from slime.rollout.rm_hub import async_rm
    from slime.utils.types import Sample

    def score(rm_type: str):
        args = types.SimpleNamespace(custom_rm_path=None, rm_type=rm_type, reward_key=None)
        return asyncio.run(async_rm(args, Sample(prompt="p", response="\\boxed{2}", label="2")))

    assert isinstance(score("dapo"), dict) and "score" in score("dapo")
    assert isinstance(score("boxed_dapo"), dict)
    for rm in ("math", "deepscaler", "f1"):
        assert isinstance(score(rm), (int, float)), rm
    keyed = types.SimpleNamespace(reward_key="score")
    with pytest.raises(TypeError):  # a number indexed by reward_key (utils/types.py:247)
        Sample(reward=1.0).get_reward_value(keyed)


# the model's context, read where the trainer runs ------------------------------------------------------------
def _gpu_host(tmp_path: Path, extra: list[str], config: dict | None) -> list[str]:
    overrides = [*QWEN, "args.no_save_optim=true", *extra]
    fake_gpu_host(tmp_path, overrides)
    if config is not None:
        run, _ = _run(overrides, tmp_path)
        Path(run.args["hf_checkpoint"], "config.json").write_text(json.dumps(config))
    return overrides


def _preflight_keys(overrides: list[str], where: Path) -> list[str]:
    run, cmd = _run(overrides, where)
    try:
        preflight(run, cmd, launching=False)
        return []
    except ConfigErrors as err:
        return sorted(e.key for e in err.errors)


@pytest.mark.parametrize("config, refused", [
    ({"max_position_embeddings": 40960}, True),
    ({"text_config": {"max_position_embeddings": 40960}}, True),
    ({"max_position_embeddings": 40960, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, False),
    (None, False),  # no config.json here: nothing to judge
])
def test_the_models_context_is_read_on_the_trainers_host(tmp_path, config, refused):
    overrides = _gpu_host(tmp_path, ["env.rollout_max_response_len=61440"], config)
    assert ("env.rollout_max_response_len" in _preflight_keys(overrides, tmp_path)) == refused


def test_a_remote_trainer_checks_the_context_before_it_starts(tmp_path):
    from trainstack.preflight.checks import check_stored
    from trainstack.run.spec import RunSpec

    overrides = _gpu_host(tmp_path, ["env.rollout_max_response_len=61440", "cluster=slurm_8xh100"],
                          {"max_position_embeddings": 40960})
    run, cmd = _run(overrides, tmp_path)
    report = preflight(run, cmd, launching=False)  # the submit host defers it
    assert any("config.json) fits the response budgets" in d for d in report.deferred)
    with pytest.raises(ConfigErrors) as err:  # `trainstack exec` on the trainer's host
        check_stored(RunSpec.from_run(run, cmd))
    assert "args.rollout_max_response_len" in [e.key for e in err.value.errors]  # exec names dests as args.*


def test_tiny_sequence_limits_are_checked_in_the_dry_run(tmp_path):
    keys = _preflight_keys(["env.rollout_max_response_len=32"], tmp_path)  # 32 positions: no room for a prompt
    assert keys == ["env.rollout_max_response_len"]
    assert _preflight_keys(["env.rollout_max_response_len=32", "args.sglang_allow_auto_truncate=true"], tmp_path) == []


# the two refusals slime would have run --------------------------------------------------------------------------
def test_a_trainer_of_12_gpus_on_two_nodes_of_8_is_accepted(tmp_path):
    run, cmd = _run([*QWEN, "cluster=slurm_8xh100", "cluster.num_nodes=2", "cluster.colocate=false",
                     "cluster.rollout_num_gpus=4"], tmp_path)
    assert [e.render() for e in validate(run)] == []
    argv = cmd.argv
    assert argv[argv.index("--actor-num-nodes") + 1] == "1"
    assert argv[argv.index("--actor-num-gpus-per-node") + 1] == "12"
    run, _ = _run([*QWEN, "cluster=slurm_8xh100", "cluster.num_nodes=2", "args.actor_num_nodes=1",
                   "args.actor_num_gpus_per_node=12"], tmp_path)
    assert [e.render() for e in validate(run)] == []
    run, _ = _run([*QWEN, "cluster=slurm_8xh100", "cluster.num_nodes=2", "args.actor_num_gpus_per_node=24"], tmp_path)
    assert [e.key for e in validate(run)] == ["args.actor_num_gpus_per_node"]  # 24 > 16: the total still counts


def test_ppo_with_offload_train_false_is_accepted_with_a_warning(tmp_path):
    run, _ = _run([*QWEN, "algo=ppo", "args.offload_train=false"], tmp_path)
    assert [e.render() for e in validate(run)] == []
    assert any("slime utils/arguments.py:1961-1962" in w for w in run.warnings)


@pytest.mark.parametrize("n_input, max_new, refused", [(8, 1, True), (5, 4, True), (5, 3, False)])
def test_the_tiny_server_refuses_what_sglang_refuses(n_input, max_new, refused):
    """Context 8: an input of 8 is refused, 5 + 4 is refused, 5 + 3 fits (SGLang's `>=` and `>`)."""
    from trainstack.tiny.server import TinySGLangServer

    model = types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=8))
    body = {"input_ids": [3] * n_input, "sampling_params": {"max_new_tokens": max_new}}
    server = TinySGLangServer(lambda: model)
    if refused:
        with pytest.raises(ValueError, match="context length"):
            server._request(body)
    else:
        server._request(body)
    TinySGLangServer(lambda: model, allow_auto_truncate=True)._request({**body, "input_ids": [3] * 5})  # cut, not refused


@pytest.mark.slow
def test_the_fully_async_rollout_runs_to_a_clean_exit_on_cpu(tmp_path):
    """slime's fully-async rollout (a worker thread with its own event loop) trains and saves, and the trainer
    stops that worker before its server and HTTP client go: exit 0 (it was 134 or 1: aclose on another loop)."""
    res = run_py(f"paths.runs_root={tmp_path}/runs", "args.rollout_function_path=" + FULLY_ASYNC, "env.num_rollout=2",
                 "env.eval_interval=null", "args.sglang_server_concurrency=8", *SMALL_BATCH, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "(finished, exit code 0)" in res.stderr
    for noise in ("Traceback", "Unclosed client session", "Unclosed connector", "attached to a different loop"):
        assert noise not in res.stderr
    assert list((tmp_path / "runs").glob("*/checkpoints/iter_0000001"))
