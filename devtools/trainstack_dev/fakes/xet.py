"""The fake Hub's Xet storage: a CAS that answers the routes `hf_xet` 1.8.0 calls (xet-core's
`openapi/cas.openapi.yaml`), kept on disk, so the client's default large-file path runs against it.

What the real CAS checks and this one checks too: the access token (from the Hub's `xet-write-token`
or `xet-read-token`, with its scope and expiry: 401/403), a xorb's framing (its chunk headers must
tile the body up to the `XETBLOB` footer; a cut or garbled body is refused 400), and a shard's
references (every xorb a file is built from must have been uploaded; else 400). What it does not:
the xorb's Merkle hash (BLAKE3 keyed; the stdlib has no BLAKE3), global deduplication (`/v1/chunks`
answers 404, "not tracked"; the client still dedups against the shards of its own session), and the
V2 routes (404: the client falls back to V1, as it does on a CAS without them).

Formats, read from xet-core's source (`xet_core_structures/src/metadata_shard/{shard_format,
file_structs}.rs`, `xorb_object/xorb_chunk_format.rs`):
- a shard is a 48-byte header, then file infos (the footer, when sent, says so too): a 48-byte header
  (file hash, flags, entry count), that many 48-byte segments (xorb hash, flags, unpacked bytes,
  chunk start, chunk end), as many verification entries when flag bit 31 is set, and one metadata
  entry (the file's sha256) when bit 30 is set; an all-0xFF hash ends the list;
- a xorb is chunks, each an 8-byte header (version, compressed length: 3 bytes LE, scheme,
  uncompressed length: 3 bytes LE) and its body, then the footer, whose length is the last 4 bytes;
- a hash prints as its four little-endian u64 words in hex (`DataHash::hex`); a sha256 stored in a
  shard is the digest's hex parsed that way.
"""
from __future__ import annotations

import hashlib
import os
import re
import struct
import threading
from dataclasses import dataclass

HASH_RE = re.compile(r"^[0-9a-f]{64}$")
BOOKEND = b"\xff" * 32
ENTRY = 48  # every shard entry is 32 bytes of hash + 16 bytes
SHARD_TAG = bytes([72, 70, 82, 101, 112, 111, 77, 101, 116, 97, 68, 97, 116, 97, 0, 85, 105, 103, 69, 106, 123,
                   129, 87, 131, 165, 189, 217, 92, 205, 209, 74, 169])
XORB_FOOTER_IDENT = b"XETBLOB"


class FormatError(ValueError):
    """A body that is not what the route takes (answered 400, as the CAS does)."""


def xet_hex(raw: bytes) -> str:
    """A 32-byte hash as Xet prints it: four little-endian u64 words, each in hex."""
    return "".join("%016x" % w for w in struct.unpack("<4Q", raw))


@dataclass(frozen=True)
class Segment:
    xorb: str
    unpacked: int
    chunk_start: int
    chunk_end: int  # exclusive


@dataclass(frozen=True)
class FileEntry:
    file_hash: str
    sha256: str | None
    segments: tuple[Segment, ...]

    @property
    def size(self) -> int:
        return sum(s.unpacked for s in self.segments)


def parse_shard(data: bytes) -> list[FileEntry]:
    """The file reconstructions a shard registers."""
    if len(data) < 48 or data[:32] != SHARD_TAG:
        raise FormatError("not a shard (wrong magic number)")
    pos = 48  # the file info section follows the header (a shard may come without its footer)
    out: list[FileEntry] = []
    try:
        while True:
            head = data[pos:pos + ENTRY]
            if len(head) < ENTRY:
                raise FormatError("shard file section is cut")
            if head[:32] == BOOKEND:
                break
            flags, n, _ = struct.unpack("<IIQ", head[32:])
            pos += ENTRY
            segs = []
            for _ in range(n):
                e = data[pos:pos + ENTRY]
                if len(e) < ENTRY:
                    raise FormatError("shard file section is cut")
                _xflags, unpacked, start, end = struct.unpack("<IIII", e[32:])
                segs.append(Segment(xet_hex(e[:32]), unpacked, start, end))
                pos += ENTRY
            if flags & (1 << 31):
                pos += ENTRY * n
            sha = None
            if flags & (1 << 30):
                sha = xet_hex(data[pos:pos + 32])
                pos += ENTRY
            out.append(FileEntry(xet_hex(head[:32]), sha, tuple(segs)))
    except struct.error as ex:
        raise FormatError(f"shard: {ex}") from None
    return out


def xorb_chunk_offsets(path: str) -> list[int]:
    """Where each chunk of a xorb starts, plus where the last one ends. hf_xet sends a xorb with or
    without its footer (xet-core's `reconstruct_xorb_with_footer` takes both): the chunks are walked
    from the start until the `XETBLOB` ident or the end, and must land exactly on either."""
    size = os.path.getsize(path)
    offsets, pos = [], 0
    with open(path, "rb") as f:
        while pos < size:
            f.seek(pos)
            header = f.read(8)
            if header[:7] == XORB_FOOTER_IDENT:
                f.seek(size - 4)
                info_len = struct.unpack("<I", f.read(4))[0]
                if pos + info_len + 4 != size:
                    raise FormatError("xorb footer length does not match where the chunks end")
                break
            if len(header) < 8:
                raise FormatError("xorb chunk header cut")
            offsets.append(pos)
            pos += 8 + int.from_bytes(header[1:4], "little")
        if pos > size:
            raise FormatError("xorb body cut inside a chunk")
    if not offsets:
        raise FormatError("xorb without chunks")
    return offsets + [pos]


