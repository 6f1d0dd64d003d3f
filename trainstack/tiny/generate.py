"""Sampling from the tiny policy: the stand-in for SGLang's decoding.

Prompts are batched by length (no padding inside a batch, so a sample's result depends
only on its batch-mates, which are the same on every replay). Randomness comes from an
explicit ``torch.Generator`` seeded per (seed, rollout, purpose), so a resumed run
regenerates exactly the same rollouts.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from .tokenizer import CharTokenizer


@dataclass
class Generation:
    output_ids: list[int]
    logprobs: list[float]  # log-prob of each sampled token under the temperature-scaled distribution
    finish_reason: str  # "stop" | "length"


def derive_seed(*parts) -> int:
    """Stable 63-bit seed from any parts (hash() is salted per process, so not that)."""
    h = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def make_generator(*parts) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(*parts))


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    if top_p >= 1.0:
        return logits
    sorted_logits, idx = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    drop = probs.cumsum(-1) - probs > top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)


@torch.no_grad()
def sample(model, prompts: list[list[int]], *, max_new_tokens: int, temperature: float, top_p: float = 1.0,
           generator: torch.Generator, stop_token_ids: list[int] | None = None, stop: list[str] | None = None,
           tokenizer: CharTokenizer | None = None) -> list[Generation]:
    """Sample a continuation for every prompt; EOS (and stop ids) end it with the token kept."""
    tok = tokenizer or CharTokenizer()
    stop_ids = {tok.eos_token_id, *(stop_token_ids or [])}
    stop = [s for s in (stop or []) if s]
    was_training = model.training
    model.eval()
    results: list[Generation | None] = [None] * len(prompts)
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    max_pos = model.config.max_position_embeddings
    for plen, idxs in by_len.items():
        budget = max(0, min(max_new_tokens, max_pos - plen))
        ids = torch.tensor([prompts[i] for i in idxs], dtype=torch.long).reshape(len(idxs), plen)
        outs: list[list[int]] = [[] for _ in idxs]
        lps: list[list[float]] = [[] for _ in idxs]
        done: list[str | None] = [None] * len(idxs)
        for _ in range(budget):
            logits = model(ids)[:, -1, :].float()
            if temperature <= 0:
                nxt = logits.argmax(-1)
                logp = logits.log_softmax(-1)
            else:
                scaled = logits / temperature
                logp = scaled.log_softmax(-1)
                probs = _top_p_filter(scaled, top_p).softmax(-1)
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            chosen = logp.gather(1, nxt[:, None]).squeeze(1)
            for j in range(len(idxs)):
                if done[j] is not None:
                    continue
                t = int(nxt[j])
                outs[j].append(t)
                lps[j].append(float(chosen[j]))
                if t in stop_ids or (stop and any(tok.decode(outs[j]).endswith(s) for s in stop)):
                    done[j] = "stop"
            if all(d is not None for d in done):
                break
            ids = torch.cat([ids, nxt[:, None]], dim=1)
        for j, i in enumerate(idxs):
            results[i] = Generation(outs[j], lps[j], done[j] or "length")
    model.train(was_training)
    return results  # type: ignore[return-value]
