"""Sampling from the tiny policy: the stand-in for SGLang's decoding.

The tiny SGLang server (server.py) hands a micro-batch of ``/generate`` requests to
:func:`decode`. Requests are decoded together when they share a prompt length and sampling
settings (no padding). Each request draws its tokens from its own ``random.Random``, seeded
from the request itself (see server.py), so a sample's tokens do not depend on which
requests it was batched with or in which order they arrived; the forward pass always runs
with at least two rows (a one-row batch is duplicated), because on CPU a one-row matmul can
differ from the same row in a larger batch in the last bit.
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

import torch


@dataclass
class Request:
    """One ``/generate`` call, reduced to what decoding needs."""

    ids: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    stop_ids: frozenset[int]
    stop: tuple[str, ...]
    rng: random.Random
    want_top_p_ids: bool = False  # SGLang custom_params return_top_p_token_ids (slime sets it when top_p != 1)
    # filled by decode
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"  # "stop" | "length" | "abort"
    matched: int | str | None = None
    top_p_ids: list[int] = field(default_factory=list)  # the nucleus kept at each step, concatenated
    top_p_offsets: list[int] = field(default_factory=lambda: [0])


def derive_seed(*parts) -> int:
    """Stable 63-bit seed from any parts (hash() is salted per process, so not that)."""
    h = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def _filter(logits: torch.Tensor, top_p: float, top_k: int) -> torch.Tensor:
    if top_k is not None and 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p >= 1.0:
        return logits
    sorted_logits, idx = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    drop = probs.cumsum(-1) - probs > top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)


@torch.no_grad()
def decode(model, reqs: list[Request], context_len: int, decode_text) -> None:
    """Fill every request's output (in place). ``decode_text(ids)`` is for string stops."""
    was_training = model.training
    model.eval()
    buckets: dict[tuple, list[Request]] = {}
    for r in reqs:
        buckets.setdefault((len(r.ids), r.temperature, r.top_p, r.top_k), []).append(r)
    for (plen, temperature, top_p, top_k), rs in buckets.items():
        budgets = [max(0, min(r.max_new_tokens, context_len - plen)) for r in rs]
        rows = rs if len(rs) > 1 else rs * 2  # >= 2 rows: see the module docstring
        ids = torch.tensor([r.ids for r in rows], dtype=torch.long).reshape(len(rows), plen)
        done = [b == 0 for b in budgets]
        for step in range(max(budgets, default=0)):
            if all(done):
                break
            logits = model(ids)[:, -1, :].float()
            if temperature <= 0:
                logp = logits.log_softmax(-1)
                nxt = logits.argmax(-1)
            else:
                scaled = logits / temperature
                logp = scaled.log_softmax(-1)
                filtered = _filter(scaled, top_p, top_k)
                cdf = filtered.softmax(-1).cumsum(-1)
                draws = [r.rng.random() for r in rs]  # one draw per request and step, whatever the batch
                u = torch.tensor(draws + draws[:len(rows) - len(rs)], dtype=cdf.dtype)[:, None] * cdf[:, -1:]
                nxt = (cdf < u).sum(-1).clamp(max=cdf.shape[-1] - 1)
            chosen = logp.gather(1, nxt[:, None]).squeeze(1)
            kept = None if temperature <= 0 else filtered.isfinite()
            for j, r in enumerate(rs):
                if done[j]:
                    continue
                t = int(nxt[j])
                r.output_ids.append(t)
                r.logprobs.append(float(chosen[j]))
                if r.want_top_p_ids:
                    ids_j = [t] if kept is None else kept[j].nonzero().flatten().tolist()
                    r.top_p_ids.extend(ids_j)
                    r.top_p_offsets.append(len(r.top_p_ids))
                if t in r.stop_ids:
                    r.finish_reason, r.matched, done[j] = "stop", t, True
                elif r.stop and any(decode_text(r.output_ids).endswith(s) for s in r.stop):
                    r.finish_reason, done[j] = "stop", True
                    r.matched = next(s for s in r.stop if decode_text(r.output_ids).endswith(s))
                elif step + 1 >= budgets[j]:
                    done[j] = True
            ids = torch.cat([ids, nxt[:, None]], dim=1)
    model.train(was_training)


def sample(model, prompts: list[list[int]], *, max_new_tokens: int, temperature: float, top_p: float = 1.0,
           seed: object = 0, stop_ids: frozenset[int] | None = None) -> list[Request]:
    """Direct sampling without the server (benchmarks): request ``i`` draws from ``(seed, i)``; stops at
    the tokenizer's EOS unless ``stop_ids`` says otherwise."""
    from .tokenizer import TinyTokenizer

    tok = TinyTokenizer()
    stop_ids = frozenset({tok.eos_token_id}) if stop_ids is None else stop_ids
    reqs = [Request(list(p), max_new_tokens, temperature, top_p, -1, stop_ids, (),
                    random.Random(derive_seed(seed, i))) for i, p in enumerate(prompts)]
    decode(model, reqs, model.config.max_position_embeddings, tok.decode)
    return reqs
