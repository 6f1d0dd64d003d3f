"""The tiny model's tokenizer as Hugging Face files: ``tokenizer.json`` + ``tokenizer_config.json``.

Generate functions written for slime load "the model's tokenizer and chat template" from
``--hf-checkpoint`` (a Hugging Face model directory). The tiny model has no such directory, so
this writes one for it: a ``tokenizers`` WordLevel model over exactly the ids of
``CharTokenizer`` (one token per character, ``<pad> <eos> <unk>`` as special tokens) and a chat
template in the tiny alphabet. The same files load with ``transformers.AutoTokenizer``.

The chat template: user, tool and system messages are their content, an assistant turn is
``=`` + its content, and the generation prompt is ``=``. A conversation
``[user "3+4", assistant "7", user "+2"]`` renders as ``3+4=7+2=``.

``python -m trainstack.tiny.hf_tokenizer --out DIR`` writes the files; ``matches(dir)`` checks a
directory's vocabulary against ``CharTokenizer`` (the tiny validator refuses a mismatch).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from .tokenizer import EOS, PAD, UNK, CharTokenizer

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}={{ message['content'] }}"
    "{%- else -%}{{ message['content'] }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}={%- endif -%}"
)
# Qwen3's shape in the tiny alphabet (`*` for `<think>`/`</think>`): the generation prompt opens and closes
# an empty think block (Qwen3 with enable_thinking=false), and an earlier assistant turn is re-rendered
# without it, its reasoning cut at the last `*` (Qwen3 keeps only what follows `</think>`). A generate
# function that re-renders the conversation and checks its own tokens as a prefix fails every episode here.
THINKING_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}={{ message['content'].split('*')[-1] }}"
    "{%- else -%}{{ message['content'] }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}=**{%- endif -%}"
)
TEMPLATES = {"plain": CHAT_TEMPLATE, "thinking": THINKING_CHAT_TEMPLATE}
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"


def vocab() -> dict[str, int]:
    tok = CharTokenizer()
    out = {name: i for i, name in enumerate(tok.specials)}
    out.update({c: i + len(tok.specials) for i, c in enumerate(tok.alphabet)})
    return out


def tokenizer_json() -> str:
    """The ``tokenizers`` serialisation (deterministic: same text for the same alphabet)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    t = Tokenizer(models.WordLevel(vocab=vocab(), unk_token=UNK))
    t.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # one token per character
    t.decoder = decoders.Fuse()
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in (PAD, EOS, UNK)])
    return t.to_str(pretty=True)


def tokenizer_config(template: str = "plain") -> dict:
    return {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": TEMPLATES[template], "eos_token": EOS,
            "pad_token": PAD, "unk_token": UNK, "bos_token": None, "clean_up_tokenization_spaces": False}


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
    """None when ``path/tokenizer.json`` has CharTokenizer's vocabulary, else what is wrong."""
    p = Path(path) / TOKENIZER_FILE
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{p} does not exist"
    except (OSError, ValueError) as e:
        return f"{p} cannot be read: {e}"
    got = (data.get("model") or {}).get("vocab")
    if got != vocab():
        return f"{p} does not have the tiny model's character vocabulary ({len(vocab())} ids)"
    return None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m trainstack.tiny.hf_tokenizer", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for tokenizer.json and tokenizer_config.json")
    p.add_argument("--template", choices=sorted(TEMPLATES), default="plain",
                   help="the chat template: plain, or thinking (Qwen3's shape in the tiny alphabet)")
    a = p.parse_args(argv)
    print(write(a.out, a.template))


if __name__ == "__main__":
    main()
