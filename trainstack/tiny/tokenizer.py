"""The project's own character-level tokenizer.

A tiny fixed alphabet keeps the output space small enough that RL from random weights
finds rewarded answers by chance (chance ~1/16 per character), which is what makes the
arithmetic task learnable in about a minute on two cores.
"""
from __future__ import annotations

from dataclasses import dataclass

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
ALPHABET = "0123456789+-*= "


@dataclass(frozen=True)
class CharTokenizer:
    alphabet: str = ALPHABET

    @property
    def specials(self) -> tuple[str, str, str]:
        return (PAD, EOS, UNK)

    @property
    def vocab_size(self) -> int:
        return 3 + len(self.alphabet)

    @property
    def pad_token_id(self) -> int:
        return 0

    @property
    def eos_token_id(self) -> int:
        return 1

    @property
    def unk_token_id(self) -> int:
        return 2

    def encode(self, text: str) -> list[int]:
        idx = {c: i + 3 for i, c in enumerate(self.alphabet)}
        return [idx.get(c, self.unk_token_id) for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        out = []
        for i in ids:
            i = int(i)
            if i >= 3:
                out.append(self.alphabet[i - 3])
            elif not skip_special_tokens:
                out.append(self.specials[i])
        return "".join(out)


def get_tokenizer(args=None) -> CharTokenizer:
    """What a plugin calls instead of ``GenerateState(args).tokenizer`` on the tiny backend."""
    return CharTokenizer()
