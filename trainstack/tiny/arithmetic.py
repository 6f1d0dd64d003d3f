"""The built-in ``arithmetic`` task: two-digit + one-digit sums without carry, verifiable reward.

Prompts look like ``"23+4="`` -> ``"27"``: a two-digit number (10-99) plus a digit where the
ones column never carries, so every answer is two digits: the tens digit is copied from the
prompt and the ones digit is one of the 55 single-digit facts ``b+c`` (b+c <= 9).
9 tens digits x 55 facts = 495 problems.

Held-out split (why held-out prompts are learnable): for every ones fact, ``holdout`` of its
9 tens digits are held out for eval (seeded), the other 7 are training prompts: 385 train,
110 eval, disjoint. Every eval prompt is a *new pair* (tens digit, ones fact): both of its
answer digits were seen in training on other prompts, never together, so a model that
computes the answer column by column generalises and one that memorises whole prompts does
not. (The earlier design held out whole single-digit facts, "3+4=", which no training data
covers: the same model trained supervised reached ~45 % exact on them.) Writing the files is
deterministic in ``seed``.

``reward`` has slime's ``--custom-rm-path`` signature and imports nothing heavy, so the
same function runs on slime (put trainstack on the workers' PYTHONPATH) and here.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
from pathlib import Path

_LEADING_INT = re.compile(r"\s*(-?\d+)")
HOLDOUT = 2  # tens digits (of 9) held out per ones fact: 2 x 55 = 110 eval prompts, 385 train


def facts() -> list[tuple[int, str, int]]:
    """The 55 single-digit ones-column facts (b, "+", c) with b+c <= 9 (no carry)."""
    return [(b, "+", c) for b in range(10) for c in range(10) if b + c <= 9]


def _item(a: int, b: int, op: str, c: int) -> dict:
    x = 10 * a + b
    return {"prompt": f"{x}{op}{c}=", "label": str(x + c if op == "+" else x - c)}


def problems() -> list[dict]:
    """Every problem of the task, in a fixed order."""
    return [_item(a, b, op, c) for (b, op, c) in facts() for a in range(1, 10)]


def split(seed: int = 0, holdout: int = HOLDOUT) -> tuple[list[dict], list[dict]]:
    """(train, eval): per ones fact, ``holdout`` seeded tens digits go to eval. Disjoint prompts."""
    rng = random.Random(seed)
    train, evals = [], []
    for (b, op, c) in facts():
        tens = list(range(1, 10))
        rng.shuffle(tens)
        evals += [_item(a, b, op, c) for a in sorted(tens[:holdout])]
        train += [_item(a, b, op, c) for a in sorted(tens[holdout:])]
    rng.shuffle(train)
    return train, evals


def write_task(out_dir: str | os.PathLike, seed: int = 0, holdout: int = HOLDOUT) -> dict[str, str]:
    """Write ``train.jsonl`` and ``eval.jsonl`` (keys ``prompt``/``label``); returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, evals = split(seed, holdout)
    paths = {}
    for name, rows in (("train", train), ("eval", evals)):
        p = out / f"{name}.jsonl"
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")  # private: concurrent preparers never share it
        with open(tmp, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        os.replace(tmp, p)
        paths[name] = str(p)
    return paths


def prepare(data_dir: str | os.PathLike) -> dict[str, str]:
    """The env's ``meta.prepare`` hook: writes ``<data_dir>/arithmetic/{train,eval}.jsonl`` if missing
    (or if they hold an older version of the task)."""
    d = Path(data_dir) / "arithmetic"
    paths = {"train": str(d / "train.jsonl"), "eval": str(d / "eval.jsonl")}
    want = split()
    current = True
    for name, rows in zip(("train", "eval"), want):
        try:
            with open(paths[name], encoding="utf-8") as f:
                current = current and [json.loads(x) for x in f if x.strip()] == rows
        except (OSError, ValueError):
            current = False
    if not current:
        paths = write_task(d)
    return paths


CHAIN_TURNS = 2  # chain_sum's default number of addends (trainstack/http_env/chain_sum.py)


def chain_sums(turns: int = CHAIN_TURNS) -> list[tuple[int, tuple[int, ...]]]:
    """chain_sum's tasks: every (start, addends) with ``turns`` addends whose running totals stay <= 9, in a
    fixed order. Here, beside the arithmetic facts, because the tiny tokenizer's corpus holds both."""
    out = []
    for digits in itertools.product(range(10), repeat=turns + 1):
        if sum(digits) <= 9:
            out.append((digits[0], tuple(digits[1:])))
    return out


def parse_answer(response: str) -> int | None:
    """The integer the response starts with (anything after it is ignored), or None."""
    m = _LEADING_INT.match(response or "")
    return int(m.group(1)) if m else None


def score(response: str, label) -> float:
    """1.0 for the right answer; digit-wise near-miss credit otherwise; 0 for no number.

    The response's leading integer is compared with the label column by column: a column
    ``k`` off earns ``1 - k/4`` (0 from 4 off), the score is the mean over columns, and an
    answer with the wrong number of digits (or sign) earns 0. For one-digit answers this is
    ``1 - |error|/4``. Only the exact answer reaches 1.0 (``is_correct``). The near-miss
    credit gives RL from random weights a dense signal (with exact match only, GRPO from
    random weights collapsed to a constant answer in our runs).
    """
    pred = parse_answer(response)
    if pred is None or label is None:
        return 0.0
    try:
        want = int(str(label).strip())
    except ValueError:
        return 0.0
    if pred == want:
        return 1.0
    p, w = str(pred), str(want)
    if len(p) != len(w) or (pred < 0) != (want < 0):
        return 0.0
    cols = [max(0.0, 1.0 - abs(int(x) - int(y)) / 4.0) for x, y in zip(p.lstrip("-"), w.lstrip("-"))]
    return sum(cols) / len(cols)


def is_correct(response: str, label) -> bool:
    return score(response, label) == 1.0


async def reward(args, sample, **kwargs) -> float:
    """slime ``--custom-rm-path`` signature: ``async rm(args, sample, **kwargs) -> float``."""
    return score(sample.response, sample.label)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m trainstack.tiny.arithmetic", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for train.jsonl and eval.jsonl")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--holdout", type=int, default=HOLDOUT, help="tens digits held out per ones fact (of 9)")
    a = p.parse_args(argv)
    for name, path in write_task(a.out, a.seed, a.holdout).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
