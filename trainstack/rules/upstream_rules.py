"""Checks slime, Megatron and SGLang make after parsing, ported so they fail before launch.

Each rule cites the upstream check (file:line at slime 624b824a / Megatron-LM 1dcf0daf with
slime's patches / sglang 0.5.15.post1); the parse oracle (docs/slime_oracle.md) proves that
trainstack refuses every argv slime's real parser refuses. A built-in rule set, registered like a
feature (validate.rules hooks, before any feature's own) so validate.py need not import it back.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from trainstack.errors import ConfigError
from trainstack.rules.rulebook import UPSTREAM, Rule, rule  # noqa: F401  (UPSTREAM, Rule: this module's API too)

if TYPE_CHECKING:  # light at import: `trainstack --help` discovers the features too
    from trainstack.hooks import Registry
    from trainstack.rules.validate import Ctx


def register(registry: "Registry") -> None:
    from trainstack import hooks
    from trainstack.rules import (  # noqa: F401  (@rule adds to UPSTREAM)
        dest_domains, megatron_rules, range_rules, runtime_rules, switch_rules)

    for fn in UPSTREAM:
        registry.add(hooks.RULES, fn, order=10)

# slime backends/megatron_utils/arguments.py _ALLGATHER_CP_DSA_ARCHITECTURES, recognised by the
# model's --spec module (the HF architecture is only known on the GPU node).
DSA_SPEC_MARKERS = ("glm5", "deepseek_v32", "glm_moe_dsa")


@rule
def custom_generate_replay(ctx: Ctx) -> list[ConfigError]:
    """slime ray/rollout.py:718-738 (`_convert_samples_to_train_data`): with --rollout-top-p != 1 every
    sample must carry `rollout_top_p_token_ids`/`_offsets` (asserted), and with
    --use-rollout-routing-replay `rollout_routed_experts` (replayed in training). slime's own `generate`
    fills them from SGLang's meta_info (sglang_rollout.py:106-107, 181-182); a custom generate function
    builds its samples itself and does not, so every rollout fails at the assertion."""
    if not ctx.is_set("custom_generate_function_path"):
        return []
    out = []
    top_p = ctx.get("rollout_top_p")
    if isinstance(top_p, (int, float)) and top_p != 1.0:
        out.append(ctx.err("rollout_top_p", f"rollout_top_p {top_p} with a custom generate function: slime then "
                           "asserts every sample carries the top-p token ids SGLang returns, which a custom "
                           "generate function does not fill", f"set {ctx.key('rollout_top_p')}=1.0",
                           "custom_generate_function_path"))
    if ctx.get("use_rollout_routing_replay"):
        out.append(ctx.err("use_rollout_routing_replay", "routing replay with a custom generate function: slime "
                           "replays the routed experts SGLang returns to its own generate, which a custom generate "
                           "function does not fill", f"set {ctx.key('use_rollout_routing_replay')}=false",
                           "custom_generate_function_path"))
    return out


@rule
def lr_floor(ctx: Ctx) -> list[ConfigError]:
    """Megatron training/arguments.py:835 `assert args.min_lr <= args.lr`."""
    lr, min_lr = ctx.get("lr"), ctx.get("min_lr")
    if isinstance(lr, (int, float)) and isinstance(min_lr, (int, float)) and min_lr > lr:
        return [ctx.err("min_lr", f"min_lr {min_lr} is above lr {lr} (Megatron asserts min_lr <= lr)",
                        f"set {ctx.key('min_lr')} <= {lr}, or raise lr", "lr")]
    return []


@rule
def save_cadence(ctx: Ctx) -> list[ConfigError]:
    """Megatron training/arguments.py:837-842: with --save, save_interval set and > 0; a retain
    interval is a positive multiple of it."""
    if not ctx.is_set("save"):
        return []
    interval = ctx.get("save_interval")
    if interval is None:
        return [ctx.err("save_interval", "is null, but Megatron asserts save_interval is set whenever --save is "
                        "(and trainstack always sets --save to the run's checkpoint dir)",
                        "remove the null to get trainstack's default, or set args.save_interval=N")]
    retain = ctx.get("save_retain_interval")
    if isinstance(interval, int) and interval > 0 and isinstance(retain, int) and (retain <= 0 or retain % interval):
        return [ctx.err("save_retain_interval", f"must be a positive multiple of save_interval ({interval})",
                        f"use a multiple of {interval}", "save_interval")]
    return []


@rule
def recompute_settings(ctx: Ctx) -> list[ConfigError]:
    """Megatron training/arguments.py:898 selective recompute takes no recompute_method."""
    if ctx.get("recompute_granularity") == "selective" and ctx.is_set("recompute_method"):
        return [ctx.err("recompute_method", "Megatron does not support a recompute method with "
                        "recompute_granularity=selective", "set recompute_method=null (and recompute_num_layers=null),"
                        " or recompute_granularity=full", "recompute_granularity")]
    return []


@rule
def pipeline_stage_layers(ctx: Ctx) -> list[ConfigError]:
    """slime megatron_utils/arguments.py:90 first/last stage layer counts need PP > 1."""
    if int(ctx.get("pipeline_model_parallel_size") or 1) != 1:
        return []
    return [ctx.err(d, "only applies to pipeline parallelism; slime asserts it is unset when "
                    "pipeline_model_parallel_size is 1", f"remove {ctx.key(d)} or set pipeline_model_parallel_size > 1",
                    "pipeline_model_parallel_size")
            for d in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers") if ctx.is_set(d)]


@rule
def mtp_training(ctx: Ctx) -> list[ConfigError]:
    """slime utils/arguments.py:2008 `assert args.mtp_num_layers` with --enable-mtp-training."""
    if ctx.get("enable_mtp_training") and not ctx.get("mtp_num_layers"):
        return [ctx.err("enable_mtp_training", "multi-token-prediction training needs mtp_num_layers >= 1",
                        "set args.mtp_num_layers=1 (a model with an MTP head), or drop enable_mtp_training",
                        "mtp_num_layers")]
    return []


@rule
def param_selection(ctx: Ctx) -> list[ConfigError]:
    """slime utils/arguments.py:2038 only-train and freeze lists exclude each other."""
    if ctx.get("only_train_params_name_list") and ctx.get("freeze_params_name_list"):
        return [ctx.err("freeze_params_name_list", "slime accepts only one of only_train_params_name_list and "
                        "freeze_params_name_list", "keep one list", "only_train_params_name_list")]
    return []


@rule
def prompt_length(ctx: Ctx) -> list[ConfigError]:
    """slime utils/arguments.py:2033 a prompt must leave room for one generated token."""
    context, prompt = ctx.get("rollout_max_context_len"), ctx.get("rollout_max_prompt_len")
    if isinstance(context, int) and isinstance(prompt, int) and prompt > context - 1:
        return [ctx.err("rollout_max_prompt_len", f"must be below rollout_max_context_len ({context}) so at least "
                        "one token is generated", f"set it to at most {context - 1}", "rollout_max_context_len")]
    return []


@rule
def allgather_cp(ctx: Ctx) -> list[ConfigError]:
    """slime megatron_utils/arguments.py:32 allgather CP needs a DSA-attention model."""
    if not ctx.get("allgather_cp") or int(ctx.get("context_parallel_size") or 1) <= 1:
        return []
    spec = " ".join(map(str, ctx.get("spec") or []))
    family = str(ctx.run.meta.get("model", {}).get("family", ""))
    if any(m in spec or m in family for m in DSA_SPEC_MARKERS):
        return []
    return [ctx.err("allgather_cp", "with context_parallel_size > 1 is only supported for DSA-attention models "
                    "(DeepSeek-V3.2, GLM-5); other models would silently scramble token order",
                    "remove allgather_cp, or set context_parallel_size=1", "context_parallel_size")]


@rule
def expert_layout(ctx: Ctx) -> list[ConfigError]:
    """Megatron's parallel state needs EP x ETP x PP to divide the training world (neither slime nor
    Megatron's validate_args checks it: it fails when the process groups are built)."""
    if ctx.run.cluster.backend == "tiny" or not ctx.get("num_experts"):
        return []
    ep = int(ctx.get("expert_model_parallel_size") or 1)
    etp = int(ctx.get("expert_tensor_parallel_size") or ctx.get("tensor_model_parallel_size") or 1)
    pp = int(ctx.get("pipeline_model_parallel_size") or 1)
    world = ctx.actor_gpus
    if world % (ep * etp * pp):
        return [ctx.err("expert_model_parallel_size", f"EP x ETP x PP = {ep} x {etp} x {pp} = {ep * etp * pp} does "
                        f"not divide the {world} training GPUs (the expert process groups cannot be built)",
                        f"use an expert parallel size whose product with ETP and PP divides {world}",
                        "expert_tensor_parallel_size", "pipeline_model_parallel_size", "actor_num_gpus_per_node")]
    return []


