"""``python -m trainstack.tiny.init_model --save DIR <arch flags> --seed N``: initial weights.

The analog of slime's HF -> torch_dist conversion: writes ``DIR/release/`` and a tracker
reading ``release`` (Megatron's marker for a converted, iteration-less checkpoint), which
``--ref-load DIR`` (reference model / initial weights) or ``--load DIR`` accepts. A run
with no ``--ref-load`` and the same ``--seed`` starts from the very same weights.
"""
from __future__ import annotations

import sys

from trainstack.errors import ConfigError, ConfigErrors, report_and_exit


def main(argv: list[str] | None = None) -> int:
    from .cli import parse_argv

    argv = sys.argv[1:] if argv is None else argv
    try:
        parsed = parse_argv(argv)
        a = parsed.args
        errs = [ConfigError(f, "required") for f, v in (("--save", a.save), ("--num-layers", a.num_layers),
                                                        ("--hidden-size", a.hidden_size),
                                                        ("--num-attention-heads", a.num_attention_heads)) if v is None]
        if errs:
            raise ConfigErrors(errs)
        if a.ffn_hidden_size is None:
            a.ffn_hidden_size = 4 * a.hidden_size
        if a.max_position_embeddings is None:
            a.max_position_embeddings = a.seq_length or 64
    except ConfigErrors as e:
        report_and_exit(e)
    from .checkpoint import RELEASE, TrainState, save_checkpoint
    from .model import FORMAT, ModelConfig, build_model, count_params, setup_determinism
    from .tokenizer import CharTokenizer

    setup_determinism()
    cfg = ModelConfig.from_args(a, CharTokenizer().vocab_size)
    model = build_model(cfg, a.seed)
    meta = {"rollout_id": RELEASE, "arch": cfg.arch(), "seed": a.seed, "format": FORMAT}
    d = save_checkpoint(a.save, RELEASE, TrainState(model.state_dict(), None, None, None, meta))
    print(f"wrote {d} ({count_params(cfg)} parameters, seed {a.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
