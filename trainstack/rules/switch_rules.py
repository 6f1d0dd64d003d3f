"""Values that argparse cannot land as written: checked so `false` and `null` mean what they say.

A `store_true` flag whose default is `None` has no flag for `false`: rendering `false` emits nothing
and the dest keeps `None`. Megatron reads its four such dests with `if args.x` (None is false, so
`false` lands as meant); SGLang reads `None` as "decide automatically" (multimodal and LoRA turn on
by themselves), so `false` would be silently ignored there (a flag with no action for `true` at all, SGLang's
removed options, is refused by resolve.check_dest_value). `runtime_env.env_vars.X=null` removes X from the trainer's
environment (render.runtime_env); that must not remove what Megatron needs. Registered through
upstream_rules (one feature).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from trainstack.errors import ConfigError
from trainstack.rules.rulebook import rule

if TYPE_CHECKING:
    from trainstack.rules.validate import Ctx
    from trainstack.upstream.argtable import ArgSpec

# store_true dests with default None that Megatron reads as booleans (`if args.no_load_optim:`):
# an explicit false renders nothing and behaves as false (megatron/training/arguments.py,
# checkpointing.py, transformer_config.py at 1dcf0daf).
NONE_READ_AS_FALSE = frozenset({"use_cpu_initialization", "no_save_rng", "no_load_optim", "no_load_rng"})
# sglang 0.5.15.post1 server_args.py: None means "auto" and its __post_init__ may turn the feature on.
NONE_MEANS_AUTO = {
    "sglang_enable_multimodal": "SGLang enables multimodal input for multimodal models by itself",
    "sglang_enable_lora": "SGLang turns LoRA on by itself when LoRA paths are given",
    "sglang_enable_lora_overlap_loading": "SGLang decides LoRA overlap loading by itself",
}


def false_cannot_land(spec: ArgSpec) -> bool:
    """A switch whose `false` renders nothing and leaves a default that is not false."""
    return spec.is_switch and spec.false_flag is None and spec.default is not False and spec.has_default


@rule
def unrenderable_false(ctx: Ctx) -> list[ConfigError]:
    """`args.x=false` on a store_true dest whose default is None (and no --no-x flag) would render
    nothing; refused where None does not behave as false."""
    out = []
    for dest, value in ctx.run.args.items():
        spec = ctx.table.get(dest)
        if spec is None or value is not False or not false_cannot_land(spec) or dest in NONE_READ_AS_FALSE:
            continue
        if spec.true_flag is None:
            continue  # a removed option: false leaves it unset, as it should
        why = NONE_MEANS_AUTO.get(dest, f"{spec.flag} has no negative form and its default is None, not false")
        out.append(ctx.err(dest, f"false cannot be passed to slime: {spec.flag} has no --no- form, so nothing is "
                           f"rendered and the default None (auto) stays: {why}",
                           f"remove {ctx.key(dest)} (auto), or set it to true"))
    return out


@rule
def removed_trainer_env(ctx: Ctx) -> list[ConfigError]:
    """Megatron arguments.py:950 asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP > 1 (Hopper and
    older): `runtime_env.env_vars.CUDA_DEVICE_MAX_CONNECTIONS=null` removes trainstack's 1."""
    env = ctx.run.runtime_env.env_vars
    if ctx.run.cluster.backend != "slime" or "CUDA_DEVICE_MAX_CONNECTIONS" not in env:
        return []
    if env["CUDA_DEVICE_MAX_CONNECTIONS"] is not None or ctx.get("overlap_moe_expert_parallel_comm"):
        return []  # a value other than 1: upstream_rules.cuda_connections
    parallel = int(ctx.get("tensor_model_parallel_size") or 1) > 1 or int(ctx.get("context_parallel_size") or 1) > 1
    if not parallel:
        return []
    return [ConfigError("runtime_env.env_vars.CUDA_DEVICE_MAX_CONNECTIONS", "null removes it from the trainer's "
                        "environment, but Megatron asserts it is 1 with tensor or context parallelism on H100/A100",
                        "remove the null (trainstack sets 1)", value=None)]
