"""wandb offline runs: ``<run_dir>/wandb/**/run-<id>.wandb``, parsed in-process.

Why a parser and not ``wandb leet inspect --json``: in wandb 0.31.0 offline mode the
``.wandb`` transaction log is the only record of history (no ``wandb-summary.json``), and
``leet`` is a subprocess per run (~0.5 s each, 25 s for 50 runs) whose JSON shape is a CLI
detail. The file format is small and stable: a 7-byte header (``:W&B``, magic 0xBEE1 LE,
version 0) then LevelDB-log framing (32 KiB blocks; chunks with a 7-byte header: CRC32C,
length, type FULL/FIRST/MIDDLE/LAST), each record a ``wandb_internal_pb2.Record`` protobuf,
decoded with wandb's own proto classes (so field changes follow the installed wandb).
History records carry ``item[{key, nested_key, value_json}]``; resumed runs append to the same
file, so later rows for a step win.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Iterator

from trainstack.metrics import STEP_KEYS, Series, finish

HEADER = b":W&B"
BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_files(run_dir: Path) -> list[Path]:
    root = run_dir / "wandb"
    if not root.is_dir():
        return []
    return sorted({p.resolve() for p in root.rglob("run-*.wandb")}, key=lambda p: p.stat().st_mtime)


def available(run_dir: Path) -> bool:
    return bool(wandb_files(run_dir))


def records(path: Path) -> Iterator[bytes]:
    """Payloads of the LevelDB-log-framed transaction log (a truncated tail is skipped)."""
    data = path.read_bytes()
    if data[:4] != HEADER:
        raise ValueError(f"{path}: not a wandb transaction log (header {data[:4]!r})")
    pos, buf = 7, b""
    n = len(data)
    while pos + 7 <= n:
        left_in_block = BLOCK - (pos % BLOCK)
        if left_in_block < 7:  # trailer padding
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        start = pos + 7
        if start + length > n:
            return
        chunk = data[start:start + length]
        pos = start + length
        if kind == FULL:
            yield chunk
            buf = b""
        elif kind == FIRST:
            buf = chunk
        elif kind == MIDDLE:
            buf += chunk
        elif kind == LAST:
            yield buf + chunk
            buf = b""
        elif kind == 0 and length == 0:  # zero padding
            pos += BLOCK - (pos % BLOCK) if pos % BLOCK else 0
        else:
            return


def read_run(path: Path) -> dict[str, Any]:
    """{"run_id", "group", "project", "config": {...}, "history": [row, ...]} of one .wandb file."""
    from wandb.proto import wandb_internal_pb2 as pb

    out: dict[str, Any] = {"run_id": None, "group": None, "project": None, "config": {}, "history": []}
    for payload in records(path):
        rec = pb.Record()  # type: ignore[attr-defined]  # generated protobuf class
        try:
            rec.ParseFromString(payload)
        except Exception:  # noqa: BLE001 - a damaged record
            continue
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            row = {}
            for item in rec.history.item:
                key = item.key or "/".join(item.nested_key)
                try:
                    row[key] = json.loads(item.value_json)
                except ValueError:
                    continue
            out["history"].append(row)
        elif kind == "run":
            out["run_id"] = rec.run.run_id or out["run_id"]
            out["group"] = rec.run.run_group or out["group"]
            out["project"] = rec.run.project or out["project"]
            for item in rec.run.config.update:
                try:
                    out["config"][item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
                except ValueError:
                    pass
        elif kind == "config":
            for item in rec.config.update:
                try:
                    out["config"][item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
                except ValueError:
                    pass
    return out


def rows_to_series(rows: list[dict[str, Any]]) -> Series:
    """History rows ({step_key: n, metric: v, _step: ...}) -> series against each row's step key."""
    raw: dict[str, dict[float, float]] = {}
    for row in rows:
        key = next((k for k in STEP_KEYS if k in row), None)
        for k, v in row.items():
            if k.startswith("_") or k in STEP_KEYS or not isinstance(v, (int, float)) or isinstance(v, bool):
                continue
            x = row.get(key) if key else row.get("_step")
            if x is None:
                continue
            raw.setdefault(k, {})[float(x)] = float(v)
    return finish(raw)


def read(run_dir: Path) -> Series:
    rows: list[dict[str, Any]] = []
    for path in wandb_files(run_dir):
        rows += read_run(path)["history"]
    return rows_to_series(rows)
