"""Dataset transformations into what slime reads (`--input-key`, `--label-key`, messages).

A transform reads one downloaded file and writes one output file: `apply(name, src, dst, keys)`.
- `keys`: JSON lines (or a JSON array) with keys renamed by `keys` ({old: new}); other keys kept.
- `openhermes`: teknium/OpenHermes-2.5's `conversations` ([{from: human|gpt|system, value}]) into
  slime's `messages` ([{role, content}]), as slime's docs/en/examples/qwen3-4b-base-openhermes.md
  does; written as parquet (needs pyarrow) when the target ends in .parquet, else JSON lines.
- `pkg.module.fn`: a callable (src, dst, keys) of your own.
"""
from __future__ import annotations

import importlib
import json
import os
from typing import Any, Iterator, Mapping

ROLES = {"human": "user", "gpt": "assistant", "system": "system"}


def _rows(src: str) -> Iterator[dict[str, Any]]:
    with open(src, encoding="utf-8") as f:
        head = f.read(1)
        f.seek(0)
        if head == "[":
            yield from json.load(f)
            return
        for line in f:
            if line.strip():
                yield json.loads(line)


def _write(rows: Iterator[dict[str, Any]], dst: str) -> None:
    tmp = f"{dst}.tmp.{os.getpid()}"
    if dst.endswith(".parquet"):
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            from trainstack.errors import ConfigError, ConfigErrors

            raise ConfigErrors([ConfigError("env.meta.data", f"writing {os.path.basename(dst)} needs pyarrow, which "
                                            "this host's Python lacks", "pip install pyarrow (slime's environment "
                                            "has it), or name a .jsonl target", value=dst)]) from None

        pq.write_table(pa.Table.from_pylist(list(rows)), tmp)
    else:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, dst)


def rename_keys(src: str, dst: str, keys: Mapping[str, str]) -> None:
    _write(({keys.get(k, k): v for k, v in row.items()} for row in _rows(src)), dst)


def openhermes(src: str, dst: str, keys: Mapping[str, str]) -> None:
    def convert(row: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [{"role": ROLES[turn["from"]], "content": turn["value"]} for turn in row["conversations"]]}
    _write((convert(r) for r in _rows(src)), dst)


def apply(name: str, src: str, dst: str, keys: Mapping[str, str]) -> None:
    if name == "keys":
        return rename_keys(src, dst, keys)
    if name == "openhermes":
        return openhermes(src, dst, keys)
    module, _, fn = name.rpartition(".")
    getattr(importlib.import_module(module), fn)(src, dst, keys)
