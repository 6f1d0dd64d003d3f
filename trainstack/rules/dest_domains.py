"""Domains of slime dests that slime's parser types but never bounds, by class: each class is a way
a run hangs or dies after it started (issue #36). range_rules.py holds single dests; this holds the
classes, so a new dest of the class is covered by its name or its type:

- concurrency: `--sglang-server-concurrency 0` parses, then no request is ever sent (0 rollouts in
  150 s on CPU, a hang on GPU);
- JSON dests by the shape slime reads: `train_env_vars` is spread into Ray's `env_vars`
  (slime/ray/actor_group.py: a mapping of str to str), `apply_chat_template_kwargs` is spread into
  `apply_chat_template(**...)` (slime/utils/data.py: a mapping with str keys), `multimodal_keys` is
  iterated with `.items()` (slime/utils/data.py: a mapping of str to str);
- probabilities in (0, 1] (SGLang's SamplingParams.verify), temperatures >= 0, lengths > 0;
- seeds in [0, 2**31 - 1]: numpy's seed is 32-bit and Megatron adds rank offsets to it;
- ports (every int dest named `*_port`) in [1, 65535];
- every int dest within 64 bits (torch and numpy hold int64: 2**70 overflows when used).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from trainstack.errors import ConfigError
from trainstack.rules.range_rules import INF, Range
from trainstack.rules.rulebook import rule

if TYPE_CHECKING:
    from trainstack.rules.validate import Ctx

AT_LEAST_ONE = Range(1, INF, False, True, "a number of concurrent requests: 0 sends none and the run hangs")
TOP_P = Range(0, 1, True, False, "SGLang's SamplingParams.verify refuses top_p outside (0, 1]")
TEMPERATURE = Range(0, INF, False, True, "SGLang's SamplingParams.verify refuses a negative temperature")
LENGTH = Range(0, INF, True, True, "a length in tokens")
SEED = Range(0, 2**31 - 1, False, False, "numpy's seed is 32-bit and Megatron adds rank offsets to it")
PORT = Range(1, 65535, False, False, "a TCP port")
INT64 = Range(-(2**63), 2**63 - 1, False, False, "torch and numpy hold 64-bit integers")

DOMAINS: dict[str, Range] = {
    "sglang_server_concurrency": AT_LEAST_ONE,
    "sglang_asr_max_concurrent_sessions": AT_LEAST_ONE,
    "eval_top_p": TOP_P,
    "rollout_temperature": TEMPERATURE,
    "eval_temperature": TEMPERATURE,
    "eval_max_response_len": LENGTH,
    "eval_max_prompt_len": LENGTH,
    "eval_max_context_len": LENGTH,
    "seed": SEED,
    "rollout_seed": SEED,
}
# JSON dests: the mapping slime reads, and the type of its values (None: any JSON value)
JSON_MAPPINGS: dict[str, type | None] = {"train_env_vars": str, "multimodal_keys": str,
                                         "apply_chat_template_kwargs": None}


def domain_of(dest: str, value_kind: str) -> Range | None:
    """The domain of a dest: by name, else by class (ports, then 64-bit ints)."""
    if dest in DOMAINS:
        return DOMAINS[dest]
    if value_kind == "int":
        return PORT if dest.endswith("_port") else INT64
    return None


def json_shape_problem(dest: str, value: Any) -> str | None:
    """Why a JSON dest's value is not the mapping slime reads (None: it is)."""
    want = JSON_MAPPINGS[dest]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return f"is not JSON (slime reads it with json.loads): {value[:40]!r}"
    if not isinstance(value, dict):
        return f"must be a mapping (slime spreads it as keyword arguments or environment variables), not {type(value).__name__}"
    if want is not None and not all(isinstance(v, want) for v in value.values()):
        return "must map names to strings (environment variables and keys are strings)"
    return None


@rule
def dest_domains(ctx: Ctx) -> list[ConfigError]:
    """Each dest with a known domain, when set, lies in it."""
    out = []
    for dest, value in ctx.run.args.items():
        spec = ctx.table.get(dest)
        if value is None or spec is None:
            continue
        if dest in JSON_MAPPINGS:
            why = json_shape_problem(dest, value)
            if why:
                out.append(ctx.err(dest, why, f"set {ctx.key(dest)}" + "={NAME: value} (a mapping), or remove it"))
            continue
        r = domain_of(dest, spec.value_kind)
        if r is None:
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or r.holds(v):
                continue
            shown = f"{v}" if abs(v) < 1e15 else f"{v:.3g}"
            out.append(ctx.err(dest, f"{shown} is out of range: must be in {r.text()} ({r.why}); slime's parser "
                               "accepts it and the run fails or hangs once it starts",
                               f"set {ctx.key(dest)} within {r.text()}"))
            break
    return out
