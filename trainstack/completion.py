"""Tab completion of slime dests, next to Hydra's own (`eval "$(python run.py -sc install=bash)"`).

Hydra completes config groups (`model=`), their options (`model=qwen3-4B`) and the keys present in
the composed config (`env.rollout_batch_size=`). slime's dests are not in the config until set, so
`args.sglang_mem<TAB>` would find nothing: for a word `model.`/`algo.`/`env.`/`args.` + a prefix,
the dests from slime's argument table that start with it are added to Hydra's candidates.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
from typing import Any, Callable

_DEST_WORD = re.compile(r"^(?P<plus>\+{0,2})(?P<ns>model|algo|env|args)\.(?P<part>\w*)$")
MAX_CANDIDATES = 200


def current_word(line: str, point: int | None = None) -> str:
    """The word being completed: the text after the last space before the cursor."""
    head = line[: len(line) if point is None else point]
    return "" if head.endswith(" ") else head.rsplit(" ", 1)[-1]


def dest_candidates(word: str) -> list[str]:
    m = _DEST_WORD.match(word)
    if not m:
        return []
    from trainstack.argtable import load_table

    prefix = f"{m.group('plus')}{m.group('ns')}."
    dests = sorted(d for d in load_table().specs if d.startswith(m.group("part")))
    return [f"{prefix}{d}=" for d in dests[:MAX_CANDIDATES]]


def complete(hydra_app: Callable[[], Any]) -> None:
    """Run Hydra's completion query, then print its candidates and the matching slime dests, once each."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        hydra_app()
    line = os.environ.get("COMP_LINE", "")
    try:
        point = int(os.environ.get("COMP_POINT", len(line)))
    except ValueError:
        point = len(line)
    hydra_says = buf.getvalue().split()
    for cand in dict.fromkeys([*hydra_says, *dest_candidates(current_word(line, point))]):
        print(cand)