@rule
def sglang_engine_split(ctx: Ctx) -> list[ConfigError]:
    """slime sglang_utils/arguments.py:174 engine GPUs split evenly into SGLang pipeline stages."""
    if ctx.train_only:
        return []
    pp, per_engine = int(ctx.get("sglang_pp_size") or 1), int(ctx.get("rollout_num_gpus_per_engine") or 1)
    if pp > 1 and per_engine % pp:
        return [ctx.err("sglang_pp_size", f"rollout_num_gpus_per_engine ({per_engine}) is not divisible by the "
                        f"SGLang pipeline size ({pp})", f"use a divisor of {per_engine}", "rollout_num_gpus_per_engine")]
    return []


@rule
def engine_flags_in_train_only(ctx: Ctx) -> list[ConfigError]:
    """slime skips its SGLang parser in train-only runs (`_pre_parse_mode`), so every --sglang-* and
    --router-* value would be silently ignored."""
    if not ctx.train_only:
        return []
    ignored = sorted(d for d, v in ctx.run.args.items()
                     if v is not None and d in ctx.table and ctx.table[d].group == "sglang")
    return [ctx.err(d, "is never read: this is a train-only run (debug_train_only / load_debug_rollout_data), and "
                    "slime skips SGLang and its router entirely", f"remove {ctx.key(d)}", "debug_train_only")
            for d in ignored]


