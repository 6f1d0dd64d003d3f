"""TensorBoard event files, read in-process without a server (works air-gapped).

Uses tensorboard's raw record reader (``event_file_loader.LegacyEventFileLoader``): it yields
the Event protos as written, about 5x faster than ``EventAccumulator`` (no reservoir
sampling, no data_compat migration). Scalars written as ``simple_value`` (torch's
``SummaryWriter.add_scalar``) and as scalar tensors (tf2 / ``new_style``) are both read.
"""
from __future__ import annotations

from pathlib import Path

from trainstack.metrics import Series, finish


def event_files(run_dir: Path) -> list[Path]:
    root = run_dir / "tensorboard"
    return sorted(root.rglob("events.out.tfevents.*")) if root.is_dir() else []


def available(run_dir: Path) -> bool:
    return bool(event_files(run_dir))


def read(run_dir: Path) -> Series:
    return read_files(event_files(run_dir))


def read_files(paths: list[Path]) -> Series:
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
    from tensorboard.util import tensor_util

    raw: dict[str, dict[float, float]] = {}
    for path in sorted(paths, key=lambda p: p.name):  # file names start with the creation time
        for event in LegacyEventFileLoader(str(path)).Load():
            if not event.HasField("summary"):
                continue
            step = float(event.step)
            for v in event.summary.value:
                kind = v.WhichOneof("value")
                if kind == "simple_value":
                    raw.setdefault(v.tag, {})[step] = float(v.simple_value)
                elif kind == "tensor" and not v.tensor.string_val:
                    try:
                        arr = tensor_util.make_ndarray(v.tensor)
                    except Exception:  # noqa: BLE001 - not a numeric tensor
                        continue
                    if arr.size == 1:
                        raw.setdefault(v.tag, {})[step] = float(arr.reshape(-1)[0])
    return finish(raw)
