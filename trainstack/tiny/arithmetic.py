"""The built-in ``arithmetic`` task: single-digit sums and differences, verifiable reward.

Prompts look like ``"3+4="`` / ``"8-5="`` and every answer is one digit (0-9), so a random
policy over the 16-character alphabet is right by chance ~1/16 of the time on its first
character: enough reward signal for GRPO from random weights. The full problem space
(55 sums + 55 differences) is split into train/eval by a seeded shuffle, so the eval
prompts are held out. Writing the files is deterministic in ``seed``.

``reward`` has slime's ``--custom-rm-path`` signature and imports nothing heavy, so the
same function runs on slime (put trainstack on the workers' PYTHONPATH) and here.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
from pathlib import Path

_LEADING_INT = re.compile(r"\s*(-?\d+)")


def problems() -> list[dict]:
    """Every problem of the task, in a fixed order."""
    out = []
    for a in range(10):
        for b in range(10):
            if a + b <= 9:
                out.append({"prompt": f"{a}+{b}=", "label": str(a + b)})
            if a - b >= 0:
                out.append({"prompt": f"{a}-{b}=", "label": str(a - b)})
    return out


def split(seed: int = 0, eval_fraction: float = 0.2) -> tuple[list[dict], list[dict]]:
    items = problems()
    random.Random(seed).shuffle(items)
    n_eval = max(1, int(round(len(items) * eval_fraction)))
    return items[n_eval:], items[:n_eval]


def write_task(out_dir: str | os.PathLike, seed: int = 0, eval_fraction: float = 0.2) -> dict[str, str]:
    """Write ``train.jsonl`` and ``eval.jsonl`` (keys ``prompt``/``label``); returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, evals = split(seed, eval_fraction)
    paths = {}
    for name, rows in (("train", train), ("eval", evals)):
        p = out / f"{name}.jsonl"
        tmp = p.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        os.replace(tmp, p)
        paths[name] = str(p)
    return paths


def prepare(data_dir: str | os.PathLike) -> dict[str, str]:
    """The env's ``meta.prepare`` hook: writes ``<data_dir>/arithmetic/{train,eval}.jsonl`` if missing."""
    d = Path(data_dir) / "arithmetic"
    paths = {"train": str(d / "train.jsonl"), "eval": str(d / "eval.jsonl")}
    if not all(os.path.exists(p) for p in paths.values()):
        paths = write_task(d)
    return paths


def parse_answer(response: str) -> int | None:
    """The integer the response starts with (anything after it is ignored), or None."""
    m = _LEADING_INT.match(response or "")
    return int(m.group(1)) if m else None


def score(response: str, label) -> float:
    """1.0 for the right answer; partial credit 1 - |error|/4 for a near miss; 0 for no number.

    The near-miss credit gives RL from random weights a dense signal along the number line
    (and is what makes held-out prompts learnable); only exact answers reach 1.0.
    """
    pred = parse_answer(response)
    if pred is None or label is None:
        return 0.0
    try:
        err = abs(pred - int(str(label).strip()))
    except ValueError:
        return 0.0
    return max(0.0, 1.0 - err / 4.0)


def is_correct(response: str, label) -> bool:
    return score(response, label) == 1.0


async def reward(args, sample, **kwargs) -> float:
    """slime ``--custom-rm-path`` signature: ``async rm(args, sample, **kwargs) -> float``."""
    return score(sample.response, sample.label)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m trainstack.tiny.arithmetic", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for train.jsonl and eval.jsonl")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-fraction", type=float, default=0.2)
    a = p.parse_args(argv)
    for name, path in write_task(a.out, a.seed, a.eval_fraction).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
