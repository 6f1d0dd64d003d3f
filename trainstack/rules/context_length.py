"""Prompt + response against the model's context, as SGLang judges every generate request.

SGLang's `TokenizerManager._validate_one_request` (sglang/srt/managers/tokenizer_manager.py, the
version slime pins) refuses a request whose input is at least the context length ("The input (N
tokens) is longer than the model's context length") and one whose input plus `max_new_tokens` is
above it ("Requested token count exceeds the model's maximum context length"), unless the server runs
with `--allow-auto-truncate`. slime asks every training sample for `max_new_tokens =
--rollout-max-response-len` (slime/rollout/sglang_rollout.py:99, less what a partial sample already
holds, :166) and every eval sample for `--eval-max-response-len` (defaulting to it,
slime/utils/eval_config.py:34); a refused request is retried for a minute (slime/utils/http_utils.py:
165-191) and then fails the rollout. Prompts are at most `--rollout-max-prompt-len` tokens when it is
set (slime/utils/data.py:278-279 drops longer ones), at least one token otherwise.

The context is SGLang's: `--sglang-context-length` when set, else the model's Hugging Face config
(`max_position_embeddings`, times a `rope_scaling` factor: an upper bound, so scaling never causes a
refusal), read where the trainer runs (`trainstack/preflight/host_checks.py`, or `trainstack exec` on a remote host),
or a preset's `meta.context_length`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

SGLANG_CHECK = "SGLang TokenizerManager._validate_one_request"


@dataclass(frozen=True)
class Context:
    tokens: int
    source: str  # where the number comes from, for the message


def hf_context(hf_dir: Any) -> Context | None:
    """The context SGLang derives from the model's config.json (None: unreadable here, or no length in it)."""
    if not isinstance(hf_dir, str) or not hf_dir:
        return None
    path = Path(hf_dir, "config.json")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    text = config.get("text_config")
    for cfg in (config, text if isinstance(text, dict) else {}):
        n = cfg.get("max_position_embeddings")
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            scaling = cfg.get("rope_scaling") or {}
            factor = scaling.get("factor") if isinstance(scaling, dict) else None
            if isinstance(factor, (int, float)) and factor > 1:
                return Context(int(n * factor), f"{path}: max_position_embeddings {n} x rope_scaling factor {factor:g}")
            return Context(n, f"{path}: max_position_embeddings")
    return None


def length_problems(get: Callable[[str], Any], ctx: Context) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(dest at fault, problem, fix, related dests) for the train and eval requests that SGLang would refuse."""
    if get("sglang_allow_auto_truncate"):
        return []
    out: list[tuple[str, str, str, tuple[str, ...]]] = []
    prompt = get("rollout_max_prompt_len")
    prompt_n = prompt if isinstance(prompt, int) and prompt > 0 else None
    for dest, what in (("rollout_max_response_len", "training"), ("eval_max_response_len", "eval")):
        n = get(dest)
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            continue
        longest = (prompt_n or 1) + n
        if longest <= ctx.tokens:
            continue
        if prompt_n is None:
            problem = (f"{dest} {n} leaves no room for a prompt in the model's context of {ctx.tokens} tokens "
                       f"({ctx.source}): SGLang refuses every {what} request whose prompt + max_new_tokens exceeds "
                       f"it ({SGLANG_CHECK}), so no {what} sample would ever be generated")
        else:
            problem = (f"{dest} {n} + rollout_max_prompt_len {prompt_n} = {longest} tokens exceeds the model's "
                       f"context of {ctx.tokens} tokens ({ctx.source}): SGLang refuses the {what} requests of "
                       f"the longest prompts ({SGLANG_CHECK}), and the rollout fails on them")
        room = ctx.tokens - (prompt_n or 1)
        fix = (f"lower {dest} to at most {room}" + (" (or rollout_max_prompt_len)" if prompt_n else "")
               + ", or set args.sglang_allow_auto_truncate=true to have SGLang cut max_new_tokens instead")
        out.append((dest, problem, fix, ("rollout_max_prompt_len",) if prompt_n else ()))
    return out


def hf_config_problems(facts: Any) -> list[Any]:
    """Host check (trainstack/preflight/host_checks.py; `trainstack exec` on a remote trainer's host): the model's own
    config.json at --hf-checkpoint, read where the trainer runs, against the response budgets. A run
    that sets --sglang-context-length is judged by the config rule instead (runtime_rules.py)."""
    from trainstack.errors import ConfigError
    from trainstack.upstream.argtable import load_table

    if facts.backend != "slime" or facts.args.get("sglang_context_length"):
        return []
    ctx = hf_context(facts.args.get("hf_checkpoint"))
    if ctx is None:
        return []
    table = load_table()

    def get(dest: str) -> Any:
        if dest in facts.args:
            return facts.args[dest]
        spec = table.get(dest)
        return spec.default if spec is not None and spec.has_default else None

    return [ConfigError(facts.key_of(dest), problem, fix, value=get(dest), source=facts.source_of(dest),
                        related={facts.key_of(r): get(r) for r in related})
            for dest, problem, fix, related in length_problems(get, ctx)]
