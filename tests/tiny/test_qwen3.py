"""The tiny model is transformers' Qwen3ForCausalLM, and its tokenizer a trained `tokenizers` BPE.

Checked against what nobody here wrote: transformers' own Qwen3 modeling code (logits bit for bit,
eager attention, any size the flags allow), ``AutoModelForCausalLM`` / ``AutoTokenizer`` loading an
export, and ``tokenizers``' own BPE trainer reproducing the shipped vocabulary.
"""
from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


def _hf_twin(cfg, model):
    """transformers' Qwen3ForCausalLM with the tiny model's config and weights (eager attention)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from trainstack.tiny.model import state_dict_for_hf

    hc = Qwen3Config(**{k: v for k, v in cfg.hf_config().items() if k not in ("architectures", "model_type")})
    hc._attn_implementation = "eager"
    twin = Qwen3ForCausalLM(hc).eval()
    missing, unexpected = twin.load_state_dict(state_dict_for_hf(model), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    if cfg.tie_embeddings:
        assert twin.lm_head.weight.data_ptr() == twin.model.embed_tokens.weight.data_ptr()
    return twin


@given(layers=st.integers(1, 2), heads=st.sampled_from([(2, 1), (2, 2), (4, 2), (4, 4)]),
       head_dim=st.sampled_from([8, 16]), ffn=st.sampled_from([24, 64]), tie=st.booleans(),
       theta=st.sampled_from([10000.0, 1e6]), seq=st.integers(1, 12), seed=st.integers(0, 2**16))
@settings(max_examples=6, deadline=None)  # each new shape costs oneDNN a kernel build (~0.4 s): few examples
def test_logits_equal_transformers_qwen3_bit_for_bit(layers, heads, head_dim, ffn, tie, theta, seq, seed):
    import torch

    from trainstack.tiny.model import ModelConfig, build_model

    h, kv = heads
    cfg = ModelConfig(vocab_size=36, num_layers=layers, hidden_size=h * head_dim, num_attention_heads=h,
                      ffn_hidden_size=ffn, max_position_embeddings=16, num_key_value_heads=kv, rope_theta=theta,
                      tie_embeddings=tie)
    model = build_model(cfg, seed).eval()
    twin = _hf_twin(cfg, model)
    ids = torch.randint(0, 36, (3, seq), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        assert torch.equal(model(ids), twin(input_ids=ids).logits)


def test_the_shipped_tokenizer_is_what_training_on_the_tasks_text_gives():
    from trainstack.tiny import hf_tokenizer

    assert hf_tokenizer.trained_json() == hf_tokenizer.tokenizer_json()
    v = hf_tokenizer.vocab()
    assert len(v) == 36 and all(c in v for c in "0123456789+=")
    data = json.loads(hf_tokenizer.tokenizer_json())
    assert data["model"]["type"] == "BPE" and data["pre_tokenizer"]["type"] == "Digits"
    special = {a["content"]: a["special"] for a in data["added_tokens"]}
    assert all(special[t] for t in hf_tokenizer.SPECIALS) and not any(special[t] for t in hf_tokenizer.TAGS)


TEXT = st.lists(st.sampled_from(list("0123456789+-*= \nxy") + ["<think>", "</think>", "<search>", "</search>",
                                                                 "<code>", "</code>", "<answer>", "<|im_end|>"]),
                max_size=20).map("".join)


@given(TEXT)
@settings(max_examples=60, deadline=None)
def test_auto_tokenizer_and_the_trainer_tokenize_alike(tmp_path_factory, text):
    """What slime's rollout (AutoTokenizer from --hf-checkpoint) and the tiny server (tokenizers) see agree,
    and the tags of slime's agentic examples are single tokens that decoding keeps."""
    from transformers import AutoTokenizer

    from trainstack.tiny import hf_tokenizer
    from trainstack.tiny.tokenizer import TinyTokenizer

    d = tmp_path_factory.getbasetemp() / "tok"
    auto = AutoTokenizer.from_pretrained(str(hf_tokenizer.write(d)))
    tiny = TinyTokenizer()
    ids = tiny.encode(text)
    assert auto.encode(text, add_special_tokens=False) == ids
    assert auto.decode(ids, skip_special_tokens=True) == tiny.decode(ids)
    known = text.replace("x", "").replace("y", "")
    assert tiny.decode(tiny.encode(known), skip_special_tokens=False) == known
    for tag in hf_tokenizer.TAGS:
        assert len(tiny.encode(tag)) == 1 and tiny.decode(tiny.encode(f"1{tag}2")) == f"1{tag}2"


def test_an_export_loads_with_transformers_and_generates_what_the_trainer_generates(tmp_path):
    """hf_model.write -> AutoModelForCausalLM/AutoTokenizer: greedy generate() gives the trainer's greedy tokens,
    and the trainer's sampler driven by the loaded model's logits gives the trainer's sampled tokens."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainstack.tiny import hf_model
    from trainstack.tiny.generate import sample
    from trainstack.tiny.model import ModelConfig, build_model, setup_determinism
    from trainstack.tiny.tokenizer import TinyTokenizer

    setup_determinism(1)
    tok = TinyTokenizer()
    model = build_model(ModelConfig(tok.vocab_size, 2, 64, 4, 256, 32), 5)
    out = hf_model.write(tmp_path / "hf", model)
    auto = AutoModelForCausalLM.from_pretrained(str(out), attn_implementation="eager").eval()
    auto_tok = AutoTokenizer.from_pretrained(str(out))
    assert type(auto).__name__ == "Qwen3ForCausalLM"
    prompts = [tok.encode(p) for p in ("23+4=", "3+4=7+2=", "<search>12</search>=")]
    greedy = sample(model, prompts, max_new_tokens=6, temperature=0.0)  # both stop at <|im_end|>
    for p, g in zip(prompts, greedy):
        gen = auto.generate(torch.tensor([p]), max_new_tokens=6, do_sample=False)
        assert gen[0, len(p):].tolist() == g.output_ids
        assert auto_tok.decode(g.output_ids, skip_special_tokens=True) == tok.decode(g.output_ids)

    class Loaded(torch.nn.Module):  # the loaded model behind the trainer's sampler
        config = model.config

        def forward(self, ids):
            return auto(input_ids=ids).logits

    seed = random.Random(7).random()
    mine = sample(model, prompts, max_new_tokens=6, temperature=1.0, seed=seed)
    theirs = sample(Loaded(), prompts, max_new_tokens=6, temperature=1.0, seed=seed)
    assert [r.output_ids for r in mine] == [r.output_ids for r in theirs]
    assert [r.logprobs for r in mine] == [r.logprobs for r in theirs]
    back = hf_model.load(out)
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), model.state_dict().values()))


@pytest.mark.parametrize("flags, problem", [
    (["--group-query-attention", "--num-query-groups", "3"], "--num-query-groups"),
    (["--kv-channels", "7"], "--kv-channels"),
])
def test_bad_qwen3_shapes_are_refused_with_the_flag(flags, problem):
    from trainstack.errors import ConfigErrors
    from trainstack.tiny.validate import main_parse

    base = ["--num-layers", "1", "--hidden-size", "64", "--num-attention-heads", "4", "--rollout-batch-size", "2",
            "--n-samples-per-prompt", "2", "--global-batch-size", "4", "--num-rollout", "1", "--prompt-data", "x",
            "--custom-rm-path", "trainstack.tiny.arithmetic.reward"]
    with pytest.raises(ConfigErrors) as e:
        main_parse(base + flags)
    assert problem in str(e.value)
