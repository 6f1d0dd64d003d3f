"""A small GPT-style policy whose shape comes from Megatron's size flags.

``--num-layers --hidden-size --num-attention-heads --ffn-hidden-size`` set the shape,
``--max-position-embeddings`` caps the context (learned positions), dropout flags are
honoured (default 0 in the presets; dropout would need its own RNG stream).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int
    max_position_embeddings: int
    tie_embeddings: bool = True
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0

    @staticmethod
    def from_args(args, vocab_size: int) -> "ModelConfig":
        return ModelConfig(
            vocab_size=vocab_size,
            num_layers=int(args.num_layers),
            hidden_size=int(args.hidden_size),
            num_attention_heads=int(args.num_attention_heads),
            ffn_hidden_size=int(args.ffn_hidden_size or 4 * args.hidden_size),
            max_position_embeddings=int(args.max_position_embeddings or 64),
            tie_embeddings=not bool(getattr(args, "untie_embeddings_and_output_weights", False)),
            hidden_dropout=float(getattr(args, "hidden_dropout", 0.0) or 0.0),
            attention_dropout=float(getattr(args, "attention_dropout", 0.0) or 0.0),
        )

    def arch(self) -> dict:
        """The fields that must match between a checkpoint and the run loading it."""
        d = asdict(self)
        d.pop("hidden_dropout")
        d.pop("attention_dropout")
        return d


class Block(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(c.hidden_size)
        self.qkv = nn.Linear(c.hidden_size, 3 * c.hidden_size)
        self.proj = nn.Linear(c.hidden_size, c.hidden_size)
        self.ln2 = nn.LayerNorm(c.hidden_size)
        self.fc1 = nn.Linear(c.hidden_size, c.ffn_hidden_size)
        self.fc2 = nn.Linear(c.ffn_hidden_size, c.hidden_size)
        self.heads = c.num_attention_heads
        self.drop = nn.Dropout(c.hidden_dropout)
        self.attn_drop = c.attention_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        shape = (b, t, self.heads, h // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(h // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        att = F.dropout(att, self.attn_drop, self.training)
        y = (att @ v).transpose(1, 2).reshape(b, t, h)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class TinyGPT(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.config = c
        self.tok = nn.Embedding(c.vocab_size, c.hidden_size)
        self.pos = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.num_layers))
        self.ln_f = nn.LayerNorm(c.hidden_size)
        self.head = None if c.tie_embeddings else nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        if t > self.config.max_position_embeddings:
            raise ValueError(f"sequence of {t} tokens exceeds --max-position-embeddings "
                             f"{self.config.max_position_embeddings}")
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_f(x)
        w = self.tok.weight if self.head is None else self.head.weight
        return x @ w.t()


def build_model(cfg: ModelConfig, seed: int) -> TinyGPT:
    """Initial weights are a pure function of (arch, seed): init_model and a seed-only run agree."""
    g_state = torch.get_rng_state()
    torch.manual_seed(seed)
    model = TinyGPT(cfg)
    torch.set_rng_state(g_state)
    return model


def count_params(cfg: ModelConfig) -> int:
    return sum(p.numel() for p in TinyGPT(cfg).parameters())


def setup_determinism(threads: int = 1) -> None:
    """Fixed thread count + deterministic kernels: the basis of bit-identical resume."""
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    # torch.use_deterministic_algorithms(True) also sets torch._inductor's flag, importing the
    # inductor (1.4 s of every trainer start on 2 cores); nothing here compiles, so set only the
    # kernels' switch, which is what that function does besides.
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:
        torch.use_deterministic_algorithms(True)
    else:
        setter(True, warn_only=False)
