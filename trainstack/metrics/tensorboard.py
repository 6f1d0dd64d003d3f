"""TensorBoard event files, read in-process without a server (works air-gapped).

An event file is TFRecord framing around `Event` protos: per record an 8-byte length, a masked
CRC-32C of the length, the payload, a masked CRC-32C of the payload. tensorboard's own reader
without TensorFlow (`LegacyEventFileLoader`) walks that framing and computes every payload's
CRC in pure Python, a table lookup per byte: 64 runs of 800 rollouts took 30 s, almost all of it
checksums. Here the whole file is read at once, the framing is walked with `struct`, the length
CRC (8 bytes; lengths repeat, so each is computed once) is checked, and each payload is parsed by
protobuf's C implementation. A payload CRC is not recomputed: a torn or misframed record fails the
length check or the proto parse and ends that file, as a write cut by a kill does. Scalars written
as ``simple_value`` (torch's ``SummaryWriter.add_scalar``) and as scalar tensors (tf2 /
``new_style``) are both read.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, Iterator

from trainstack.metrics import Series, finish

_HEADER = struct.Struct("<QI")  # payload length, masked CRC-32C of the 8 length bytes
# odd multipliers that mix a tag's 8-byte words into one 64-bit key (tags up to 256 bytes)
_MIX_WORDS = [(0x9E3779B97F4A7C15 * (2 * i + 1)) % 2**64 | 1 for i in range(32)]


def event_files(run_dir: Path) -> list[Path]:
    root = run_dir / "tensorboard"
    return sorted(root.rglob("events.out.tfevents.*")) if root.is_dir() else []


def available(run_dir: Path) -> bool:
    return bool(event_files(run_dir))


def read(run_dir: Path) -> Series:
    return read_files(event_files(run_dir))


def records(data: bytes) -> Iterator[memoryview]:
    """The payloads of a TFRecord byte string, up to the first torn or misframed record."""
    view = memoryview(data)
    good: dict[bytes, bool] = {}  # length bytes -> their CRC matched
    pos, size = 0, len(data)
    while pos + 12 <= size:
        length, crc = _HEADER.unpack_from(data, pos)
        head = data[pos:pos + 12]
        ok = good.get(head)
        if ok is None:
            ok = good[head] = masked_crc32c(head[:8]) == crc
        end = pos + 12 + length
        if not ok or end + 4 > size:
            return
        yield view[pos + 12:end]
        pos = end + 4


_MIX = None
_CRC_TABLE: list[int] = []


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli), for the 8 length bytes of a record header (tensorboard's
    own copy lives in a module whose import costs a second)."""
    if not _CRC_TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC_TABLE.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _frames(data: bytes) -> tuple[list[int], list[int]] | None:
    """(payload offsets, payload lengths) of every whole record; None on a bad length CRC (the file is
    then read record by record, which stops there). A torn last record is left out."""
    offsets: list[int] = []
    lengths: list[int] = []
    expected: dict[int, int] = {}  # payload length -> its masked CRC (a scalar file has a few lengths)
    unpack = _HEADER.unpack_from
    pos, size = 0, len(data)
    while pos + 12 <= size:
        length, crc = unpack(data, pos)
        end = pos + 12 + length
        if end + 4 > size:
            break
        want = expected.get(length)
        if want is None:
            want = expected[length] = masked_crc32c(data[pos:pos + 8])
        if want != crc:
            return None
        offsets.append(pos + 12)
        lengths.append(length)
        pos = end + 4
    return offsets, lengths