SLIME_DEFAULT_SEQ_LENGTH = 4096  # slime megatron_utils/arguments.py:165 when --seq-length is unset
NCCL_ALGO_CHOICES = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "^NVLS")


def _seq_length(ctx: Ctx) -> int:
    return int(ctx.get("seq_length") or SLIME_DEFAULT_SEQ_LENGTH)


@rule
def attention_shapes(ctx: Ctx) -> list[ConfigError]:
    """Megatron training/arguments.py:812 hidden_size divisible by heads (without kv_channels)."""
    h, heads = ctx.get("hidden_size"), ctx.get("num_attention_heads")
    if ctx.get("kv_channels") is None and isinstance(h, int) and isinstance(heads, int) and heads > 0 and h % heads:
        return [ctx.err("hidden_size", f"{h} is not divisible by num_attention_heads {heads}",
                        "set kv_channels (the head dimension), or a hidden size divisible by the head count",
                        "num_attention_heads")]
    return []


@rule
def sequence_lengths(ctx: Ctx) -> list[ConfigError]:
    """Megatron training/arguments.py:816-829: CP needs seq_length % (2 CP) == 0; positions cover seq_length."""
    out = []
    seq, cp = _seq_length(ctx), int(ctx.get("context_parallel_size") or 1)
    if cp > 1 and seq % (2 * cp):
        out.append(ctx.err("context_parallel_size", f"seq_length {seq} is not a multiple of 2 x CP = {2 * cp}",
                           f"set args.seq_length to a multiple of {2 * cp}", "seq_length"))
    pos = ctx.get("max_position_embeddings")
    if isinstance(pos, int) and pos < seq:
        out.append(ctx.err("max_position_embeddings", f"{pos} is below seq_length {seq}",
                           f"set max_position_embeddings >= {seq} or a smaller seq_length", "seq_length"))
    return out


@rule
def activation_recompute(ctx: Ctx) -> list[ConfigError]:
    """Megatron training/arguments.py:883-891 distributed saved activations; :914 TP comm overlap."""
    out = []
    tp = int(ctx.get("tensor_model_parallel_size") or 1)
    if ctx.get("distribute_saved_activations") and (
            tp <= 1 or ctx.get("recompute_granularity") != "full" or not ctx.is_set("recompute_method")):
        out.append(ctx.err("distribute_saved_activations", "needs TP > 1, recompute_granularity=full and a "
                           "recompute_method", "set those, or drop distribute_saved_activations",
                           "tensor_model_parallel_size", "recompute_granularity", "recompute_method"))
    sp = bool(ctx.get("sequence_parallel")) and tp > 1 and not ctx.get("distribute_saved_activations")
    if ctx.get("tp_comm_overlap") and not sp:
        out.append(ctx.err("tp_comm_overlap", "needs sequence parallelism (Megatron turns it off at TP=1)",
                           "set sequence_parallel=true with TP > 1, or drop tp_comm_overlap",
                           "sequence_parallel", "tensor_model_parallel_size"))
    return out


@rule
def overlap_settings(ctx: Ctx) -> list[ConfigError]:
    """Megatron training/arguments.py:600 overlap_param_gather needs overlap_grad_reduce."""
    if ctx.get("overlap_param_gather") and not ctx.get("overlap_grad_reduce"):
        return [ctx.err("overlap_param_gather", "needs overlap_grad_reduce", "set overlap_grad_reduce=true",
                        "overlap_grad_reduce")]
    return []


@rule
def expert_parallel_needs_experts(ctx: Ctx) -> list[ConfigError]:
    """Megatron training/arguments.py:1025 EP > 1 needs an MoE model."""
    if int(ctx.get("expert_model_parallel_size") or 1) > 1 and not ctx.get("num_experts"):
        return [ctx.err("expert_model_parallel_size", "expert parallelism needs an MoE model (num_experts unset)",
                        "set expert_model_parallel_size=1 for a dense model", "num_experts")]
    return []


