"""The tiny policy: the Qwen3 architecture at a tiny size, sized by Megatron's flags.

``--num-layers --hidden-size --num-attention-heads --ffn-hidden-size`` set the shape;
``--group-query-attention --num-query-groups`` the key/value heads, ``--kv-channels`` the head
size, ``--rotary-base`` RoPE's theta, ``--norm-epsilon`` the RMSNorm epsilon and
``--max-position-embeddings`` the context cap. The modules and parameter names are
``transformers``' ``Qwen3ForCausalLM`` (``model.layers.0.self_attn.q_norm.weight``...), so a
checkpoint's ``model.pt`` is that model's state dict and an export (``export.py``) loads with
``AutoModelForCausalLM``; tests/tiny/test_qwen3.py checks the logits against transformers'
own class, op for op. Written here rather than imported because importing transformers' modeling
stack (torch dynamo, distributed tensors, accelerate glue) costs 2-3 s of every trainer start on
2 cores, and CI starts a tiny trainer well over a hundred times.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

ARCHITECTURE = "qwen3"
FORMAT = "trainstack-tiny/2"  # meta.json "format": /1 was the character GPT, /2 the Qwen3 model


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int
    max_position_embeddings: int
    num_key_value_heads: int = 0  # 0: as many as attention heads
    head_dim: int = 0  # 0: hidden_size // num_attention_heads
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_embeddings: bool = True
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    architecture: str = ARCHITECTURE

    def __post_init__(self) -> None:
        if not self.num_key_value_heads:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)

    @staticmethod
    def from_args(args, vocab_size: int) -> "ModelConfig":
        gqa = bool(getattr(args, "group_query_attention", False)) and getattr(args, "num_query_groups", None)
        return ModelConfig(
            vocab_size=vocab_size,
            num_layers=int(args.num_layers),
            hidden_size=int(args.hidden_size),
            num_attention_heads=int(args.num_attention_heads),
            ffn_hidden_size=int(args.ffn_hidden_size or 4 * args.hidden_size),
            max_position_embeddings=int(args.max_position_embeddings or 64),
            num_key_value_heads=int(args.num_query_groups) if gqa else 0,
            head_dim=int(getattr(args, "kv_channels", None) or 0),
            rope_theta=float(getattr(args, "rotary_base", None) or 10000),
            rms_norm_eps=float(getattr(args, "layernorm_epsilon", None) or 1e-5),
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

    def hf_config(self) -> dict:
        """``config.json`` of the same model as transformers' ``Qwen3ForCausalLM``."""
        return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": self.vocab_size,
                "hidden_size": self.hidden_size, "intermediate_size": self.ffn_hidden_size,
                "num_hidden_layers": self.num_layers, "num_attention_heads": self.num_attention_heads,
                "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
                "hidden_act": "silu", "max_position_embeddings": self.max_position_embeddings,
                "rms_norm_eps": self.rms_norm_eps, "rope_parameters": {"rope_theta": self.rope_theta,
                                                                       "rope_type": "default"},
                "tie_word_embeddings": self.tie_embeddings, "attention_bias": False,
                "attention_dropout": self.attention_dropout, "use_sliding_window": False, "sliding_window": None,
                "initializer_range": 0.02, "torch_dtype": "float32", "dtype": "float32", "use_cache": True}

    @staticmethod
    def from_hf_config(c: dict) -> "ModelConfig":
        """The inverse of :meth:`hf_config` (a Qwen3 ``config.json``)."""
        rope = c.get("rope_parameters") or {}
        return ModelConfig(vocab_size=int(c["vocab_size"]), num_layers=int(c["num_hidden_layers"]),
                           hidden_size=int(c["hidden_size"]), num_attention_heads=int(c["num_attention_heads"]),
                           ffn_hidden_size=int(c["intermediate_size"]),
                           max_position_embeddings=int(c["max_position_embeddings"]),
                           num_key_value_heads=int(c.get("num_key_value_heads") or 0),
                           head_dim=int(c.get("head_dim") or 0),
                           rope_theta=float(rope.get("rope_theta", c.get("rope_theta", 10000.0))),
                           rms_norm_eps=float(c.get("rms_norm_eps", 1e-6)),
                           tie_embeddings=bool(c.get("tie_word_embeddings", True)))


