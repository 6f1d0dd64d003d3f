"""`trainstack exec`'s check with slime's own parser (trainstack/upstream/realparse.py), run here against slime's
real `slime/utils/arguments.py` (the submodule) with only the GPU-only imports replayed: what slime's validators
refuse and what its parsers silently drop are refused in trainstack's style; a CPU machine without the stack
says the tables were used."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import ROOT, run_py
from trainstack.upstream.argtable import TABLE_PATH
from trainstack.upstream import realparse
from trainstack.upstream.select import table_label

PIN_LABEL = table_label()  # `slime <the pin>`

SLIME = ROOT / "slime"
pytestmark = pytest.mark.skipif(not (SLIME / "slime" / "__init__.py").is_file(), reason="the slime/ submodule is empty")


@pytest.fixture
def standins(monkeypatch):
    monkeypatch.setenv(realparse.STANDINS_ENV, str(TABLE_PATH))


def small_model(tmp_path: Path, **hf: object) -> list[str]:
    """A small model's argv and an HF config.json that agrees with it (slime compares the two)."""
    config = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 256, "vocab_size": 1000,
              "rms_norm_eps": 1e-6, "rope_theta": 10000, "tie_word_embeddings": False,
              "max_position_embeddings": 512, **hf}
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    return ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--ffn-hidden-size", "256",
            "--seq-length", "128", "--max-position-embeddings", "512", "--untie-embeddings-and-output-weights",
            "--norm-epsilon", "1e-6", "--rollout-batch-size", "8", "--num-rollout", "2",
            "--hf-checkpoint", str(tmp_path / "hf")]


@pytest.mark.slow
@pytest.mark.parametrize("extra,ok,says", [
    ([], True, None),
    (["--rollout-shufle"], False, "ignored --rollout-shufle"),  # slime drops a typo silently
])
def test_slimes_own_parser_judges_the_argv(tmp_path, standins, extra, ok, says):
    verdict = realparse.run(SLIME, [*small_model(tmp_path), *extra])
    assert verdict.ok is ok, verdict
    if says and says.startswith("ignored "):
        assert verdict.ignored == [says.split()[1]]


@pytest.mark.slow
def test_what_only_the_node_knows_is_refused_in_trainstacks_style(tmp_path, standins):
    """The checkpoint's config.json disagrees with the model flags: only slime's parser on the node, reading
    the real checkpoint, can tell; exec refuses it before Ray starts, naming slime's message."""
    argv = small_model(tmp_path, hidden_size=128)
    (err,) = realparse.problems(SLIME, argv, dict(os.environ), PIN_LABEL)
    assert err.key == "slime" and f"{PIN_LABEL}'s own parser refuses this command" in err.problem
    assert "hidden_size" in err.problem and "arguments.py:" in err.problem and "Traceback" not in err.problem


def test_without_the_stack_nothing_runs_and_the_dry_run_says_the_tables_were_used(tmp_path):
    assert not realparse.stack_present(SLIME)  # this CPU machine has no Megatron-LM / SGLang
    fake = tmp_path / "stack"
    for pkg in ("megatron/training", "sglang/srt", "sglang_router"):
        (fake / pkg).mkdir(parents=True)
        (fake / pkg / "__init__.py").write_text("")
    (fake / "megatron" / "__init__.py").write_text("")
    (fake / "sglang" / "__init__.py").write_text("")
    assert realparse.stack_present(SLIME, [str(fake)])  # the trainer's PYTHONPATH decides

    res = run_py("experiment=qwen3-4B-grpo-dapo", "args.no_save_optim=true", f"slime.root={SLIME}", "dry_run=true",
                 cwd=tmp_path)  # (no_save_optim: a checkpoint of 4B with optimizer state outgrows CI's disk)
    assert "slime's parser stack (Megatron-LM, SGLang) is not installed here: the command is checked against " \
           f"trainstack's table for {PIN_LABEL}" in res.stdout.replace("\n", " ") + res.stderr, res.stdout[-3000:]
