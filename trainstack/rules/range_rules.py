"""Numeric ranges slime's parser does not check, that fail (or silently misbehave) at run time.

argparse checks types only: `--sglang-mem-fraction-static 1.5` parses, then SGLang cannot
reserve 150% of the GPU's memory; `--rollout-top-p 0` parses, then every sampling request is
refused by SGLang's `SamplingParams.verify`; a negative length parses, then generation or the
Megatron model build fails. One table, one rule (`value_ranges`), registered through
upstream_rules.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainstack.errors import ConfigError
from trainstack.rules.rulebook import rule

if TYPE_CHECKING:
    from trainstack.rules.validate import Ctx


@dataclass(frozen=True)
class Range:
    low: float
    high: float
    low_open: bool  # low itself is refused
    high_open: bool
    why: str

    def holds(self, v: float) -> bool:
        above = v > self.low if self.low_open else v >= self.low
        below = v < self.high if self.high_open else v <= self.high
        return above and below

    def text(self) -> str:
        def num(x: float) -> str:  # integral bounds exactly (a seed's 2147483647, not 2.14748e+09)
            return str(int(x)) if math.isfinite(x) and x == int(x) else f"{x:g}"

        return f"{'(' if self.low_open else '['}{num(self.low)}, {num(self.high)}{')' if self.high_open else ']'}"


INF = math.inf
FRACTION = Range(0, 1, True, True, "a fraction of the GPU's memory")
PROBABILITY = Range(0, 1, False, False, "a probability")
POSITIVE = Range(0, INF, True, True, "a length or count")
BETA = Range(0, 1, False, True, "torch's Adam refuses betas outside [0, 1)")

RANGES: dict[str, Range] = {
    "sglang_mem_fraction_static": FRACTION,
    "rollout_top_p": Range(0, 1, True, False, "SGLang's SamplingParams.verify refuses top_p outside (0, 1]"),
    "hidden_dropout": PROBABILITY,
    "attention_dropout": PROBABILITY,
    "lr_warmup_fraction": PROBABILITY,
    "adam_beta1": BETA,
    "adam_beta2": BETA,
    "adam_eps": Range(0, INF, False, True, "torch's Adam refuses a negative eps"),
    "rollout_max_response_len": POSITIVE,
    "rollout_max_context_len": POSITIVE,
    "rollout_max_prompt_len": POSITIVE,
    "seq_length": POSITIVE,
    "max_position_embeddings": POSITIVE,
    "n_samples_per_eval_prompt": POSITIVE,
}


@rule
def value_ranges(ctx: Ctx) -> list[ConfigError]:
    """Each dest of RANGES, when set to a number, lies in its range."""
    out = []
    for dest, r in RANGES.items():
        v = ctx.run.args.get(dest)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or r.holds(v):
            continue
        out.append(ctx.err(dest, f"must be in {r.text()} ({r.why}); slime's parser accepts it and the run fails "
                           "or misbehaves once it starts", f"set {ctx.key(dest)} within {r.text()}"))
    top_k = ctx.run.args.get("rollout_top_k")
    if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k < 1 and top_k != -1:
        out.append(ctx.err("rollout_top_k", "must be -1 (no top-k) or >= 1: SGLang's SamplingParams.verify refuses "
                           "other values", f"set {ctx.key('rollout_top_k')}=-1 or a positive k"))
    return out