class RMSNorm(nn.Module):
    """transformers' ``Qwen3RMSNorm``: float32 statistics, weight applied after the cast back."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * c.head_dim, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
        self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # transformers' Qwen3Attention op for op, with q/k norms and rotations done on q and k side by side
        # (the same elementwise values in half the kernel launches, which dominate at this size). The
        # projections stay separate matmuls: one fused matmul differs in the last bit for narrow heads.
        c = self.c
        b, t, _ = x.shape
        hq, hk, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        qkv = torch.cat((self.q_proj(x), self.k_proj(x), self.v_proj(x)), -1)
        qk, v = qkv.view(b, t, hq + 2 * hk, d).split((hq + hk, hk), dim=2)
        norm_w = torch.cat((self.q_norm.weight.expand(hq, d), self.k_norm.weight.expand(hk, d)))
        qk = qk.transpose(1, 2)
        qk = norm_w[:, None, :] * (qk * torch.rsqrt(qk.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps))
        qk = qk * cos + _rotate_half(qk) * sin
        q, k = qk.split((hq, hk), dim=1)
        v = v.transpose(1, 2)
        # as transformers' KV cache hands them to attention (its concatenation copies them), then its
        # repeat_kv (an expand + reshape, a view when there is one key/value head)
        k, v = k.contiguous(), v.contiguous()
        if hq > hk:
            k, v = (z[:, :, None].expand(b, hk, hq // hk, t, d).reshape(b, hq, t, d) for z in (k, v))
        att = torch.matmul(q, k.transpose(2, 3)) * d ** -0.5 + mask
        att = att.softmax(-1, dtype=torch.float32).to(q.dtype)
        att = F.dropout(att, c.attention_dropout, self.training)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.ffn_hidden_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.ffn_hidden_size, bias=False)
        self.down_proj = nn.Linear(c.ffn_hidden_size, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.drop = nn.Dropout(c.hidden_dropout)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.self_attn(self.input_layernorm(x), cos, sin, mask))
        return x + self.drop(self.mlp(self.post_attention_layernorm(x)))


class Backbone(nn.Module):
    """``Qwen3Model``'s parameters (``model.*``)."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class TinyQwen3(nn.Module):
    """``Qwen3ForCausalLM`` (eager attention, no cache): ``forward(ids [B, T]) -> logits [B, T, V]``.

    No padding mask: training rows are right-padded and attention is causal, so a pad never
    reaches the positions that are scored; decoding batches rows of one prompt length."""

    def __init__(self, c: ModelConfig):
        super().__init__()
        self.config = c
        self.model = Backbone(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.apply(self._init)
        if c.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float) / c.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._rope: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    @staticmethod
    def _init(m: nn.Module) -> None:  # transformers' _init_weights with initializer_range 0.02
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def _positions(self, t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """cos, sin ([1, 1, T, head_dim]) and the additive causal mask ([T, T]), cached per length."""
        hit = self._rope.get(t)
        if hit is None:
            freqs = torch.arange(t, dtype=torch.float)[:, None] * self.inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            mask = torch.full((t, t), torch.finfo(torch.float32).min).triu(1)
            hit = self._rope[t] = (emb.cos()[None, None], emb.sin()[None, None], mask)
        return hit

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        if t > self.config.max_position_embeddings:
            raise ValueError(f"sequence of {t} tokens exceeds --max-position-embeddings "
                             f"{self.config.max_position_embeddings}")
        cos, sin, mask = self._positions(t)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.model.norm(x))


def state_dict_for_hf(model: TinyQwen3) -> dict[str, torch.Tensor]:
    """The weights as ``Qwen3ForCausalLM`` saves them (tied ``lm_head.weight`` left out, contiguous copies)."""
    sd = model.state_dict()
    if model.config.tie_embeddings:
        sd.pop("lm_head.weight", None)
    return {k: v.detach().contiguous().clone() for k, v in sd.items()}


def build_model(cfg: ModelConfig, seed: int) -> TinyQwen3:
    """Initial weights are a pure function of (arch, seed): init_model and a seed-only run agree."""
    g_state = torch.get_rng_state()
    torch.manual_seed(seed)
    model = TinyQwen3(cfg)
    torch.set_rng_state(g_state)
    return model


def count_params(cfg: ModelConfig) -> int:
    return sum(p.numel() for p in TinyQwen3(cfg).parameters())


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
