"""slime's run-time paths that die before (or at) rollout 0, ported as rules.

slime's parser accepts these; its run then fails in the rollout manager or the trainer with a
traceback. Each rule cites the slime line (at the pinned commit 624b824a) whose behaviour it ports;
`tests/test_runtime_rules.py` reads every cited line in the submodule and runs the cases. Registered
with the upstream rules (trainstack/rules/rulebook.py, trainstack/rules/upstream_rules.py).

- an eval the eval function cannot serve: slime evaluates with `--eval-function-path`, which defaults
  to the rollout function (utils/arguments.py:1968-1969), before rollout 0 and every `eval_interval`
  (train.py:36-37, :50-51, :90-91; train_async.py:72-73);
- reward shapes: `--rm-type dapo` scores are dicts, the other rule-based scores numbers, and
  `--reward-key` / `--eval-reward-key` index them (utils/types.py:246-247, rollout/sglang_rollout.py:617-620);
- on-policy distillation: the teacher settings slime's parser checks, and the teacher log-probs the
  loss needs;
- prompt + response against the model's context (trainstack/rules/context_length.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from trainstack.errors import ConfigError
from trainstack.rules.rulebook import rule

if TYPE_CHECKING:
    from trainstack.rules.validate import Ctx

DEFAULT_ROLLOUT = "slime.rollout.sglang_rollout.generate_rollout"
# rollout functions that refuse evaluation=True: dotted path -> (slime source, what they raise)
NO_EVAL = {
    "slime.rollout.fully_async_rollout.generate_rollout_fully_async": (
        "slime/rollout/fully_async_rollout.py:272-273", "ValueError: fully-async rollout doesn't support evaluation mode"),
    "slime.rollout.sft_rollout.generate_rollout": ("slime/rollout/sft_rollout.py:29", "AssertionError (assert not evaluation)"),
}
OPD_REWARD = "slime.rollout.on_policy_distillation.reward_func"
OPD_POST_PROCESS = "slime.rollout.on_policy_distillation.post_process_rewards"
# rule-based rewards of slime's reward hub (rollout/rm_hub/__init__.py:65-99), by the shape of their score
DICT_REWARDS = {"dapo": "slime/rollout/rm_hub/math_dapo_utils.py:288-292 returns {score, acc, pred}"}
NUMBER_REWARDS = ("deepscaler", "math", "f1", "gpqa", "ifbench", "random")


def eval_trigger(ctx: Ctx) -> str | None:
    """The slime line that runs an eval for this run (None: it never evaluates)."""
    if ctx.get("eval_interval") is None or ctx.get("debug_train_only"):  # ray/rollout.py:514-516: no eval
        return None
    if ctx.run.entrypoint == "train_async.py":
        return "train_async.py:72-73 (every eval_interval rollouts)"
    if ctx.get("num_rollout") == 0:
        return "train.py:36-37 (an eval-only run)"
    if not ctx.get("skip_eval_before_train"):
        return "train.py:50-51 (before rollout 0)"
    return "train.py:90-91 (every eval_interval rollouts)"


def eval_function(ctx: Ctx) -> tuple[str, str]:
    """(the eval function's dotted path, the dest that names it): slime defaults it to the rollout function."""
    if ctx.is_set("eval_function_path"):
        return str(ctx.get("eval_function_path")), "eval_function_path"
    return str(ctx.get("rollout_function_path") or DEFAULT_ROLLOUT), "rollout_function_path"


@rule
def eval_function_serves_eval(ctx: Ctx) -> list[ConfigError]:
    """An eval is scheduled but the eval function (the rollout function unless eval_function_path is set,
    slime utils/arguments.py:1968-1969) refuses evaluation=True."""
    when = eval_trigger(ctx)
    fn, dest = eval_function(ctx)
    if when is None or fn not in NO_EVAL:
        return []
    source, raises = NO_EVAL[fn]
    via = "" if dest == "eval_function_path" else (" (eval_function_path is unset, so slime evaluates with the "
                                                    "rollout function: utils/arguments.py:1968-1969)")
    return [ctx.err(dest, f"{fn} cannot evaluate ({source}: {raises}), and slime runs an eval at {when}{via}",
                    f"set {ctx.key('eval_function_path')}={DEFAULT_ROLLOUT} (slime's own eval rollout), or "
                    f"{ctx.key('eval_interval')}=null", "eval_interval")]


@rule
def group_rm_eval(ctx: Ctx) -> list[ConfigError]:
    """slime rollout/sglang_rollout.py:477, :499 `assert not args.group_rm` in slime's eval rollout."""
    when = eval_trigger(ctx)
    if when is None or not ctx.get("group_rm") or eval_function(ctx)[0] != DEFAULT_ROLLOUT:
        return []
    return [ctx.err("group_rm", f"slime's eval rollout asserts group_rm is off (rollout/sglang_rollout.py:477, :499: "
                    f"\"Group RM is not supported for eval rollout\"), and slime runs an eval at {when}",
                    f"set {ctx.key('eval_interval')}=null, or {ctx.key('eval_function_path')}=<an eval rollout of "
                    "your own that scores groups>", "eval_interval")]


def _rm_type(ctx: Ctx) -> str:
    rm = str(ctx.get("rm_type") or "").strip()
    return rm[len("boxed_"):] if rm.startswith("boxed_") else rm  # rm_hub/__init__.py:69-71


@rule
def reward_shape(ctx: Ctx) -> list[ConfigError]:
    """A rule-based reward (no custom_rm_path, no custom generate function scoring the samples) and the
    key that indexes it: `sample.reward[reward_key]` when a key is set, the score itself when not
    (utils/types.py:246-247 for training, rollout/sglang_rollout.py:617-620 for eval)."""
    if ctx.is_set("custom_rm_path") or ctx.is_set("custom_generate_function_path"):
        return []
    rm = _rm_type(ctx)
    evals = eval_trigger(ctx) is not None and eval_function(ctx)[0] == DEFAULT_ROLLOUT
    trains = not ctx.is_set("custom_reward_post_process_path") and not ctx.is_set("custom_convert_samples_to_train_data_path")
    key, eval_key = ctx.get("reward_key"), ctx.get("eval_reward_key") or ctx.get("reward_key")  # arguments.py:1887-1888
    out = []
    if rm in DICT_REWARDS and ((trains and not key) or (evals and not eval_key)):
        out.append(ctx.err("rm_type", f"rm_type {ctx.get('rm_type')} scores each sample with a dict "
                           f"({DICT_REWARDS[rm]}), and without reward_key slime trains and evaluates on the dict "
                           "itself (utils/types.py:246-247, rollout/sglang_rollout.py:617-620): the first reward "
                           "normalisation or eval mean fails with a TypeError",
                           f"set {ctx.key('reward_key')}=score", "reward_key"))
    if rm in NUMBER_REWARDS:
        for dest, used in (("reward_key", trains or (evals and not ctx.get("eval_reward_key"))),
                           ("eval_reward_key", evals)):
            if ctx.get(dest) and used:
                out.append(ctx.err(dest, f"rm_type {rm} scores each sample with a number, which slime indexes "
                                   f"with {dest} ({ctx.get(dest)!r}): sample.reward[{ctx.get(dest)!r}] fails with a "
                                   "TypeError (utils/types.py:247, rollout/sglang_rollout.py:620)",
                                   f"remove {ctx.key(dest)}", "rm_type"))
    return out


@rule
def opd_reward_in_eval(ctx: Ctx) -> list[ConfigError]:
    """slime's OPD reward returns the teacher server's JSON (rollout/on_policy_distillation.py:8-29); its
    post-processing turns it into numbers for training only, so slime's eval averages dicts
    (rollout/sglang_rollout.py:617-620, observability/rollout_metrics.py:232: TypeError)."""
    when = eval_trigger(ctx)
    if (ctx.get("custom_rm_path") != OPD_REWARD or when is None or eval_function(ctx)[0] != DEFAULT_ROLLOUT
            or ctx.is_set("eval_config") or ctx.get("eval_reward_key") or ctx.get("reward_key")):
        return []
    return [ctx.err("custom_rm_path", f"{OPD_REWARD} returns the teacher's JSON response, not a number "
                    "(rollout/on_policy_distillation.py:27-29); slime's eval averages the rewards "
                    f"(observability/rollout_metrics.py:232), which fails on dicts, and it runs an eval at {when}",
                    f"set {ctx.key('eval_interval')}=null (slime's own OPD examples leave eval off), or give the "
                    "eval datasets their own reward (args.eval_config with custom_rm_path per dataset)",
                    "eval_interval")]


@rule
def opd_settings(ctx: Ctx) -> list[ConfigError]:
    """slime utils/arguments.py:1790-1795 (megatron teacher needs --opd-teacher-load) and :1806-1811 (an
    sglang teacher takes none); backends/megatron_utils/loss.py:687-689 (the loss needs teacher
    log-probs, which an sglang teacher's reward post-processing puts on the samples); OPD's reward posts
    to --rm-url (rollout/on_policy_distillation.py:27)."""
    out = []
    if ctx.get("custom_rm_path") == OPD_REWARD and not ctx.is_set("rm_url"):
        out.append(ctx.err("rm_url", f"{OPD_REWARD} posts every sample to the teacher at rm_url "
                           "(rollout/on_policy_distillation.py:27), which is unset", "set args.rm_url="
                           "http://TEACHER:PORT/generate (a SGLang server of the teacher model)", "custom_rm_path"))
    if not ctx.get("use_opd"):
        return out
    kind = ctx.get("opd_type")
    if kind == "sglang" and ctx.is_set("opd_teacher_load"):
        out.append(ctx.err("opd_teacher_load", "is refused by slime with opd_type=sglang (utils/arguments.py:1806-1811:"
                           " the teacher's log-probs come from its server during rollout)",
                           f"remove {ctx.key('opd_teacher_load')}, or set {ctx.key('opd_type')}=megatron", "opd_type"))
    if kind == "megatron" and not ctx.is_set("opd_teacher_load"):
        out.append(ctx.err("opd_type", "megatron on-policy distillation loads the teacher from opd_teacher_load, "
                           "which is unset (slime utils/arguments.py:1790-1795 refuses it)",
                           f"set {ctx.key('opd_teacher_load')}=/path/to/teacher_torch_dist", "opd_teacher_load"))
    fills = any(ctx.is_set(d) for d in ("custom_reward_post_process_path", "custom_convert_samples_to_train_data_path",
                                        "custom_generate_function_path"))
    if kind == "sglang" and not fills:
        out.append(ctx.err("opd_type", "sglang on-policy distillation needs the teacher's log-probs on every sample, "
                           "which nothing here puts there: the loss raises \"requires teacher_log_probs\" at the "
                           "first training step (slime backends/megatron_utils/loss.py:687-689)",
                           f"set {ctx.key('custom_rm_path')}={OPD_REWARD} "
                           f"{ctx.key('custom_reward_post_process_path')}={OPD_POST_PROCESS} and args.rm_url "
                           "(slime's examples/on_policy_distillation/run-qwen3-8B-opd.sh)",
                           "custom_reward_post_process_path"))
    return out


@rule
def response_fits_context(ctx: Ctx) -> list[ConfigError]:
    """Prompt + response within the context SGLang serves (trainstack/rules/context_length.py); the context known
    from the config: --sglang-context-length, or a preset's meta.context_length. The model's own config is
    read where the trainer runs (host checks)."""
    from trainstack.rules.context_length import Context, length_problems

    if ctx.run.cluster.backend != "slime":
        return []
    meta = ctx.run.meta.get("model", {}) or {}
    n, source = ctx.get("sglang_context_length"), "sglang_context_length"
    if not isinstance(n, int) or n <= 0:
        n, source = meta.get("context_length"), f"model={meta.get('name')} meta.context_length"
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return []
    return [ctx.err(dest, problem, fix, *related)
            for dest, problem, fix, related in length_problems(ctx.get, Context(n, source))]
