"""Megatron checks a user's flags reach after slime parsed them, ported so they fail before launch.

These are asserts of Megatron-LM's `validate_args` (megatron/training/arguments.py) and of
`TransformerConfig.__post_init__` (megatron/core/transformer/transformer_config.py) at the pinned
commit 1dcf0daf, and of slime's defaults that feed them (slime 624b824a
backends/megatron_utils/arguments.py). The parser accepts every argv refused here; each one dies
on the GPU nodes when the trainer starts. Registered through upstream_rules (one feature).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from trainstack.errors import ConfigError
from trainstack.rules.rulebook import rule

if TYPE_CHECKING:
    from trainstack.rules.validate import Ctx


def _int(ctx: Ctx, dest: str, default: int = 1) -> int:
    v = ctx.get(dest)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else default


@rule
def optimizer_offload(ctx: Ctx) -> list[ConfigError]:
    """Megatron arguments.py:1189 the CPU optimizer offload reuses the precision-aware optimizer's
    code path, so it asserts --use-precision-aware-optimizer (and delayed FP8 with fp8 param gather)."""
    if not ctx.get("optimizer_cpu_offload"):
        return []
    out = []
    if not ctx.get("use_precision_aware_optimizer"):
        out.append(ctx.err("optimizer_cpu_offload", "needs use_precision_aware_optimizer (Megatron asserts it: the "
                           "CPU offload reuses the precision-aware optimizer's code path)",
                           f"set {ctx.key('use_precision_aware_optimizer')}=true, or "
                           f"{ctx.key('optimizer_cpu_offload')}=false", "use_precision_aware_optimizer"))
    if ctx.get("fp8_param_gather") and ctx.get("fp8_recipe") != "delayed":
        out.append(ctx.err("fp8_param_gather", "with optimizer_cpu_offload needs fp8_recipe=delayed "
                           "(Megatron asserts it)", f"set {ctx.key('fp8_recipe')}=delayed, or drop fp8_param_gather",
                           "fp8_recipe", "optimizer_cpu_offload"))
    return out


@rule
def muon_optimizer(ctx: Ctx) -> list[ConfigError]:
    """Megatron arguments.py:1177-1181 Muon refuses the distributed optimizer, which slime always
    turns on (megatron_utils/arguments.py:153 `args.use_distributed_optimizer = True`), so a Muon
    run can never start with slime at this pin."""
    opt = ctx.get("optimizer")
    if ctx.run.cluster.backend != "slime" or not isinstance(opt, str) or "muon" not in opt:
        return []
    return [ctx.err("optimizer", f"{opt} cannot start with slime: Megatron's Muon refuses the distributed "
                    "optimizer, and slime always turns the distributed optimizer on",
                    "use optimizer adam (algo.optimizer=adam) or sgd")]


@rule
def weight_decay_schedule(ctx: Ctx) -> list[ConfigError]:
    """Megatron arguments.py:866-873 a constant weight decay takes no start/end values; linear or
    cosine needs both."""
    style = ctx.get("weight_decay_incr_style") or "constant"
    ends = ("start_weight_decay", "end_weight_decay")
    if style == "constant":
        return [ctx.err(d, "is only read with a weight decay schedule; Megatron asserts it is unset with "
                        "weight_decay_incr_style=constant", f"remove {ctx.key(d)}, or set "
                        f"{ctx.key('weight_decay_incr_style')}=linear|cosine", "weight_decay_incr_style")
                for d in ends if ctx.is_set(d)]
    return [ctx.err(d, f"is required with weight_decay_incr_style={style} (Megatron asserts it)",
                    f"set {ctx.key(d)} (e.g. to weight_decay), or weight_decay_incr_style=constant",
                    "weight_decay_incr_style") for d in ends if not ctx.is_set(d)]


def virtual_stages(ctx: Ctx) -> tuple[int | None, list[ConfigError]]:
    """Megatron arguments.py:502-556: the virtual pipeline size a run gets, or why it has none."""
    pp = _int(ctx, "pipeline_model_parallel_size")
    ways = [d for d in ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                        "pipeline_model_parallel_layout") if ctx.is_set(d)]
    if len(ways) > 1:
        return None, [ctx.err(ways[0], "Megatron accepts only one of num_layers_per_virtual_pipeline_stage, "
                              "num_virtual_stages_per_pipeline_rank and pipeline_model_parallel_layout",
                              "keep one of them", *ways[1:])]
    if not ways or ways[0] == "pipeline_model_parallel_layout":
        return None, []  # the layout string is validated by Megatron's own parser of it
    if ways[0] == "num_virtual_stages_per_pipeline_rank":
        vpp = _int(ctx, "num_virtual_stages_per_pipeline_rank")
        return (vpp if vpp != 1 else None), []
    per_vstage = _int(ctx, "num_layers_per_virtual_pipeline_stage")
    uneven = [d for d in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers") if ctx.is_set(d)]
    if uneven:
        return None, [ctx.err("num_layers_per_virtual_pipeline_stage", "cannot be used with uneven pipeline stages "
                              f"({', '.join(uneven)} set): Megatron asserts num_virtual_stages_per_pipeline_rank "
                              "is used instead", f"replace it with {ctx.key('num_virtual_stages_per_pipeline_rank')}"
                              "=N (virtual stages per pipeline rank)", *uneven)]
    layers = _int(ctx, "num_layers", 0) + bool(ctx.get("account_for_embedding_in_pipeline_split")) + bool(
        ctx.get("account_for_loss_in_pipeline_split"))
    if not layers or per_vstage <= 0:
        return None, []
    if layers % pp:
        return None, []  # parallel_layout reports the layer count not dividing PP
    if (layers // pp) % per_vstage:
        return None, [ctx.err("num_layers_per_virtual_pipeline_stage", f"{per_vstage} does not divide the "
                              f"{layers // pp} layers of each pipeline stage (Megatron asserts it)",
                              f"use a divisor of {layers // pp}", "num_layers", "pipeline_model_parallel_size")]
    vpp = layers // pp // per_vstage
    return (vpp if vpp != 1 else None), []


@rule
def virtual_pipeline(ctx: Ctx) -> list[ConfigError]:
    """Megatron arguments.py:502-583 virtual pipeline (interleaved) settings: one way to give it,
    uneven stages only with num_virtual_stages_per_pipeline_rank, and PP > 2 (PP > 1 with P2P overlap)."""
    vpp, out = virtual_stages(ctx)
    if vpp is None:
        return out
    pp = _int(ctx, "pipeline_model_parallel_size")
    overlap = ctx.get("overlap_p2p_comm") is not False
    if pp <= (1 if overlap else 2):
        way = next(d for d in ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank")
                   if ctx.is_set(d))
        out.append(ctx.err(way, f"an interleaved (virtual) pipeline needs pipeline_model_parallel_size > "
                           f"{1 if overlap else 2} (Megatron asserts it)", f"raise pipeline_model_parallel_size, "
                           f"or remove {ctx.key(way)}", "pipeline_model_parallel_size", "overlap_p2p_comm"))
    return out


@rule
def uneven_pipeline_stages(ctx: Ctx) -> list[ConfigError]:
    """TransformerConfig.__post_init__ (transformer_config.py:1385-1441): first/last stage layer
    counts are > 0 and divisible by the virtual pipeline size, and the middle stages split the
    remaining layers evenly (Megatron's validate_args skips its layer check once either is set)."""
    pp = _int(ctx, "pipeline_model_parallel_size")
    ends = [d for d in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers") if ctx.is_set(d)]
    if pp <= 1 or not ends or ctx.is_set("pipeline_model_parallel_layout"):
        return []  # PP 1 with these set: pipeline_stage_layers
    vpp, _ = virtual_stages(ctx)
    out = []
    layers, middle = _int(ctx, "num_layers", 0), pp
    for d in ends:
        n = _int(ctx, d, 0)
        if n <= 0:
            out.append(ctx.err(d, "must be > 0 (Megatron's TransformerConfig refuses it)", f"set {ctx.key(d)} >= 1"))
            continue
        if vpp is not None and n % vpp:
            out.append(ctx.err(d, f"{n} layers are not divisible by the {vpp} virtual pipeline stages per rank "
                               "(Megatron's TransformerConfig refuses it)", f"use a multiple of {vpp}",
                               "num_virtual_stages_per_pipeline_rank"))
        layers -= n
        middle -= 1
    if out or not ctx.get("num_layers"):
        return out
    related = ("num_layers", "pipeline_model_parallel_size", *ends)
    if bool(layers > 0) != bool(middle) or layers < 0:
        return [ctx.err(ends[-1], f"leaves {layers} layers for {middle} middle pipeline stages (Megatron's "
                        "TransformerConfig refuses the mismatch)", "give the first/last stages fewer layers, or "
                        "change pipeline_model_parallel_size", *related)]
    if middle and layers % middle:
        return [ctx.err(ends[-1], f"leaves {layers} layers for {middle} middle pipeline stages, which do not "
                        "split evenly (Megatron's TransformerConfig refuses it)", f"choose first/last stage layer "
                        f"counts that leave a multiple of {middle} layers", *related)]
    return []


@rule
def moe_a2a_overlap(ctx: Ctx) -> list[ConfigError]:
    """TransformerConfig.__post_init__ (transformer_config.py:1878-1917) overlapping the MoE
    all-to-all needs EP > 1, an alltoall/flex dispatcher, no recomputation, no shared-expert
    overlap, at most one MTP layer, and a virtual pipeline when PP > 1."""
    if not ctx.get("overlap_moe_expert_parallel_comm"):
        return []
    key = "overlap_moe_expert_parallel_comm"
    out = []
    if _int(ctx, "expert_model_parallel_size") <= 1:
        out.append(ctx.err(key, "needs expert_model_parallel_size > 1", "raise expert_model_parallel_size, or drop "
                           f"{ctx.key(key)}", "expert_model_parallel_size"))
    if ctx.get("moe_token_dispatcher_type") not in ("alltoall", "flex"):
        out.append(ctx.err(key, "needs moe_token_dispatcher_type alltoall or flex",
                           f"set {ctx.key('moe_token_dispatcher_type')}=alltoall", "moe_token_dispatcher_type"))
    recompute = [d for d in ("recompute_method", "recompute_num_layers") if ctx.is_set(d)]
    if ctx.get("recompute_granularity") == "full" or recompute:
        out.append(ctx.err(key, "cannot be combined with recomputation (full granularity, a recompute method or "
                           "layer count)", "set recompute_granularity=null recompute_method=null "
                           "recompute_num_layers=null (or selective granularity), or drop it",
                           "recompute_granularity", *recompute))
    if ctx.get("moe_shared_expert_overlap"):
        out.append(ctx.err(key, "cannot be combined with moe_shared_expert_overlap", "drop one of them",
                           "moe_shared_expert_overlap"))
    mtp = ctx.get("mtp_num_layers")
    if isinstance(mtp, int) and mtp > 1:
        out.append(ctx.err(key, "supports at most one MTP layer", "set mtp_num_layers=1", "mtp_num_layers"))
    if mtp == 1 and _int(ctx, "pipeline_model_parallel_size") <= 1:
        out.append(ctx.err(key, "with an MTP layer needs pipeline_model_parallel_size > 1", "raise "
                           "pipeline_model_parallel_size, or drop it", "mtp_num_layers", "pipeline_model_parallel_size"))
    if _int(ctx, "pipeline_model_parallel_size") > 1 and virtual_stages(ctx)[0] is None:
        out.append(ctx.err(key, "with pipeline parallelism needs a virtual pipeline", "set "
                           f"{ctx.key('num_virtual_stages_per_pipeline_rank')}=N (N > 1)",
                           "pipeline_model_parallel_size"))
    return out


# Megatron arguments.py:414-428, 786, 822 (found by the per-dest oracle, issue #24): options the
# parser still accepts and validate_args refuses whenever they are set (encoder_num_layers: whenever
# num_layers is, which every trainstack model preset sets; slime always sets seq_length).
REMOVED_OPTIONS = {
    "batch_size": ("micro_batch_size", None),
    "warmup": ("lr_warmup_fraction", None),
    "model_parallel_size": ("tensor_model_parallel_size", None),
    "checkpoint_activations": ("recompute_activations", None),
    "encoder_num_layers": ("num_layers", "num_layers"),
    "encoder_seq_length": ("seq_length", None),
}


@rule
def removed_options(ctx: Ctx) -> list[ConfigError]:
    """Megatron asserts (or exits) when one of REMOVED_OPTIONS is set: the run dies in validate_args."""
    out = []
    for dest, (use, only_with) in REMOVED_OPTIONS.items():
        if ctx.get(dest) in (None, False) or (only_with and not ctx.is_set(only_with)):
            continue
        out.append(ctx.err(dest, f"is no longer valid in Megatron (validate_args refuses it{f' next to {only_with}' if only_with else ''})",
                           f"remove {ctx.key(dest)}; use {ctx.key(use)}"))
    return out


def _on(v: object) -> bool:
    return v not in (None, False, 0, "")


# Megatron asserts between two options (validate_args in megatron/training/arguments.py,
# TransformerConfig.__post_init__ in megatron/core/transformer/transformer_config.py), each found by
# the per-dest oracle (issue #24) on a preset that sets the other one. (dest, other, the other's value
# the dest needs, what to write, where Megatron asserts it).
NEEDS: tuple[tuple[str, str, Callable[[Any], bool], str, str], ...] = (
    ("fp4_param", "fp4", _on, "an FP4 format (fp4=e2m1)", "arguments.py:665"),
    ("fp8_param_gather", "fp8", _on, "an FP8 format (fp8=e4m3|hybrid)", "transformer_config.py:1057"),
    ("replication", "replication_jump", _on, "replication_jump", "arguments.py:1207"),
    ("fp16_lm_cross_entropy", "fp16", _on, "fp16=true", "arguments.py:846"),
    ("overlap_param_gather_with_optimizer_step", "overlap_param_gather", _on, "overlap_param_gather=true",
     "arguments.py:638"),
    ("fsdp_manual_registration", "use_megatron_fsdp", _on, "use_megatron_fsdp=true", "arguments.py:696"),
    ("hybrid_context_parallel", "calculate_per_token_loss", _on, "calculate_per_token_loss=true", "arguments.py:922"),
    ("moe_router_group_topk", "moe_router_num_groups", _on, "moe_router_num_groups", "transformer_config.py:1679"),
    ("moe_enable_deepep", "moe_token_dispatcher_type", lambda v: v == "flex", "moe_token_dispatcher_type=flex",
     "transformer_config.py:1094"),
    ("delay_wgrad_compute", "overlap_moe_expert_parallel_comm", _on, "overlap_moe_expert_parallel_comm=true",
     "transformer_config.py:1939"),
    ("ep_overlap_early_attn_memory_release", "overlap_moe_expert_parallel_comm", _on,
     "overlap_moe_expert_parallel_comm=true", "transformer_config.py:1952"),
    ("inference_fuse_tp_communication", "transformer_impl", lambda v: v == "inference_optimized",
     "transformer_impl=inference_optimized", "transformer_config.py:2036"),
    ("use_legacy_models", "ckpt_format", lambda v: v == "torch", "ckpt_format=torch", "arguments.py:310"),
)
# (dest, other it cannot go with, where Megatron asserts it)
EXCLUDES: tuple[tuple[str, str, str], ...] = (
    ("multi_latent_attention", "group_query_attention", "arguments.py:1289"),
    ("squared_relu", "swiglu", "arguments.py:1362"),
    ("quick_geglu", "swiglu", "arguments.py:1365"),
    ("recompute_activations", "recompute_method", "arguments.py:899"),
)


@rule
def option_pairs(ctx: Ctx) -> list[ConfigError]:
    """NEEDS and EXCLUDES: an option Megatron refuses without (or next to) another one."""
    out = []
    for dest, other, ok, what, where in NEEDS:
        if _on(ctx.get(dest)) and not ok(ctx.get(other)):
            out.append(ctx.err(dest, f"needs {what} (Megatron {where} asserts it)",
                               f"set {ctx.key(other)} as needed, or remove {ctx.key(dest)}", other))
    for dest, other, where in EXCLUDES:
        if _on(ctx.get(dest)) and _on(ctx.get(other)):
            out.append(ctx.err(dest, f"cannot go with {other} (Megatron {where} asserts it)",
                               f"remove {ctx.key(dest)} or {ctx.key(other)}", other))
    return out