class CasStore:
    """Xorbs and shards on disk under `root`, with the index the routes answer from."""

    def __init__(self, root: str):
        self.root = root
        for sub in ("xorbs", "shards", "tmp"):
            os.makedirs(os.path.join(root, sub), exist_ok=True)
        self.lock = threading.RLock()
        self.files: dict[str, FileEntry] = {}  # xet file hash -> reconstruction
        self.by_sha256: dict[str, str] = {}  # sha256 -> xet file hash
        self._offsets: dict[str, list[int]] = {}
        for name in sorted(os.listdir(os.path.join(root, "shards"))):  # a restarted fake keeps its store
            with open(os.path.join(root, "shards", name), "rb") as f:
                self._register(parse_shard(f.read()))

    def xorb_path(self, xorb: str) -> str:
        return os.path.join(self.root, "xorbs", xorb)

    def tmp(self, name: str) -> str:
        return os.path.join(self.root, "tmp", name)

    def has_xorb(self, xorb: str) -> bool:
        return os.path.isfile(self.xorb_path(xorb))

    def offsets(self, xorb: str) -> list[int]:
        with self.lock:
            if xorb not in self._offsets:
                self._offsets[xorb] = xorb_chunk_offsets(self.xorb_path(xorb))
            return self._offsets[xorb]

    def admit_xorb(self, tmp_path: str, xorb: str) -> bool:
        """Move a received xorb in when it is well framed; whether it was new (`was_inserted`)."""
        try:
            offsets = xorb_chunk_offsets(tmp_path)
        except FormatError:
            os.unlink(tmp_path)
            raise
        with self.lock:
            if self.has_xorb(xorb):
                os.unlink(tmp_path)
                return False
            os.replace(tmp_path, self.xorb_path(xorb))
            self._offsets[xorb] = offsets
        return True

    def admit_shard(self, data: bytes) -> int:
        """Register a shard's files once every xorb they use is stored: 1 (`SyncPerformed`) or 0 (`Exists`)."""
        files = parse_shard(data)
        missing = sorted({s.xorb for f in files for s in f.segments if not self.has_xorb(s.xorb)})
        if missing:
            raise FormatError(f"shard references xorbs that were never uploaded: {', '.join(missing[:3])}")
        path = os.path.join(self.root, "shards", hashlib.sha256(data).hexdigest() + ".mdb")
        with self.lock:
            if os.path.exists(path):
                return 0
            with open(path + ".tmp", "wb") as f:
                f.write(data)
            os.replace(path + ".tmp", path)
            self._register(files)
        return 1

    def _register(self, files: list[FileEntry]) -> None:
        with self.lock:
            for f in files:
                known = self.files.get(f.file_hash)
                if known is None or (known.sha256 is None and f.sha256 is not None):
                    self.files[f.file_hash] = f
                if f.sha256:
                    self.by_sha256[f.sha256] = f.file_hash

    def lookup_sha256(self, sha256: str, size: int | None = None) -> FileEntry | None:
        """The file a commit's `lfsFile` names, when a shard registered it (with that size)."""
        with self.lock:
            entry = self.files.get(self.by_sha256.get(sha256, ""))
        if entry is None or (size is not None and entry.size != size):
            return None
        return entry

    def reconstruction(self, file_hash: str, xorb_url: str, first: int = 0, last: int | None = None) -> dict | None:
        """The V1 answer for bytes [first, last] of a file: its terms, and for each xorb the byte ranges to
        fetch. None: unknown file. Raises IndexError when `first` is past the end (416)."""
        with self.lock:
            entry = self.files.get(file_hash)
        if entry is None:
            return None
        size = entry.size
        if size and first >= size:
            raise IndexError(first)
        last = size - 1 if last is None else min(last, size - 1)
        terms: list[dict] = []
        fetch: dict[str, list[dict]] = {}
        pos = offset = 0
        for seg in entry.segments:
            seg_first, seg_last = pos, pos + seg.unpacked - 1
            pos += seg.unpacked
            if seg_last < first or seg_first > last:
                continue
            if not terms:
                offset = first - seg_first
            terms.append({"hash": seg.xorb, "unpacked_length": seg.unpacked,
                          "range": {"start": seg.chunk_start, "end": seg.chunk_end}})
            offs = self.offsets(seg.xorb)
            info = {"range": {"start": seg.chunk_start, "end": seg.chunk_end}, "url": f"{xorb_url}/{seg.xorb}",
                    "url_range": {"start": offs[seg.chunk_start], "end": offs[seg.chunk_end] - 1}}
            if info not in fetch.setdefault(seg.xorb, []):
                fetch[seg.xorb].append(info)
        return {"offset_into_first_range": offset, "terms": terms, "fetch_info": fetch}
