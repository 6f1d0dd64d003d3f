"""The tiny model's tokenizer at run time: the shipped tokenizer file through ``tokenizers``.

``trainstack/data/tiny_tokenizer.json`` is a byte-pair-encoding ``tokenizers`` model trained on the tiny tasks' own text
(``hf_tokenizer.train``: digits split one per token, as Qwen's pre-tokenizer does), with the
chat template's and slime examples' tags as added tokens (``<|im_start|>``, ``<think>``,
``<search>``, ``<code>``...). It is trained once and shipped, not retrained per run: a
checkpoint's embedding rows are these ids (tests/tiny/test_qwen3.py retrains it and
compares). The vocabulary stays small on purpose: RL from random weights finds rewarded
answers by chance only while digits are a good share of the output space.

Loading uses ``tokenizers`` directly (no transformers import); ``AutoTokenizer`` loads the same
file from any directory ``hf_tokenizer.write`` fills.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

PAD, EOS, UNK = "<|endoftext|>", "<|im_end|>", "<unk>"
IM_START = "<|im_start|>"
SHIPPED = Path(__file__).parents[1] / "data" / "tiny_tokenizer.json"  # package data (pyproject: data/*.json)


@functools.lru_cache(maxsize=None)
def _load(path: str) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


class TinyTokenizer:
    """encode/decode with the ids the tiny model's embedding rows are for."""

    def __init__(self, path: str | Path = SHIPPED):
        self._tok = _load(str(path))
        self.specials = (PAD, EOS, UNK)

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    def token_id(self, token: str) -> int:
        i = self._tok.token_to_id(token)
        if i is None:
            raise KeyError(f"{token!r} is not a token of the tiny tokenizer")
        return int(i)

    @property
    def pad_token_id(self) -> int:
        return self.token_id(PAD)

    @property
    def eos_token_id(self) -> int:
        return self.token_id(EOS)

    @property
    def unk_token_id(self) -> int:
        return self.token_id(UNK)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return str(self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens))


CharTokenizer = TinyTokenizer  # the name of the earlier character tokenizer, for callers that still use it


def get_tokenizer(args=None) -> TinyTokenizer:
    """What a plugin calls instead of ``GenerateState(args).tokenizer`` on the tiny backend."""
    return TinyTokenizer()
