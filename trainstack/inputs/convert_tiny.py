"""The tiny backend's HF -> torch_dist conversion, with the argv of slime's own converter.

    python -m trainstack.inputs.convert_tiny <model flags> --hf-checkpoint HF_DIR --save OUT_DIR

slime converts with `tools/convert_hf_to_torch_dist.py ${MODEL_ARGS[@]} --hf-checkpoint H --save S`;
the CPU path speaks the same argv so that `trainstack prepare` renders one command shape for both
backends. HF_DIR holds the Hugging Face layout of the tiny model (config.json, pytorch_model.bin,
tokenizer.json, tokenizer_config.json); OUT_DIR gets `release/` and a tracker reading `release`
(what `--ref-load` loads), exactly as `trainstack.tiny.init_model` writes them. The model flags must
describe the weights in config.json (a mismatch is refused, exit 2, nothing written).

`export_hf(dir, flags, seed)` writes such an HF dir (tests publish it on the fake Hub).
"""
from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from trainstack.errors import ConfigError, ConfigErrors, report_and_exit

CONFIG = "config.json"
WEIGHTS = "pytorch_model.bin"

if TYPE_CHECKING:
    from trainstack.tiny.model import ModelConfig
MODEL_TYPE = "trainstack-tiny"


def _config(args) -> "ModelConfig":
    from trainstack.tiny.model import ModelConfig
    from trainstack.tiny.tokenizer import CharTokenizer

    if args.ffn_hidden_size is None:
        args.ffn_hidden_size = 4 * args.hidden_size
    if args.max_position_embeddings is None:
        args.max_position_embeddings = args.seq_length or 64
    return ModelConfig.from_args(args, CharTokenizer().vocab_size)


def export_hf(out: str, argv: list[str], seed: int = 1234) -> str:
    """Write the tiny model (initialised from `seed`) in the HF layout, with its tokenizer."""
    import torch

    from trainstack.tiny.cli import parse_argv
    from trainstack.tiny.hf_tokenizer import write
    from trainstack.tiny.model import build_model, setup_determinism

    setup_determinism()
    cfg = _config(parse_argv(argv).args)
    model = build_model(cfg, seed)
    os.makedirs(out, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(out, WEIGHTS))
    with open(os.path.join(out, CONFIG), "w", encoding="utf-8") as f:
        json.dump({"model_type": MODEL_TYPE, **cfg.arch(), "seed": seed}, f, indent=1, sort_keys=True)
    write(out)
    return out


def main(argv: list[str] | None = None) -> int:
    from trainstack.tiny.cli import parse_argv

    argv = sys.argv[1:] if argv is None else argv
    try:
        a = parse_argv(argv).args
        errs = [ConfigError(f, "required") for f, v in (("--hf-checkpoint", a.hf_checkpoint), ("--save", a.save),
                                                        ("--num-layers", a.num_layers), ("--hidden-size", a.hidden_size),
                                                        ("--num-attention-heads", a.num_attention_heads)) if v is None]
        if errs:
            raise ConfigErrors(errs)
        cfg = _config(a)
        try:
            with open(os.path.join(a.hf_checkpoint, CONFIG), encoding="utf-8") as f:
                hf = json.load(f)
        except (OSError, ValueError) as ex:
            raise ConfigErrors([ConfigError("--hf-checkpoint", f"no readable {CONFIG} ({ex})",
                                            "point it at the tiny model's HF directory", value=a.hf_checkpoint)]) from None
        arch = cfg.arch()
        wrong = {k: (hf.get(k), v) for k, v in arch.items() if hf.get(k) != v}
        if hf.get("model_type") != MODEL_TYPE or wrong:
            raise ConfigErrors([ConfigError("--hf-checkpoint", "the weights are not the model the flags describe: "
                                            + ", ".join(f"{k} {a_} (weights) != {b} (flags)"
                                                        for k, (a_, b) in wrong.items()) if wrong else
                                            f"model_type is {hf.get('model_type')!r}, not {MODEL_TYPE!r}",
                                            "convert with the model flags of the checkpoint's config.json",
                                            value=a.hf_checkpoint)])
    except ConfigErrors as e:
        report_and_exit(e)
    import torch

    from trainstack.tiny.checkpoint import RELEASE, TrainState, save_checkpoint

    state = torch.load(os.path.join(a.hf_checkpoint, WEIGHTS), map_location="cpu", weights_only=True)
    meta = {"rollout_id": RELEASE, "arch": arch, "seed": hf.get("seed"), "format": "trainstack-tiny/1",
            "converted_from": os.path.realpath(a.hf_checkpoint)}
    d = save_checkpoint(a.save, RELEASE, TrainState(state, None, None, None, meta))
    print(f"converted {a.hf_checkpoint} -> {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