@rule
def deterministic_mode(ctx: Ctx) -> list[ConfigError]:
    """Megatron training/arguments.py:1072-1078: no flash attention or fused cross entropy, and the
    trainer's environment sets NCCL_ALGO to an algorithm NCCL runs deterministically."""
    if not ctx.get("deterministic_mode") or ctx.run.cluster.backend != "slime":
        return []
    out = [ctx.err(d, "is not deterministic, so Megatron refuses it with deterministic_mode", f"remove {ctx.key(d)}",
                   "deterministic_mode") for d in ("use_flash_attn", "cross_entropy_loss_fusion") if ctx.get(d)]
    algo = ctx.run.runtime_env.env_vars.get("NCCL_ALGO")
    if algo not in NCCL_ALGO_CHOICES:
        out.append(ConfigError("runtime_env.env_vars.NCCL_ALGO", f"deterministic_mode needs NCCL_ALGO in the "
                               f"trainer's environment, one of {', '.join(NCCL_ALGO_CHOICES)}",
                               "set runtime_env.env_vars.NCCL_ALGO=Ring", value=algo,
                               related={"args.deterministic_mode": True}))
    return out


@rule
def cuda_connections(ctx: Ctx) -> list[ConfigError]:
    """Megatron training/arguments.py:950 TP or CP > 1 needs CUDA_DEVICE_MAX_CONNECTIONS=1 (Hopper and
    older; trainstack sets it unless the run's environment overrides it)."""
    if ctx.run.cluster.backend != "slime":
        return []
    value = ctx.run.runtime_env.env_vars.get("CUDA_DEVICE_MAX_CONNECTIONS")
    parallel = int(ctx.get("tensor_model_parallel_size") or 1) > 1 or int(ctx.get("context_parallel_size") or 1) > 1
    if value is not None and str(value) != "1" and parallel and not ctx.get("overlap_moe_expert_parallel_comm"):
        return [ConfigError("runtime_env.env_vars.CUDA_DEVICE_MAX_CONNECTIONS", "Megatron asserts it is 1 with "
                            "tensor or context parallelism on H100/A100", "remove the override (trainstack sets 1)",
                            value=value)]
    return []


@rule
def weight_sync_settings(ctx: Ctx) -> list[ConfigError]:
    """slime utils/arguments.py:2041-2075: disk weight sync needs a shared dir; --release-train needs
    full disk sync, no critic and no kept old actor; delta sync needs disk transport, separate GPUs
    and a local checkpoint dir."""
    out = []
    mode, transport = ctx.get("update_weight_mode"), ctx.get("update_weight_transport")
    if transport == "disk" and not ctx.is_set("update_weight_disk_dir"):
        out.append(ctx.err("update_weight_disk_dir", "is required with update_weight_transport=disk (the trainer "
                           "writes the weights, the engines read them)", "set args.update_weight_disk_dir to a "
                           "filesystem shared by the trainer and the rollout engines", "update_weight_transport"))
    if ctx.get("release_train"):
        if mode != "full" or transport != "disk":
            out.append(ctx.err("release_train", "requires update_weight_mode=full and update_weight_transport=disk "
                               "(the next Megatron actor reloads from disk)", "set args.update_weight_mode=full "
                               "args.update_weight_transport=disk args.update_weight_disk_dir=DIR",
                               "update_weight_transport"))
        if ctx.get("advantage_estimator") == "ppo":
            out.append(ctx.err("release_train", "does not support critic training (PPO) yet",
                               "remove args.release_train, or use another advantage estimator", "advantage_estimator"))
        if ctx.get("keep_old_actor"):
            out.append(ctx.err("release_train", "does not support --keep-old-actor", "remove one of them",
                               "keep_old_actor"))
    if mode == "delta":
        if transport != "disk":
            out.append(ctx.err("update_weight_mode", "delta requires update_weight_transport=disk",
                               "set args.update_weight_transport=disk", "update_weight_transport"))
        if ctx.get("colocate"):
            out.append(ctx.err("update_weight_mode", "delta is not supported with colocated training and rollout "
                               "(weights move by CUDA IPC there)", "use cluster.colocate=false, or mode full",
                               "colocate"))
        if not ctx.is_set("update_weight_local_checkpoint_dir"):
            out.append(ctx.err("update_weight_local_checkpoint_dir", "is required with update_weight_mode=delta "
                               "(a rollout-host-local directory)", "set args.update_weight_local_checkpoint_dir",
                               "update_weight_mode"))
    return out
