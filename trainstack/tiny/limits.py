"""Sequence limits of a tiny run, checked before it starts (by the trainer's own checks, so the dry
run too): every prompt of the data plus the response budget fits the tiny model's positions.

The tiny model has `--max-position-embeddings` positions (model.py: a longer sequence fails the
training step), and its SGLang-compatible server refuses a request whose prompt plus `max_new_tokens`
exceeds that context (or `--rollout-max-context-len`, the tiny server's cap), as SGLang's
`TokenizerManager._validate_one_request` does, unless `--sglang-allow-auto-truncate` (server.py). A
prompt's length is its characters (the tiny tokenizer has one token per character and no BOS; a
chat template only adds to it), so a refusal here is certain. Prompt files are read once per file
version (a sweep preflights each point).
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any


def context_of(a: Any) -> int:
    """The tiny server's context: the model's positions, or less with --rollout-max-context-len."""
    ctx = int(a.max_position_embeddings or 64)
    if a.rollout_max_context_len:
        ctx = min(ctx, int(a.rollout_max_context_len))
    return ctx


def problems(a: Any) -> list[tuple[str, str, str, Any]]:
    """(dest, problem, fix, value) for the requests the tiny server (as SGLang) would refuse: one per
    budget dest, judged on its longest prompt (one token for a file not written yet: an env's data hook
    writes it at launch, and the launch checks again then)."""
    if getattr(a, "sglang_allow_auto_truncate", False):
        return []
    ctx = context_of(a)
    eval_dest = "eval_max_response_len" if a.eval_max_response_len else "rollout_max_response_len"
    sets = [("rollout_max_response_len", a.prompt_data, a.input_key, "training", a.rollout_max_prompt_len)]
    sets += [(eval_dest, path, a.eval_input_key or a.input_key, "eval", a.eval_max_prompt_len or a.rollout_max_prompt_len)
             for _name, path in getattr(a, "eval_datasets", None) or []]
    worst: dict[str, tuple[int, str]] = {}
    for dest, path, key, what, cap in sets:
        longest = longest_prompt(path, key or "text") if path else None
        if longest is not None and isinstance(cap, int) and cap > 0:  # slime's Dataset drops longer prompts
            longest = min(longest, cap)  # (slime/utils/data.py:278-279)
        n = max(longest or 1, 1)
        if dest not in worst or n > worst[dest][0]:
            worst[dest] = (n, f"the longest {what} prompt ({n} tokens, {path})" if longest else "a one-token prompt")
    out = []
    for dest, (n, which) in worst.items():
        budget = getattr(a, dest)
        if not isinstance(budget, int) or budget <= 0 or n + budget <= ctx:
            continue
        out.append((dest, f"{which} + {budget} new tokens exceeds the tiny model's context of {ctx} tokens: its "
                    "server refuses such requests as SGLang does (\"Requested token count exceeds the model's "
                    "maximum context length\"), and the rollout fails on them",
                    f"lower it to at most {ctx - n}, raise --max-position-embeddings (and --seq-length), or pass "
                    "--sglang-allow-auto-truncate to cut max_new_tokens instead", budget))
    return out


def longest_prompt(path: str, key: str) -> int | None:
    """The longest prompt of a JSONL file in tiny tokens (None: not readable here)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _longest(path, key, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _longest(path: str, key: str, _mtime_ns: int, _size: int) -> int | None:
    longest = 0
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    return None  # not JSONL: slime's loader reports it
                longest = max(longest, _length(row.get(key) if isinstance(row, dict) else None))
    except (OSError, UnicodeDecodeError):
        return None
    return longest


def _length(prompt: Any) -> int:
    if isinstance(prompt, str):
        return len(prompt)
    if isinstance(prompt, list):  # chat messages: their contents at least
        return sum(_length(m.get("content")) if isinstance(m, dict) else _length(m) for m in prompt)
    return 0