def _frames_at_once(buf, np) -> tuple[Any, Any] | None:  # type: ignore[no-untyped-def]
    """The framing found with array operations when every record is shorter than 64 KiB and its
    payload starts with a wall_time (a scalar file): the candidate record starts must chain exactly,
    each one's end the next one's start, from byte 0 to the end of the file (a torn last record
    aside). None when they do not: the caller walks the records one by one."""
    size = len(buf)
    p = np.flatnonzero(buf[12:] == 0x09)  # a payload's first byte is 12 bytes after its record's start
    if not len(p) or p[0] != 0:
        return None
    p = p[(buf[np.minimum(p[:, None] + np.arange(2, 8), size - 1)] == 0).all(axis=1)]  # length < 64 KiB
    length = buf[p].astype(np.int64) | (buf[np.minimum(p + 1, size - 1)].astype(np.int64) << 8)
    nxt = p + 16 + length
    if nxt[-1] > size:  # a torn last record
        p, length, nxt = p[:-1], length[:-1], nxt[:-1]
    if not len(p) or p[0] != 0 or not (p[1:] == nxt[:-1]).all():
        return None
    tail = int(nxt[-1])
    if size - tail >= 16 and tail + 16 + int.from_bytes(buf[tail:tail + 8].tobytes(), "little") <= size:
        return None  # a whole record after the chain that is not a candidate
    crc = buf[p[:, None] + np.arange(8, 12)].copy().view("<u4").reshape(-1)
    for n in np.unique(length).tolist():
        if (crc[length == n] != masked_crc32c(int(n).to_bytes(8, "little"))).any():
            return None
    return p + 12, length


SMALL_FILE = 256 * 1024  # below this a file is decoded in plain Python: importing numpy costs more (~50 ms)
_VALUE = struct.Struct("<f")


def _fast_small(data: bytes, raw: dict[str, dict[float, float]]) -> bool:
    """`_fast` record by record, for a small file (a short run's, read once when it ends): the same
    shape rules, the same answer, and no numpy or protobuf import."""
    framed = _frames(data)
    if framed is None:
        return False
    found: list[tuple[bytes, float, float]] = []
    for start, length in zip(*framed):
        end = start + length
        if data[start] != 0x09:  # every event starts with its wall_time
            return False
        q = start + 9
        step = 0
        if q < end and data[q] == 0x10:  # the step's varint, up to 4 bytes (steps below 2**28)
            for k in range(4):
                if q + 1 + k >= end:
                    return False
                byte = data[q + 1 + k]
                step |= (byte & 0x7F) << (7 * k)
                if byte < 0x80:
                    break
            else:
                return False
            q += 2 + k
        if q >= end or data[q] != 0x2A:  # not a summary (file_version, graph, ...): not a metric
            continue
        name = data[q + 5] if q + 5 < end else 0x80
        if not (name < 0x80 and q + 6 + name + 5 == end and data[q + 1] == name + 9 and data[q + 2] == 0x0A
                and data[q + 3] == name + 7 and data[q + 4] == 0x0A and data[q + 6 + name] == 0x15):
            return False
        found.append((data[q + 6:q + 6 + name], float(step), _VALUE.unpack_from(data, end - 4)[0]))
    for tag, step_f, value in found:  # the last write of a step wins, as in `_fast`
        raw.setdefault(tag.decode("utf-8", "replace"), {})[step_f] = value
    return True


