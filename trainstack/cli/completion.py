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
    from trainstack.upstream.argtable import load_table

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


SC_FLAGS = ("-sc", "--shell-completion")


def wants_completion(argv: list[str]) -> bool:
    return any(a in SC_FLAGS or a.startswith("--shell-completion=") for a in argv)


def for_trainstack_run(argv: list[str]) -> list[str] | None:
    """`trainstack run -sc install=bash` and the query its script sends (`trainstack -sc query=bash`, with
    COMP_LINE `trainstack run ...`) as the argv of `trainstack run`; None for a query about another
    subcommand (no candidates: the shell completes file names). COMP_LINE loses its `run` word, so Hydra
    reads the overrides after it, as after `python run.py`."""
    if argv[:1] == ["run"]:
        return argv
    line = os.environ.get("COMP_LINE", "")
    words = line.split(" ")
    if len(words) < 2 or words[1] != "run":
        return None
    try:
        point = int(os.environ.get("COMP_POINT", len(line)))
    except ValueError:
        point = len(line)
    cut = len(words[0]) + len(" run")
    os.environ["COMP_LINE"] = line[:len(words[0])] + line[cut:]
    os.environ["COMP_POINT"] = str(max(point - (cut - len(words[0])), len(words[0])))
    return ["run", *argv]


def install_script_for_trainstack(script: str) -> str:
    """Hydra's install script, registered for the `trainstack` command (Hydra names `trainstack run`)."""
    return re.sub(r"(complete [^\n]*-F hydra_bash_completion) trainstack run\b", r"\1 trainstack", script)
