"""Which slime flags the tiny backend honours, ignores, or refuses.

The rollout side runs slime's own code (rollout.py), so every rollout-side flag slime's rollout
code reads is honoured by that code (custom rollout/eval functions, data sources, filters,
reward post-processing, the reward hub's --rm-type values, chat templates...).

Principle: a flag slime accepts is always *parsed*. If the tiny backend implements its
meaning it is SUPPORTED. If it only tunes hardware, parallelism, kernels, memory or the
real serving stack (so dropping it changes speed, not what is learned) it is IGNORED and
listed once. If dropping it would silently train something different from what slime
would train (a critic, another loss, reward-KL, off-policy correction, a replaced rollout
pipeline...) it is REFUSED with exit code 2. Anything not classified below falls back to
IGNORED (listed), so nothing is ever dropped silently.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from trainstack.config.backends import TINY_CAPABILITIES as CAPABILITIES  # shared with the validator

# dests whose meaning the tiny backend implements
SUPPORTED: frozenset[str] = frozenset(
    """
    num_layers hidden_size num_attention_heads ffn_hidden_size seq_length max_position_embeddings
    untie_embeddings_and_output_weights hidden_dropout attention_dropout
    group_query_attention num_query_groups kv_channels rotary_base layernorm_epsilon
    prompt_data input_key label_key metadata_key rollout_shuffle seed num_rollout num_epoch
    rollout_batch_size n_samples_per_prompt global_batch_size num_steps_per_rollout
    rollout_max_response_len rollout_temperature rollout_top_p rollout_stop rollout_stop_token_ids
    lr min_lr lr_decay_style lr_warmup_iters lr_warmup_fraction lr_decay_iters weight_decay clip_grad
    adam_beta1 adam_beta2 adam_eps optimizer sgd_momentum
    advantage_estimator eps_clip eps_clip_high eps_clip_c use_kl_loss kl_loss_coef kl_loss_type
    entropy_coef normalize_advantages grpo_std_normalization gamma calculate_per_token_loss
    use_rollout_logprobs kl_coef
    rm_type custom_rm_path reward_key eval_reward_key custom_generate_function_path hf_checkpoint
    rollout_sample_hook_path custom_config_path
    eval_interval eval_prompt_data eval_input_key eval_label_key n_samples_per_eval_prompt
    eval_max_response_len eval_temperature eval_top_p skip_eval_before_train
    save load ref_load ref_ckpt_step save_interval ckpt_step start_rollout_id no_save_optim save_hf
    save_debug_rollout_data
    no_load_optim no_load_rng finetune rollout_global_dataset
    use_wandb wandb_project wandb_group wandb_team wandb_key wandb_host wandb_mode wandb_dir
    wandb_run_id wandb_random_suffix wandb_always_use_train_step
    use_tensorboard tb_project_name tb_experiment_name
    sglang_router_ip sglang_router_port over_sampling_batch_size train_backend
    rollout_top_k rollout_max_prompt_len rollout_max_context_len rollout_skip_special_tokens rollout_seed
    eval_top_k eval_max_prompt_len eval_max_context_len eval_min_new_tokens rewards_normalization
    rollout_function_path eval_function_path data_source_path buffer_filter_path dynamic_sampling_filter_path
    rollout_sample_filter_path rollout_all_samples_process_path custom_reward_post_process_path
    custom_convert_samples_to_train_data_path group_rm rm_url apply_chat_template apply_chat_template_kwargs
    tool_key sglang_server_concurrency log_reward_category sglang_allow_auto_truncate
    """.split()
)



# slime's defaults the tiny backend's rollout runs (the upstream-contract test checks they exist)
_DEFAULT_ROLLOUT_FN = "slime.rollout.sglang_rollout.generate_rollout"
_DEFAULT_DATA_SOURCE = "slime.rollout.data_source.RolloutDataSourceWithBuffer"


@dataclass(frozen=True)
class Refusal:
    """A flag whose value the tiny backend would get wrong: ``bad(value, args)`` -> refuse."""

    dest: str
    bad: Callable[[Any, Any], bool]
    why: str
    fix: str


def _set(v: Any, _a: Any = None) -> bool:
    return bool(v) and v not in ([], {}, "{}")


REFUSALS: tuple[Refusal, ...] = (
    Refusal("advantage_estimator", lambda v, a: v not in CAPABILITIES.estimators,
            f"not implemented by the tiny backend (it implements {', '.join(CAPABILITIES.estimators)})",
            f"use --advantage-estimator {' or '.join(CAPABILITIES.estimators)}"),
    Refusal("loss_type", lambda v, a: v not in CAPABILITIES.loss_types, "only the policy-gradient loss is implemented",
            "drop --loss-type (SFT and custom losses need the real slime backend)"),
    Refusal("custom_loss_function_path", _set, "custom losses are not implemented", "drop the flag"),
    Refusal("kl_coef", lambda v, a: v not in (None, 0, 0.0), "reward-shaping KL (--kl-coef) is not implemented",
            "use --use-kl-loss --kl-loss-coef instead, or --kl-coef 0"),
    Refusal("debug_rollout_only", _set, "rollout-only debugging has no meaning without SGLang", "drop the flag"),
    Refusal("debug_train_only", _set, "train-only debugging replays dumps the tiny backend cannot read", "drop the flag"),
    Refusal("load_debug_rollout_data", _set, "replaying rollout dumps is not implemented", "drop the flag"),
    Refusal("partial_rollout", _set, "partial rollouts (buffered aborted samples) are not implemented", "drop the flag"),
    Refusal("use_tis", _set, "truncated importance sampling is not implemented", "drop the flag"),
    Refusal("custom_tis_function_path", _set, "TIS functions are not implemented", "drop the flag"),
    Refusal("get_mismatch_metrics", _set, "needs TIS", "drop the flag"),
    Refusal("use_opd", _set, "on-policy distillation is not implemented", "drop the flag"),
    Refusal("rollout_data_postprocess_path", _set, "not implemented", "drop the flag"),
    Refusal("custom_advantage_function_path", _set, "custom advantages are not implemented", "drop the flag"),
    Refusal("custom_pg_loss_reducer_function_path", _set, "custom loss reducers are not implemented", "drop the flag"),
    Refusal("multimodal_keys", _set, "multimodal inputs are not supported", "drop the flag"),
    Refusal("eval_config", _set, "--eval-config is not implemented", "use --eval-prompt-data NAME PATH"),
    Refusal("enable_mtp_training", _set, "multi-token prediction is not implemented", "drop the flag"),
    Refusal("keep_old_actor", _set, "not implemented", "drop the flag"),
    Refusal("use_routing_replay", _set, "MoE routing replay is not implemented", "drop the flag"),
    Refusal("use_rollout_routing_replay", _set, "MoE routing replay is not implemented", "drop the flag"),
    Refusal("lr_decay_style", lambda v, a: v not in ("constant", "linear", "cosine"),
            "only constant, linear and cosine LR schedules are implemented", "use --lr-decay-style constant|linear|cosine"),
    Refusal("optimizer", lambda v, a: v not in ("adam", "sgd"), "only adam and sgd are implemented",
            "use --optimizer adam"),
    Refusal("only_train_params_name_list", _set, "parameter freezing is not implemented", "drop the flag"),
    Refusal("freeze_params_name_list", _set, "parameter freezing is not implemented", "drop the flag"),
    Refusal("num_critic_only_steps", lambda v, a: bool(v), "there is no critic", "drop the flag"),
    Refusal("rollout_external_engine_addrs", _set, "external engines are not called", "drop the flag"),
)

# Shown in docs; every dest not SUPPORTED and not refused is ignored (these are examples).
IGNORED_EXAMPLES = (
    "tensor/pipeline/context/expert parallel sizes, sequence parallel, recompute, dynamic batch size, "
    "max tokens per GPU, micro batch size, offload, colocate, actor/rollout node and GPU counts, "
    "attention backend, fusion/precision switches (bf16, fp32 softmax, grad reduce in fp32), every "
    "--sglang-* and --router-* flag, rollout engine sizes, distributed timeouts, "
    "architecture switches the Qwen3 model has fixed (swiglu, RMSNorm, qk-layernorm, no linear biases, vocab size...)"
)


def refusals_for(explicit: set[str], args: Any) -> list[tuple[Refusal, Any]]:
    """The refusals triggered by flags the user passed (defaults never trigger one)."""
    out = []
    for r in REFUSALS:
        if r.dest in explicit and r.bad(getattr(args, r.dest, None), args):
            out.append((r, getattr(args, r.dest, None)))
    return out


def ignored_dests(explicit: set[str], refused: set[str]) -> list[str]:
    return sorted(d for d in explicit if d not in SUPPORTED and d not in refused)
