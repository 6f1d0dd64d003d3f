"""``chain_sum``: the built-in multi-turn task, small enough for the tiny model to learn on CPU.

An episode is a running sum revealed one addend per turn. The first observation is ``"a+b"``;
the model answers the sum; each later observation is the next addend (``"+c"``) and the model
answers the new running total, which it can only compute from its earlier answer (or the
context): the final total needs every turn. With ``turns=2`` (the default) a conversation in the
tiny model's chat template reads ``3+4=7+2=9``. All running totals stay single digits, so a
turn is one token.

Reward per step: the tiny arithmetic task's digit-wise score of the answer against the true
running total (1.0 exact, ``1 - |error|/4`` near misses, 0 for no number); the episode's reward
is their sum, last or terminal one (the client's ``reward`` setting). Tasks are numbered: a
sample's ``metadata.task_id`` picks one (``prepare`` writes the prompt files), or
``metadata.start`` + ``metadata.adds`` give it explicitly. Deterministic: no randomness here.
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.http_env.envs import Started, Stepped, TaskError
from trainstack.tiny.arithmetic import CHAIN_TURNS, parse_answer, score
from trainstack.tiny.arithmetic import chain_sums as tasks  # the tasks, numbered (the tiny tokenizer's corpus too)

DEFAULT_TURNS = CHAIN_TURNS
EVAL_FRACTION = 0.2
DIR_NAME = "chain_sum"
TOKENIZER_DIR = "tokenizer"  # <data_root>/chain_sum/tokenizer: the tiny model's tokenizer + chat template
THINKING_TOKENIZER_DIR = "tokenizer-thinking"  # the same tokenizer with a Qwen3-style thinking template


def split(turns: int = DEFAULT_TURNS, seed: int = 0) -> tuple[list[int], list[int]]:
    """(train, eval) task ids, disjoint; eval holds EVAL_FRACTION of them (seeded)."""
    ids = list(range(len(tasks(turns))))
    random.Random(seed).shuffle(ids)
    n_eval = int(len(ids) * EVAL_FRACTION)
    return sorted(ids[n_eval:]), sorted(ids[:n_eval])


def _row(task_id: int, turns: int) -> dict:
    start, adds = tasks(turns)[task_id]
    return {"prompt": f"chain_sum task {task_id}", "label": str(start + sum(adds)), "metadata": {"task_id": task_id}}


def prepare(data_root: str | os.PathLike, turns: int = DEFAULT_TURNS) -> dict[str, str]:
    """The env preset's ``meta.prepare`` hook: ``<data_root>/chain_sum/{train,eval}.jsonl`` and the tiny
    model's tokenizer files (``tokenizer/``), written when missing or out of date."""
    from trainstack.tiny import hf_tokenizer

    d = Path(data_root) / DIR_NAME
    d.mkdir(parents=True, exist_ok=True)
    train, evals = split(turns)
    paths = {}
    for name, ids in (("train", train), ("eval", evals)):
        p = d / f"{name}.jsonl"
        text = "".join(json.dumps(_row(i, turns)) + "\n" for i in ids)
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, p)
        paths[name] = str(p)
    paths["tokenizer"] = str(hf_tokenizer.write(d / TOKENIZER_DIR))
    paths["tokenizer_thinking"] = str(hf_tokenizer.write(d / THINKING_TOKENIZER_DIR, "thinking"))
    return paths


@dataclass
class Episode:
    start: int
    adds: tuple[int, ...]
    total: int
    turn: int = 0


class ChainSumEnv:
    name = "chain_sum"
    default_terminal_hook = None

    def __init__(self, turns: int = DEFAULT_TURNS):
        if not isinstance(turns, int) or isinstance(turns, bool) or not 1 <= turns <= 6:
            raise ConfigErrors([ConfigError("serve.options.turns", "must be an integer 1..6", value=turns)])
        self.turns = turns
        self.tasks = tasks(turns)

    def _task(self, task: dict) -> tuple[int, tuple[int, ...]]:
        md = task.get("metadata") or {}
        if "task_id" in md:
            tid = md["task_id"]
            if not isinstance(tid, int) or isinstance(tid, bool) or not 0 <= tid < len(self.tasks):
                raise TaskError(f"metadata.task_id must be an integer 0..{len(self.tasks) - 1}, got {tid!r}")
            return self.tasks[tid]
        start, adds = md.get("start"), md.get("adds")
        if not (isinstance(start, int) and isinstance(adds, list) and adds and all(isinstance(a, int) for a in adds)
                and min(start, *adds) >= 0 and start + sum(adds) <= 9):
            raise TaskError("give metadata.task_id, or metadata.start (int) and metadata.adds (list of ints) with a "
                            "total <= 9")
        return start, tuple(adds)

    async def start(self, task: dict) -> Started:
        start, adds = self._task(task)
        return Started(Episode(start, adds, start), f"{start}+{adds[0]}", {"turns": len(adds)})

    async def step(self, handle: Any, action: str) -> Stepped:
        ep: Episode = handle
        ep.total += ep.adds[ep.turn]
        ep.turn += 1
        done = ep.turn == len(ep.adds)
        return Stepped(observation=None if done else f"+{ep.adds[ep.turn]}", reward=score(action, ep.total),
                       done=done, info={"expected": ep.total, "answer": parse_answer(action)})

    async def close(self, handle: Any) -> None:
        return None


def make_env(options: dict) -> ChainSumEnv:
    unknown = sorted(set(options) - {"turns"})
    if unknown:
        raise ConfigErrors([ConfigError(f"serve.options.{unknown[0]}", "chain_sum has no such option",
                                        "chain_sum takes: turns", value=options[unknown[0]])])
    return ChainSumEnv(**options)
