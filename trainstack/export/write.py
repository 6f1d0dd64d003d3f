"""Writing an export: the tiny model's own Hugging Face writer on the CPU backend, slime's converter on slime."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from trainstack.errors import RuntimeFailure
from trainstack.export.plan import PROVENANCE, Export, converter_argv


class ExportFailed(RuntimeFailure):
    what = "the export"


def tiny(ex: Export) -> Path:
    """The checkpoint's weights into transformers' Qwen3 layout (trainstack/tiny/hf_model.py), with the tokenizer."""
    from trainstack.tiny import hf_model
    from trainstack.tiny.checkpoint import load_checkpoint
    from trainstack.tiny.model import ModelConfig, TinyQwen3

    _, state = load_checkpoint(ex.save_dir, ex.iteration, load_optim=False, load_rng=False)
    arch = dict(state.meta.get("arch") or {})
    if arch.get("architecture") != "qwen3":
        raise ExportFailed(f"{ex.checkpoint} holds the earlier character model (meta.json arch {arch}), which "
                           "transformers cannot load", "export a checkpoint trained by this trainstack (Qwen3)")
    model = TinyQwen3(ModelConfig(**arch))
    model.load_state_dict(state.model)
    record = ex.provenance("trainstack.tiny.hf_model")
    keep = {k: record[k] for k in ("source_run", "iteration", "slime_commit")}
    return hf_model.write(ex.out, model, extra_config={"trainstack": keep},
                          extra_files={PROVENANCE: (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()})


def slime(ex: Export) -> Path:
    """slime's converter on this host (it needs slime's environment: torch, Megatron's checkpoint format)."""
    origin = ex.spec.args.get("hf_checkpoint")
    vocab = None
    try:
        with open(os.path.join(str(origin), "config.json"), encoding="utf-8") as f:
            vocab = json.load(f).get("vocab_size")
    except (OSError, ValueError, TypeError):
        pass
    argv = converter_argv(ex, vocab)
    env = {**os.environ, **(ex.spec.command.get("env") or {})}
    print("trainstack: export: " + " ".join(argv), file=sys.stderr, flush=True)
    code = subprocess.call(argv, cwd=ex.spec.command.get("cwd") or None, env=env)
    if code != 0:
        raise ExportFailed(f"slime's converter exited with {code}", "read its output above; it needs slime's "
                           "environment (run the export where the run trained, e.g. on its GPU host)")
    (ex.out / PROVENANCE).write_text(json.dumps(ex.provenance(" ".join(argv)), indent=1, sort_keys=True) + "\n")
    return ex.out


def write(ex: Export) -> Path:
    return tiny(ex) if ex.spec.cluster.backend == "tiny" else slime(ex)
