"""The tiny model's tokenizer: trained here on the tasks' text, written as Hugging Face files.

``train()`` fits a ``tokenizers`` byte-pair-encoding model on the text the tiny tasks produce
(every arithmetic problem with its answer, every chain_sum conversation in both chat templates),
digits split one per token (Qwen's pre-tokenizer does the same), over the old character alphabet
``0-9 + - * =`` plus space and newline. The text has no repeated multi-character units left
once digits are split, so the trained model is that alphabet without merges. Added tokens: the
specials Qwen3's chat template uses (``<|endoftext|>`` pad, ``<|im_start|>``, ``<|im_end|>`` eos)
and ``<unk>`` for characters outside the alphabet, and, as plain (non-special) added tokens so
they survive ``skip_special_tokens``, the tags of Qwen3's template (``<think>``,
``<tool_call>``, ``<tool_response>``) and of slime's agentic examples (search-r1: ``<search>``,
``<information>``, ``<answer>``; retool: ``<code>``, ``<interpreter>``), each with its closing
tag. The result ships as ``trainstack/data/tiny_tokenizer.json`` (``python -m
trainstack.tiny.hf_tokenizer --retrain`` rewrites it; a test checks it equals a fresh training).

Generate functions written for slime load "the model's tokenizer and chat template" from
``--hf-checkpoint``; ``write(dir)`` puts ``tokenizer.json`` + ``tokenizer_config.json`` there
(``transformers.AutoTokenizer`` loads them). The chat template: user, tool and system messages are
their content, an assistant turn is ``=`` + its content, and the generation prompt is ``=``; a
conversation ``[user "3+4", assistant "7", user "+2"]`` renders as ``3+4=7+2=``. The ``thinking``
template has Qwen3's shape: the generation prompt opens and closes an empty think block
(``=<think></think>``, Qwen3 with enable_thinking=false) and an earlier assistant turn is
re-rendered without it (only what follows ``</think>``).

``python -m trainstack.tiny.hf_tokenizer --out DIR`` writes the files; ``matches(dir)`` checks a
directory's vocabulary against the shipped one (the tiny validator refuses a mismatch).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from .tokenizer import EOS, IM_START, PAD, SHIPPED, UNK

ALPHABET = "0123456789+-*= \n"
TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
        "<search>", "</search>", "<information>", "</information>", "<answer>", "</answer>",
        "<code>", "</code>", "<interpreter>", "</interpreter>")
SPECIALS = (PAD, IM_START, EOS, UNK)
VOCAB_LIMIT = 64

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}={{ message['content'] }}"
    "{%- else -%}{{ message['content'] }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}={%- endif -%}"
)
# Qwen3's shape: the generation prompt opens and closes an empty think block (Qwen3 with
# enable_thinking=false), and an earlier assistant turn is re-rendered without it (Qwen3 keeps only
# what follows </think>). A generate function that re-renders the conversation and checks its own
# tokens as a prefix fails every episode here.
THINKING_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}={{ message['content'].split('</think>')[-1] }}"
    "{%- else -%}{{ message['content'] }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}=<think></think>{%- endif -%}"
)
TEMPLATES = {"plain": CHAT_TEMPLATE, "thinking": THINKING_CHAT_TEMPLATE}
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"


def corpus() -> list[str]:
    """The tasks' text: arithmetic problems with answers, chain_sum conversations in both templates."""
    from .arithmetic import chain_sums, problems

    lines = [p["prompt"] + p["label"] for p in problems()]
    for start, adds in chain_sums():
        totals = [start + sum(adds[:i + 1]) for i in range(len(adds))]
        plain = f"{start}+{adds[0]}=" + "".join(f"{t}+{a}=" for t, a in zip(totals, adds[1:])) + str(totals[-1])
        lines += [plain, plain.replace("=", "=<think></think>")]
    return lines


def train():
    """A fresh training of the tokenizer (deterministic: same corpus, same file)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    t = Tokenizer(models.BPE(unk_token=UNK))
    t.pre_tokenizer = pre_tokenizers.Digits(individual_digits=True)
    t.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_LIMIT, special_tokens=[*SPECIALS, *TAGS],
                                  initial_alphabet=list(ALPHABET), limit_alphabet=len(ALPHABET), show_progress=False)
    t.train_from_iterator(corpus(), trainer=trainer)  # ids: specials, tags, then the alphabet and merges
    t.add_tokens([AddedToken(s, special=False, normalized=False) for s in TAGS])  # tags: text, not special
    return t


def trained_json() -> str:
    return train().to_str(pretty=True) + "\n"


def tokenizer_json() -> str:
    """The shipped tokenizer (what every tiny checkpoint's embedding rows index)."""
    return SHIPPED.read_text(encoding="utf-8")


def vocab() -> dict[str, int]:
    """Every token (model vocabulary and added tokens) with its id."""
    data = json.loads(tokenizer_json())
    out = dict(data["model"]["vocab"])
    out.update({a["content"]: a["id"] for a in data["added_tokens"]})
    return out


def tokenizer_config(template: str = "plain") -> dict:
    return {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": TEMPLATES[template], "eos_token": EOS,
            "pad_token": PAD, "unk_token": UNK, "bos_token": None, "clean_up_tokenization_spaces": False,
            "model_max_length": 1 << 20}


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write(out_dir: str | os.PathLike, template: str = "plain") -> Path:
    """Write (or refresh) the two files; unchanged files are left alone. `template`: plain or thinking."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    for name, text in ((TOKENIZER_FILE, tokenizer_json()),
                       (CONFIG_FILE, json.dumps(tokenizer_config(template), indent=1, sort_keys=True) + "\n")):
        p = d / name
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            _write(p, text)
    return d


def matches(path: str | os.PathLike) -> str | None:
    """None when ``path/tokenizer.json`` has the tiny model's vocabulary, else what is wrong."""
    p = Path(path) / TOKENIZER_FILE
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{p} does not exist"
    except (OSError, ValueError) as e:
        return f"{p} cannot be read: {e}"
    got = dict((data.get("model") or {}).get("vocab") or {})
    got.update({a.get("content"): a.get("id") for a in data.get("added_tokens") or [] if isinstance(a, dict)})
    if got != vocab():
        return f"{p} does not have the tiny model's vocabulary ({len(vocab())} ids)"
    return None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m trainstack.tiny.hf_tokenizer", description=__doc__.splitlines()[0])
    p.add_argument("--out", help="directory for tokenizer.json and tokenizer_config.json")
    p.add_argument("--template", choices=sorted(TEMPLATES), default="plain",
                   help="the chat template: plain, or thinking (Qwen3's shape: an empty <think></think> block)")
    p.add_argument("--retrain", action="store_true",
                   help=f"train the tokenizer again and rewrite the shipped {SHIPPED.name} (changes every checkpoint's ids)")
    a = p.parse_args(argv)
    if not a.out and not a.retrain:
        p.error("give --out DIR (or --retrain)")
    if a.retrain:
        _write(SHIPPED, trained_json())
        print(SHIPPED)
    if a.out:
        print(write(a.out, a.template))


if __name__ == "__main__":
    main()