def _fast(data: bytes, raw: dict[str, dict[float, float]]) -> bool:
    """Every record a one-scalar event as `SummaryWriter.add_scalar` writes it (fields in number
    order: wall_time 1, step 2 (a varint, absent when 0), summary 5 with one value: tag 1,
    simple_value 2), decoded with array operations; False (nothing added) when any summary
    record has another shape: the caller then parses the file event by event."""
    if len(data) < SMALL_FILE:
        return _fast_small(data, raw)
    import numpy as np

    global _MIX
    if _MIX is None:
        _MIX = np.array(_MIX_WORDS, dtype=np.uint64)
    buf = np.frombuffer(data, dtype=np.uint8)
    framed = _frames_at_once(buf, np) or _frames(data)
    if framed is None:
        return False
    start = np.asarray(framed[0], dtype=np.int64)
    end = start + np.asarray(framed[1], dtype=np.int64)
    if not len(start):
        return True
    pad = np.concatenate([buf, np.zeros(16, dtype=np.uint8)])  # reads past a short payload stay in bounds
    last = len(pad) - 1
    if not (pad[start] == 0x09).all():  # every event starts with its wall_time
        return False
    has_step = pad[start + 9] == 0x10
    vlen = np.ones(len(start), dtype=np.int64)  # the step's varint, up to 4 bytes (steps below 2**28)
    for k in (1, 2, 3):
        vlen += (pad[start + 9 + vlen] >= 0x80) & has_step & (vlen == k)
    if (has_step & (pad[start + 9 + vlen] >= 0x80)).any():
        return False
    q = np.minimum(start + 9 + np.where(has_step, 1 + vlen, 0), last - 6)  # the summary field's tag byte
    is_summary = pad[q] == 0x2A
    name = pad[q + 5].astype(np.int64)
    ok = (is_summary & (pad[q + 2] == 0x0A) & (pad[q + 4] == 0x0A) & (name < 0x80)
          & (pad[q + 3].astype(np.int64) == name + 7) & (pad[q + 1].astype(np.int64) == name + 9)
          & (q + 6 + name + 5 == end) & (pad[np.minimum(q + 6 + name, last)] == 0x15))
    if (is_summary & ~ok).any():
        return False
    if not ok.any():
        return True
    start, end, q, name, vlen, has_step = start[ok], end[ok], q[ok], name[ok], vlen[ok], has_step[ok]
    steps = np.zeros(len(start), dtype=np.int64)
    for k in range(4):
        byte = pad[start + 10 + k].astype(np.int64) & 0x7F
        steps += np.where(has_step & (vlen > k), byte << (7 * k), 0)
    values = pad[(end - 4)[:, None] + np.arange(4)].copy().view("<f4").reshape(-1).astype(np.float64)
    for n in np.unique(name).tolist():
        sel = np.flatnonzero(name == n)
        tags = pad[(q[sel] + 6)[:, None] + np.arange(n)]  # one row of tag bytes per event
        words = np.zeros((len(sel), (n + 7) // 8 * 8), dtype=np.uint8)
        words[:, :n] = tags
        key = (words.view("<u8") * _MIX[: words.shape[1] // 8]).sum(axis=1)  # wraps mod 2**64: a hash
        uniq, first, which = np.unique(key, return_index=True, return_inverse=True)
        which = which.reshape(-1)
        if not (tags == tags[first][which]).all():  # two tags with one hash: decode event by event
            return False
        for i, row in enumerate(first.tolist()):
            mine = sel[which == i]
            # the last write of a step wins: the first of each step in reverse order, then by step
            at, latest = np.unique(steps[mine][::-1], return_index=True)
            series = raw.setdefault(bytes(tags[row]).decode("utf-8", "replace"), {})
            series.update(zip(at.astype(np.float64).tolist(), values[mine][::-1][latest].tolist()))
    return True


def read_files(paths: list[Path]) -> Series:
    raw: dict[str, dict[float, float]] = {}
    for path in sorted(paths, key=lambda p: p.name):  # file names start with the creation time
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if _fast(data, raw):
            continue
        from google.protobuf.message import DecodeError  # another shape of event: protobuf parses it
        from tensorboard.compat.proto.event_pb2 import Event

        parse = Event.FromString
        for payload in records(data):
            try:
                event = parse(payload)
            except DecodeError:
                break
            if not event.HasField("summary"):
                continue
            step = float(event.step)
            for v in event.summary.value:
                kind = v.WhichOneof("value")
                if kind == "simple_value":
                    raw.setdefault(v.tag, {})[step] = float(v.simple_value)
                elif kind == "tensor" and not v.tensor.string_val:
                    value = _scalar_tensor(v.tensor)
                    if value is not None:
                        raw.setdefault(v.tag, {})[step] = value
    return finish(raw)


def _scalar_tensor(tensor) -> float | None:
    from tensorboard.util import tensor_util

    try:
        arr = tensor_util.make_ndarray(tensor)
    except Exception:  # noqa: BLE001 - not a numeric tensor
        return None
    return float(arr.reshape(-1)[0]) if arr.size == 1 else None
