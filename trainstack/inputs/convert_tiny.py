"""The tiny backend's HF -> torch_dist conversion, with the argv of slime's own converter.

    python -m trainstack.inputs.convert_tiny <model flags> --hf-checkpoint HF_DIR --save OUT_DIR

slime converts with `tools/convert_hf_to_torch_dist.py ${MODEL_ARGS[@]} --hf-checkpoint H --save S`;
the CPU path speaks the same argv so that `trainstack prepare` renders one command shape for both
backends. HF_DIR holds the Hugging Face layout of the tiny model (a Qwen3 config.json,
model.safetensors, the tokenizer: trainstack/tiny/hf_model.py); OUT_DIR gets `release/` and a tracker reading `release`
(what `--ref-load` loads), exactly as `trainstack.tiny.init_model` writes them. The model flags must
describe the weights in config.json (a mismatch is refused, exit 2, nothing written).

`export_hf(dir, flags, seed)` writes such an HF dir (tests publish it on the fake Hub).
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from trainstack.errors import ConfigError, ConfigErrors, report_and_exit

if TYPE_CHECKING:
    from trainstack.tiny.model import ModelConfig
MODEL_TYPE = "qwen3"


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
    from trainstack.tiny import hf_model
    from trainstack.tiny.cli import parse_argv
    from trainstack.tiny.model import build_model, setup_determinism

    setup_determinism()
    cfg = _config(parse_argv(argv).args)
    hf_model.write(out, build_model(cfg, seed), extra_config={"trainstack": {"seed": seed}})
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
        from trainstack.tiny import hf_model
        from trainstack.tiny.model import ModelConfig

        try:
            hf = hf_model.read_config(a.hf_checkpoint)
            have = ModelConfig.from_hf_config(hf).arch() if hf.get("model_type") == MODEL_TYPE else {}
        except (OSError, ValueError, KeyError, TypeError) as ex:
            raise ConfigErrors([ConfigError("--hf-checkpoint", f"no readable Qwen3 {hf_model.CONFIG} ({ex})",
                                            "point it at the tiny model's HF directory", value=a.hf_checkpoint)]) from None
        arch = cfg.arch()
        wrong = {k: (have.get(k), v) for k, v in arch.items() if have.get(k) != v} if have else {}
        if hf.get("model_type") != MODEL_TYPE or wrong:
            raise ConfigErrors([ConfigError("--hf-checkpoint", "the weights are not the model the flags describe: "
                                            + ", ".join(f"{k} {a_} (weights) != {b} (flags)"
                                                        for k, (a_, b) in wrong.items()) if wrong else
                                            f"model_type is {hf.get('model_type')!r}, not {MODEL_TYPE!r}",
                                            "convert with the model flags of the checkpoint's config.json",
                                            value=a.hf_checkpoint)])
    except ConfigErrors as e:
        report_and_exit(e)
    from trainstack.tiny.checkpoint import RELEASE, TrainState, save_checkpoint
    from trainstack.tiny.model import FORMAT

    _, state = hf_model.read(a.hf_checkpoint)
    meta = {"rollout_id": RELEASE, "arch": arch, "seed": (hf.get("trainstack") or {}).get("seed"), "format": FORMAT,
            "converted_from": os.path.realpath(a.hf_checkpoint)}
    d = save_checkpoint(a.save, RELEASE, TrainState(state, None, None, None, meta))
    print(f"converted {a.hf_checkpoint} -> {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
