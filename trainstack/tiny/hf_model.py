"""The tiny model as a Hugging Face model directory, and back.

    <dir>/model.safetensors          the weights, named as transformers' Qwen3ForCausalLM names them
         /tokenizer.json             the tiny tokenizer (hf_tokenizer.py)
         /tokenizer_config.json      its chat template and special tokens
         /generation_config.json     eos/pad ids
         /config.json                Qwen3Config (written last: a directory with a config.json is complete)

``transformers.AutoModelForCausalLM.from_pretrained(dir)`` and ``AutoTokenizer.from_pretrained(dir)``
load it (tests/tiny/test_hf_export.py). ``--save-hf``, ``trainstack export`` on CPU and the tiny
HF -> torch_dist conversion (``trainstack.inputs.convert_tiny``) all go through here.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import ModelConfig, TinyQwen3

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
LEGACY_WEIGHTS = "pytorch_model.bin"
GENERATION = "generation_config.json"


def config_json(cfg: "ModelConfig", extra: dict | None = None) -> dict:
    from .tokenizer import TinyTokenizer

    tok = TinyTokenizer()
    return {**cfg.hf_config(), "bos_token_id": None, "eos_token_id": tok.eos_token_id,
            "pad_token_id": tok.pad_token_id, **(extra or {})}


def write(out: str | os.PathLike, model: "TinyQwen3", *, extra_config: dict | None = None,
          template: str = "plain", extra_files: dict[str, bytes] | None = None) -> Path:
    """Write ``model`` as a Hugging Face directory (every file atomically, config.json last)."""
    from safetensors.torch import save

    from . import hf_tokenizer
    from .checkpoint import atomic_write_bytes
    from .model import state_dict_for_hf
    from .tokenizer import TinyTokenizer

    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    tok = TinyTokenizer()
    atomic_write_bytes(save(state_dict_for_hf(model), metadata={"format": "pt"}), str(d / WEIGHTS))
    hf_tokenizer.write(d, template)
    gen = {"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id, "bos_token_id": None}
    atomic_write_bytes(_json(gen), str(d / GENERATION))
    for name, data in (extra_files or {}).items():
        atomic_write_bytes(data, str(d / name))
    atomic_write_bytes(_json(config_json(model.config, extra_config)), str(d / CONFIG))
    return d


def _json(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()


def read_config(path: str | os.PathLike) -> dict:
    """``config.json`` of a model directory (OSError/ValueError when missing or unreadable)."""
    with open(Path(path) / CONFIG, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{Path(path) / CONFIG} is not a JSON object")
    return data


def read(path: str | os.PathLike) -> tuple["ModelConfig", dict]:
    """(ModelConfig, state dict loadable into TinyQwen3) of a Qwen3 model directory."""
    import torch

    from .model import ModelConfig

    d = Path(path)
    hf = read_config(d)
    if hf.get("model_type") != "qwen3":
        raise ValueError(f"{d / CONFIG}: model_type is {hf.get('model_type')!r}, not 'qwen3'")
    cfg = ModelConfig.from_hf_config(hf)
    if (d / WEIGHTS).exists():
        from safetensors.torch import load_file

        state = load_file(str(d / WEIGHTS))
    else:
        state = torch.load(d / LEGACY_WEIGHTS, map_location="cpu", weights_only=True)
    if cfg.tie_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    return cfg, state


def load(path: str | os.PathLike) -> "TinyQwen3":
    """The tiny model of a Qwen3 model directory, without transformers."""
    from .model import TinyQwen3

    cfg, state = read(path)
    model = TinyQwen3(cfg)
    model.load_state_dict(state)
    return model.eval()
