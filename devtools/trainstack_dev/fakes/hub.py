"""A local Hugging Face Hub for tests and manual runs: the endpoints `huggingface_hub` 2.4.0 calls to
create a repo, upload (preupload + LFS batch + NDJSON commit), read repo/revision info, list trees and
refs, tag, and download (`resolve` GET/HEAD, LFS files through a redirect), with git-like immutable
commits.

The real client talks to it through `HF_ENDPOINT` or `HfApi(endpoint=...)`. Preupload decides
`regular`/`lfs` as the Hub does (over 10 MiB, a binary sample, or an LFS pattern of the repo's
`.gitattributes`: lfs), and a commit carrying a regular file over 10 MiB is refused with the Hub's
message. LFS objects go through the Git LFS batch API (`POST /{repo}.git/info/lfs/objects/batch`:
basic PUT, or multipart parts + completion, then verify) to a second listener standing in for the
storage/CDN host, and are kept on disk (`blob_dir`), streamed in and out, never held in memory; a
`resolve` of an LFS file answers 302 to that host with the `X-Linked-Etag`/`X-Linked-Size` headers.
Xet, the client's default path: `xet-write-token`/`xet-read-token` hand out scoped, expiring
tokens for a CAS on the storage host (`fakes/xet.py`: xorbs and shards as `hf_xet` sends them, file
reconstructions and byte ranges as it fetches them); a commit's `lfsFile` may name a file a shard
registered (its sha256 and size must match), a `resolve` of it carries `X-Xet-Hash` and the
`xet-auth` link, and a client without Xet still gets its bytes (rebuilt once by `hf_xet` from the
CAS, checked against the sha256). Faults are injected per
request (`FakeHub.inject` or `POST /_fake/faults`): 5xx/429 answers (with Retry-After), slow
answers, connections dropped before an answer, in the middle of a request body, or after a commit
was applied (a lost response). Every request is logged (method, path, status, fault, the error
answered; never headers, so never a token).

    python -m trainstack_dev.fakes.hub --port 0        # prints HF_ENDPOINT=http://127.0.0.1:PORT
    scripts/hub-local.sh up                        # the same in the background (docs/hub.md)
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import fnmatch
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO
from urllib.parse import parse_qs, quote, unquote, urlsplit

from trainstack_dev.fakes.xet import HASH_RE, CasStore, FormatError

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
# a subset of the .gitattributes the Hub writes into every new repo
GITATTRIBUTES = b"".join(b"%s filter=lfs diff=lfs merge=lfs -text\n" % p for p in (
    b"*.bin", b"*.ckpt", b"*.gz", b"*.h5", b"*.msgpack", b"*.npy", b"*.onnx", b"*.pkl", b"*.pt", b"*.pth",
    b"*.safetensors", b"*.tar", b"*.zip", b"*tfevents*"))
REGULAR_MAX = 10 * 1024 * 1024  # the Hub's limit for a file stored in git (larger: LFS, or the commit is refused)
SAMPLE = 512  # bytes of a file the client sends at preupload
TOO_LARGE = ("Your push was rejected because it contains files larger than 10 MiB. Please use "
             "https://git-lfs.github.com/ to store large files. See also: "
             "https://hf.co/docs/hub/repositories-getting-started#terminal Offending files: {files}")
MISSING_LFS = ("Your push was rejected because an LFS pointer pointed to a file that does not exist. For instance, "
               "this can happen if you used git push --no-verify to push your changes. Offending file: {files}")
NO_XET = ("fake Hub: started without Xet storage (xet=False); run the client with HF_HUB_DISABLE_XET=1 (uploads then "
          "take the Git LFS path, which the real Hub accepts for every repo; docs/hub.md)")
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
STALE_PARENT = "A commit has happened since. Please refresh and try again."


def git_oid(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha256.encode(), size)


def is_binary(sample: bytes) -> bool:
    """The Hub's test on a file's first bytes: a NUL, or not UTF-8 text (a character cut at the end is fine)."""
    if b"\0" in sample:
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as ex:
        return not (ex.reason == "unexpected end of data" and ex.start >= len(sample) - 3)
    return False


def lfs_patterns(gitattributes: bytes) -> list[str]:
    """The patterns a .gitattributes file sends to LFS (`filter=lfs`)."""
    out = []
    for line in gitattributes.decode("utf-8", "replace").splitlines():
        parts = line.split()
        if len(parts) >= 2 and not parts[0].startswith("#") and "filter=lfs" in parts[1:]:
            out.append(parts[0])
    return out


def matches_lfs(path: str, patterns: list[str]) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(path if "/" in p.strip("/") else name, p.strip("/")) for p in patterns)


def upload_mode(path: str, size: int, sample: bytes, patterns: list[str]) -> str:
    """What the Hub's preupload answers for one file."""
    if size > REGULAR_MAX or is_binary(sample[:SAMPLE]) or matches_lfs(path, patterns):
        return "lfs"
    return "regular"


@dataclass(frozen=True)
class Blob:
    """One file of a tree: a regular file's bytes, or an LFS object's sha256 and size (content on disk)."""

    size: int
    data: bytes | None = None
    sha256: str | None = None
    xet: str | None = None  # the Xet file hash, when the bytes are in the CAS

    @property
    def oid(self) -> str:
        """The git blob id (of the pointer file, for LFS)."""
        return git_oid(self.data if self.data is not None else lfs_pointer(self.sha256 or "", self.size))


class Tree(Mapping[str, bytes]):
    """A commit's files as path -> bytes (LFS objects read from disk when asked), over path -> Blob."""

    def __init__(self, blobs: dict[str, Blob], store: "LfsStore"):
        self.blobs, self.store = blobs, store

    def __getitem__(self, path: str) -> bytes:
        blob = self.blobs[path]
        return blob.data if blob.data is not None else self.store.read(blob.sha256 or "")

    def __iter__(self) -> Iterator[str]:
        return iter(self.blobs)

    def __len__(self) -> int:
        return len(self.blobs)


class LfsStore:
    """LFS objects on disk by sha256, written through a temporary file and renamed when verified."""

    def __init__(self, root: str):
        self.root = root
        self.fallback: Any = None  # called with a missing oid before reading it
        os.makedirs(os.path.join(root, "tmp"), exist_ok=True)

    def path(self, oid: str) -> str:
        return os.path.join(self.root, oid[:2], oid)

    def has(self, oid: str, size: int | None = None) -> bool:
        p = self.path(oid)
        return os.path.isfile(p) and (size is None or os.path.getsize(p) == size)

    def read(self, oid: str) -> bytes:
        if not self.has(oid) and self.fallback is not None:
            self.fallback(oid)
        with open(self.path(oid), "rb") as f:
            return f.read()

    def tmp(self, name: str) -> str:
        return os.path.join(self.root, "tmp", name)

    def admit(self, tmp_path: str, oid: str, size: int) -> str | None:
        """Move a received file in if its size and sha256 are the announced ones; else why not."""
        got = os.path.getsize(tmp_path)
        if got != size:
            return f"size mismatch: announced {size}, received {got}"
        h = hashlib.sha256()
        with open(tmp_path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != oid:
            return f"sha256 mismatch: announced {oid}, received {h.hexdigest()}"
        os.makedirs(os.path.dirname(self.path(oid)), exist_ok=True)
        os.replace(tmp_path, self.path(oid))
        return None


@dataclass
class Upload:
    """An LFS upload the batch API handed out: one PUT (basic), or parts then a completion (multipart)."""

    oid: str
    size: int
    repo_key: str
    chunk: int | None  # multipart part size; None: basic
    parts: dict[int, str] = field(default_factory=dict)  # part number -> etag (md5 of the part)


@dataclass(frozen=True)
class XetGrant:
    """A CAS access token the Hub handed out: read or write, until when."""

    scope: str  # read | write
    expires: float


@dataclass
class Commit:
    sha: str
    parent: str | None
    message: str
    blobs: dict[str, Blob]  # path -> blob (the whole tree at this commit)
    time: float
    store: LfsStore | None = None

    @property
    def files(self) -> Tree:
        assert self.store is not None
        return Tree(self.blobs, self.store)


@dataclass
class Repo:
    repo_id: str
    repo_type: str
    private: bool
    branches: dict[str, str] = field(default_factory=dict)  # name -> sha
    tags: dict[str, str] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)

    def resolve(self, rev: str) -> Commit | None:
        sha = self.branches.get(rev) or self.tags.get(rev) or (rev if SHA_RE.match(rev) else None)
        return self.commits.get(sha) if sha else None

    def history(self, branch: str = "main") -> list[Commit]:
        """Commits of a branch, oldest first."""
        out, sha = [], self.branches.get(branch)
        while sha:
            out.append(self.commits[sha])
            sha = self.commits[sha].parent
        return out[::-1]


@dataclass
class Fault:
    """One injected failure. `match` is a substring of "METHOD /path" (empty: every request)."""

    kind: str  # status | drop | drop_mid_body | lose_response | delay
    match: str = ""
    count: int | None = 1  # how many times it fires (None: while `seconds` last, or forever)
    seconds: float | None = None  # active for this long after it was added
    status: int = 503
    retry_after: float | None = None
    delay_s: float = 0.0
    probability: float = 1.0
    fired: int = 0
    added_at: float = field(default_factory=time.monotonic)

    KINDS = ("status", "drop", "drop_mid_body", "lose_response", "delay")

    def active(self, now: float) -> bool:
        if self.count is not None and self.fired >= self.count:
            return False
        return self.seconds is None or now - self.added_at < self.seconds


class _Drop(Exception):
    """Close the connection without an answer."""


class FakeHub:
    """The server and its state; `start()` runs it in a daemon thread, `url` is the HF_ENDPOINT."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 log_path: str | None = None, seed: int = 0, blob_dir: str | None = None,
                 multipart_chunk: int = 16 * 1024 * 1024, xet: bool = True, xet_token_ttl: float = 3600.0):
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.requests: list[dict[str, Any]] = []
        self.faults: list[Fault] = []
        self.lock = threading.RLock()
        self.log_path = log_path
        self.rng = random.Random(seed)
        self.commit_hooks: list[Any] = []  # called as hook(repo, commit) after every applied commit
        self.multipart_chunk = multipart_chunk  # LFS objects larger than this go up in parts of this size
        self._own_blobs = blob_dir is None
        self.store = LfsStore(blob_dir or tempfile.mkdtemp(prefix="fake-hub-lfs-"))
        self.store.fallback = self.materialize  # a file only the CAS holds
        self.uploads: dict[str, Upload] = {}  # upload token -> what it may receive
        self.xet = xet
        self.xet_token_ttl = xet_token_ttl  # seconds a handed-out CAS token lives
        self.cas = CasStore(os.path.join(self.store.root, "xet"))
        self.xet_grants: dict[str, XetGrant] = {}
        self._materializing: dict[str, threading.Lock] = {}
        handler = type("Handler", (_Handler,), {"hub": self})
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        # the storage/CDN host: another origin (the client sends no Hub token there, and follows no redirect to it)
        self.storage = ThreadingHTTPServer((host, 0), handler)
        self.storage.daemon_threads = True
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def storage_url(self) -> str:
        host, port = self.storage.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> "FakeHub":
        for name, srv in (("fake-hub", self.server), ("fake-hub-storage", self.storage)):
            t = threading.Thread(target=srv.serve_forever, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def serve_forever(self) -> None:
        """The storage host in a thread, the Hub in the calling one (the command line's server)."""
        t = threading.Thread(target=self.storage.serve_forever, name="fake-hub-storage", daemon=True)
        t.start()
        self._threads.append(t)
        self.server.serve_forever()

    def stop(self) -> None:
        for srv in (self.server, self.storage):
            if self._threads:
                srv.shutdown()
            srv.server_close()
        if self._own_blobs:
            shutil.rmtree(self.store.root, ignore_errors=True)

    def grant_xet(self, scope: str, ttl: float | None = None) -> tuple[str, XetGrant]:
        token = "xet_" + hashlib.sha256(os.urandom(16)).hexdigest()[:40]
        grant = XetGrant(scope, time.time() + (self.xet_token_ttl if ttl is None else ttl))
        with self.lock:
            self.xet_grants[token] = grant
        return token, grant

    def materialize(self, sha256: str) -> None:
        """Give a client without Xet the bytes of a file that only the CAS holds: rebuilt once, by
        hf_xet from this CAS, and admitted to the LFS store only if its sha256 is the committed one
        (tests read files the same way)."""
        entry = self.cas.lookup_sha256(sha256)
        if entry is None:
            return
        with self.lock:
            lock = self._materializing.setdefault(sha256, threading.Lock())
        with lock:
            if self.store.has(sha256):
                return
            import hf_xet

            token, grant = self.grant_xet("read", ttl=3600)
            tmp = self.store.tmp(f"xet-{sha256}")
            with hf_xet.XetSession().new_file_download_group(endpoint=self.storage_url, token=token,
                                                             token_expiry_unix_secs=int(grant.expires)) as group:
                group.start_download_file(hf_xet.XetFileInfo(entry.file_hash, entry.size), tmp)
            if self.store.admit(tmp, sha256, entry.size) is not None:
                os.unlink(tmp)

    # --- faults ----------------------------------------------------------------------------
    def inject(self, kind: str, match: str = "", **kw: Any) -> Fault:
        if kind not in Fault.KINDS:
            raise ValueError(f"fault kind {kind!r}: one of {', '.join(Fault.KINDS)}")
        fault = Fault(kind=kind, match=match, **kw)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def _fault_for(self, line: str) -> Fault | None:
        now = time.monotonic()
        with self.lock:
            for f in self.faults:
                if f.active(now) and f.match in line and (f.probability >= 1 or self.rng.random() < f.probability):
                    f.fired += 1
                    return f
        return None

    # --- state helpers (tests read the state directly) -------------------------------------
    def repo(self, repo_id: str, repo_type: str = "model") -> Repo | None:
        return self.repos.get(f"{repo_type}:{repo_id}")

    def files(self, repo_id: str, rev: str = "main", repo_type: str = "model") -> Mapping[str, bytes]:
        """path -> content at a revision (LFS objects are read from disk when a path is looked up)."""
        repo = self.repo(repo_id, repo_type)
        commit = repo.resolve(rev) if repo else None
        return commit.files if commit else {}

    def blobs(self, repo_id: str, rev: str = "main", repo_type: str = "model") -> dict[str, Blob]:
        """path -> Blob at a revision: tells LFS files (sha256 set) from regular ones (data set)."""
        repo = self.repo(repo_id, repo_type)
        commit = repo.resolve(rev) if repo else None
        return dict(commit.blobs) if commit else {}

    def log(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(entry)
            if self.log_path:
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")

    # --- operations ------------------------------------------------------------------------
    def create_repo(self, repo_id: str, repo_type: str, private: bool) -> tuple[int, dict]:
        key = f"{repo_type}:{repo_id}"
        with self.lock:
            if key in self.repos:
                return 409, {"error": "You already created this model repo", "url": f"{self.url}/{repo_id}"}
            repo = Repo(repo_id, repo_type, private)
            first = self._apply(repo, "main", "initial commit",
                                {".gitattributes": Blob(len(GITATTRIBUTES), GITATTRIBUTES)}, [], [])
            self.repos[key] = repo
        self.run_hooks(repo, first)
        return 200, {"url": f"{self.url}/{repo_id}", "name": repo_id, "id": hashlib.sha1(key.encode()).hexdigest()[:24]}

    def _apply(self, repo: Repo, branch: str, message: str, adds: dict[str, Blob], deletes: list[str],
               deleted_folders: list[str]) -> Commit:
        parent = repo.branches.get(branch)
        files = dict(repo.commits[parent].blobs) if parent else {}
        for path in deletes:
            files.pop(path, None)
        for folder in deleted_folders:
            prefix = folder.rstrip("/") + "/"
            for path in [p for p in files if p.startswith(prefix)]:
                del files[path]
        files.update(adds)
        digest = hashlib.sha1(json.dumps([parent, message, time.time_ns(), sorted(deletes), sorted(deleted_folders),
                                          sorted((p, b.oid) for p, b in adds.items())]).encode()).hexdigest()
        commit = Commit(digest, parent, message, files, time.time(), self.store)
        repo.commits[digest] = commit
        repo.branches[branch] = digest
        return commit

    def run_hooks(self, repo: Repo, commit: Commit) -> None:
        """After a commit is applied and the lock released (a hook may read Xet files, which the fake
        rebuilds through its own HTTP listener), before the client gets its answer."""
        for hook in list(self.commit_hooks):
            hook(repo, commit)


def _tree_entries(files: dict[str, Blob], path: str, recursive: bool) -> list[dict] | None:
    prefix = path.strip("/") + "/" if path.strip("/") else ""
    if prefix and prefix.rstrip("/") in files:
        return None  # a file, not a folder
    entries: dict[str, dict] = {}
    for p, content in sorted(files.items()):
        if not p.startswith(prefix):
            continue
        rest = p[len(prefix):].split("/")
        for depth in range(1, len(rest)):  # folders on the way
            if depth > 1 and not recursive:
                break
            folder = prefix + "/".join(rest[:depth])
            entries.setdefault(folder, {"type": "directory", "path": folder,
                                        "oid": hashlib.sha1(folder.encode()).hexdigest()})
        if recursive or len(rest) == 1:
            entries[p] = {"type": "file", "path": p, "size": content.size, "oid": content.oid}
            if content.sha256 is not None:
                entries[p]["lfs"] = {"oid": content.sha256, "size": content.size,
                                     "pointerSize": len(lfs_pointer(content.sha256, content.size))}
            if content.xet is not None:
                entries[p]["xetHash"] = content.xet
    if prefix and not entries:
        return None
    return list(entries.values())


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"
    _error_text: str | None = None  # the last error answered (the request log records it)

    def log_message(self, format: str, *args: Any) -> None:  # the request log replaces stderr noise
        pass

    # -- plumbing ----------------------------------------------------------------------------
    def _body_chunks(self, fault: Fault | None) -> Iterator[bytes]:
        """The request body in blocks of at most 1 MiB (Content-Length or chunked), never whole."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            blocks = 0
            while True:
                if fault is not None and fault.kind == "drop_mid_body" and blocks:
                    raise _Drop()
                size = int(self.rfile.readline().strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    while self.rfile.readline().strip():  # trailers, then the blank line
                        pass
                    return
                while size > 0:
                    block = self.rfile.read(min(size, 1 << 20))
                    if not block:
                        raise _Drop()
                    size -= len(block)
                    blocks += 1
                    yield block
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if fault is not None and fault.kind == "drop_mid_body":
            self.rfile.read(length // 2)
            raise _Drop()
        while length > 0:
            block = self.rfile.read(min(length, 1 << 20))
            if not block:
                raise _Drop()
            length -= len(block)
            yield block

    def _read_body(self, fault: Fault | None) -> bytes:
        data = b"".join(self._body_chunks(fault))
        self._body_bytes = len(data)
        return data

    def _body_to_file(self, f: BinaryIO, fault: Fault | None) -> str:
        """Stream the body into f; its md5 (the part's ETag, as S3 answers)."""
        md5 = hashlib.md5()
        for block in self._body_chunks(fault):
            md5.update(block)
            f.write(block)
            self._body_bytes += len(block)
        return md5.hexdigest()

    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None, head: bool = False) -> None:
        data = body if isinstance(body, bytes) else (b"" if body is None else json.dumps(body).encode())
        self.send_response(status)
        if not isinstance(body, bytes):
            self.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)
        self._status = status

    def _error(self, status: int, code: str | None, message: str, head: bool = False) -> None:
        self._error_text = message
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(status, {"error": message}, headers, head=head)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _authorized(self) -> bool:
        if not self.hub.token:
            return True
        return self.headers.get("Authorization", "") == f"Bearer {self.hub.token}"

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        line = f"{method} {split.path}"
        self._status = 0
        self._body_bytes = 0
        self._error_text = None
        storage = self.server is self.hub.storage
        fault = None if split.path.startswith("/_fake/") else self.hub._fault_for(line)
        entry: dict[str, Any] = {"t": time.time(), "method": method, "path": split.path,
                                 "fault": fault.kind if fault else None, "auth": bool(self.headers.get("Authorization"))}
        try:
            if fault is not None and fault.kind == "delay":
                time.sleep(fault.delay_s)
            if fault is not None and fault.kind == "drop":
                raise _Drop()
            # LFS objects and xorbs go to disk as they come
            streamed = storage and (method == "PUT" or split.path.startswith("/v1/xorbs/"))
            body = self._read_body(fault) if method in ("POST", "PUT", "DELETE") and not streamed else b""
            if fault is not None and fault.kind == "status":
                if streamed:
                    for _ in self._body_chunks(None):  # read (and drop) the body before answering
                        pass
                headers = {"Retry-After": str(int(fault.retry_after))} if fault.retry_after is not None else {}
                self._error(fault.status, None, f"injected {fault.status}", head=method == "HEAD") \
                    if not headers else self._send(fault.status, {"error": "rate limited"}, headers,
                                                   head=method == "HEAD")
            elif storage:
                self._storage_route(method, split.path, fault, body)
            else:
                self._route(method, split.path, parse_qs(split.query), body, lose=fault is not None
                            and fault.kind == "lose_response")
        except _Drop:
            self._drop()
            entry["status"] = "dropped"
            entry["bytes"] = self._body_bytes
            self.hub.log(entry)
            return
        entry["status"] = self._status
        entry["bytes"] = self._body_bytes
        if self._error_text:
            entry["error"] = self._error_text[:200]
        self.hub.log(entry)

    # -- routes ------------------------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict[str, list[str]], body: bytes, lose: bool) -> None:
        head = method == "HEAD"
        segs = [unquote(s) for s in path.split("/")[1:]]
        if segs[:2] == ["_fake", "faults"]:
            return self._faults(method, body)
        if segs[:2] == ["_fake", "requests"]:  # ?since=N: the requests from the N-th on; else the last 1000
            since = query.get("since")
            return self._send(200, self.hub.requests[int(since[0]):] if since else self.hub.requests[-1000:])
        if segs[:2] == ["_fake", "health"]:
            return self._send(200, {"ok": True, "repos": len(self.hub.repos), "requests": len(self.hub.requests)})
        if segs[:3] == ["api", "repos", "create"] and method == "POST":
            if not self._authorized():
                return self._error(401, None, "Invalid credentials in Authorization header")
            payload = json.loads(body or b"{}")
            name, org = payload.get("name"), payload.get("organization")
            repo_id = f"{org}/{name}" if org else f"user/{name}"
            private = payload.get("visibility") == "private" or bool(payload.get("private"))
            status, answer = self.hub.create_repo(repo_id, payload.get("type") or "model", private)
            return self._send(status, answer)
        if len(segs) >= 4 and segs[0] == "api" and segs[1] in REPO_TYPES:
            return self._api_repo(method, REPO_TYPES[segs[1]], f"{segs[2]}/{segs[3]}", segs[4:], query, body, lose)
        kind = "model"
        if segs and segs[0] in ("datasets", "spaces"):
            kind, segs = REPO_TYPES[segs[0]], segs[1:]
        if len(segs) >= 5 and segs[1].endswith(".git") and segs[2:4] == ["info", "lfs"] and method == "POST":
            return self._lfs(kind, f"{segs[0]}/{segs[1][:-4]}", segs[4:], body)
        if len(segs) >= 5 and segs[2] == "resolve" and method in ("GET", "HEAD"):
            return self._resolve(kind, f"{segs[0]}/{segs[1]}", segs[3], "/".join(segs[4:]), head)
        return self._error(404, None, f"fake Hub: no route for {method} {path}", head=head)

    def _repo_or_error(self, kind: str, repo_id: str, head: bool = False) -> Repo | None:
        repo = self.hub.repo(repo_id, kind)
        if repo is None or (repo.private and not self._authorized()):
            self._error(404 if repo is None else 401, "RepoNotFound", "Repository not found", head=head)
            return None
        return repo

    def _api_repo(self, method: str, kind: str, repo_id: str, rest: list[str], query: dict, body: bytes,
                  lose: bool) -> None:
        repo = self._repo_or_error(kind, repo_id)
        if repo is None:
            return
        op = rest[0] if rest else ""
        if method == "POST" and not self._authorized():
            return self._error(401, None, "Invalid credentials in Authorization header")
        if op in ("", "revision") and method == "GET":
            commit = repo.resolve(rest[1] if op == "revision" and len(rest) > 1 else "main")
            if commit is None:
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            return self._send(200, {"id": repo.repo_id, "modelId": repo.repo_id, "sha": commit.sha,
                                    "private": repo.private, "disabled": False, "gated": False, "tags": [],
                                    "downloads": 0, "likes": 0, "lastModified": _iso(commit.time),
                                    "siblings": [{"rfilename": p} for p in sorted(commit.blobs)]})
        if op in ("xet-write-token", "xet-read-token") and method == "GET":
            return self._xet_token(repo, op, rest[1] if len(rest) > 1 else "main", query)
        if op == "preupload" and method == "POST":
            commit = repo.resolve(rest[1] if len(rest) > 1 else "main")
            current = commit.blobs if commit else {}
            files = json.loads(body or b"{}").get("files", [])
            gitattributes = current.get(".gitattributes")
            patterns = lfs_patterns(commit.files[".gitattributes"]) if commit and gitattributes else []
            answer = []
            for f in files:
                mode = upload_mode(f["path"], int(f.get("size") or 0), base64.b64decode(f.get("sample") or ""),
                                   patterns)
                have = current.get(f["path"])
                oid = None if have is None else (have.sha256 if have.sha256 is not None else have.oid)
                answer.append({"path": f["path"], "uploadMode": mode, "shouldIgnore": False, "oid": oid})
            return self._send(200, {"files": answer, "commitOid": commit.sha if commit else None})
        if op == "commit" and method == "POST":
            return self._commit(repo, rest[1] if len(rest) > 1 else "main", body, lose)
        if op == "tree" and method == "GET":
            commit = repo.resolve(rest[1] if len(rest) > 1 else "main")
            if commit is None:
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            entries = _tree_entries(commit.blobs, "/".join(rest[2:]), query.get("recursive", ["False"])[0].lower()
                                    in ("true", "1"))
            if entries is None:
                return self._error(404, "EntryNotFound", "Entry not found")
            return self._send(200, entries)
        if op == "refs" and method == "GET":
            ref = lambda kind, n, s: {"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": s}
            return self._send(200, {"branches": [ref("heads", n, s) for n, s in repo.branches.items()],
                                    "tags": [ref("tags", n, s) for n, s in repo.tags.items()], "converts": []})
        if op == "tag" and method == "POST":
            commit = repo.resolve(rest[1] if len(rest) > 1 else "main")
            tag = json.loads(body or b"{}").get("tag")
            if commit is None or not tag:
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            if tag in repo.tags:
                return self._error(409, None, "Tag already exists")
            with self.hub.lock:
                repo.tags[tag] = commit.sha
            return self._send(200, {})
        if op == "commits" and method == "GET":
            commit = repo.resolve(rest[1] if len(rest) > 1 else "main")
            if commit is None:
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            out: list[dict[str, Any]] = []
            sha: str | None = commit.sha
            while sha:
                c = repo.commits[sha]
                out.append({"id": c.sha, "title": c.message, "message": "", "authors": [], "date": _iso(c.time)})
                sha = c.parent
            return self._send(200, out)
        return self._error(404, None, f"fake Hub: no route for {method} {op}")

    def _commit(self, repo: Repo, rev: str, body: bytes, lose: bool) -> None:
        lines = [json.loads(ln) for ln in body.splitlines() if ln.strip()]
        header: dict[str, Any] = next((ln["value"] for ln in lines if ln.get("key") == "header"), {})
        adds: dict[str, Blob] = {}
        deletes: list[str] = []
        folders: list[str] = []
        too_large: list[str] = []
        missing: list[str] = []
        for ln in lines:
            key, value = ln.get("key"), ln.get("value", {})
            if key == "file":
                data = base64.b64decode(value["content"]) if value.get("encoding") == "base64" \
                    else value["content"].encode()
                if len(data) > REGULAR_MAX:
                    too_large.append(value["path"])
                adds[value["path"]] = Blob(len(data), data)
            elif key == "lfsFile":
                oid, size = str(value.get("oid") or ""), value.get("size")
                xet = self.hub.cas.lookup_sha256(oid, size) if self.hub.xet else None
                if self.hub.store.has(oid, size):
                    adds[value["path"]] = Blob(os.path.getsize(self.hub.store.path(oid)), sha256=oid,
                                               xet=xet.file_hash if xet else None)
                elif xet is not None:
                    adds[value["path"]] = Blob(xet.size, sha256=oid, xet=xet.file_hash)
                else:
                    missing.append(value["path"])
            elif key == "deletedFile":
                deletes.append(value["path"])
            elif key == "deletedFolder":
                folders.append(value["path"])
        if too_large:
            return self._error(400, None, TOO_LARGE.format(files=" ".join(f"- {p} (ref: refs/heads/{rev})"
                                                                         for p in too_large)))
        if missing:
            return self._error(400, None, MISSING_LFS.format(files=" ".join(f"- {p}" for p in missing)))
        with self.hub.lock:
            if rev not in repo.branches:
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            parent = header.get("parentCommit")
            if parent and not repo.branches[rev].startswith(parent):
                return self._error(412, None, STALE_PARENT)
            commit = self.hub._apply(repo, rev, header.get("summary") or "", adds, deletes, folders)
        self.hub.run_hooks(repo, commit)
        if lose:
            raise _Drop()
        prefix = "" if repo.repo_type == "model" else f"{repo.repo_type}s/"
        return self._send(200, {"success": True, "commitOid": commit.sha, "pullRequestUrl": None,
                                "commitUrl": f"{self.hub.url}/{prefix}{repo.repo_id}/commit/{commit.sha}"})

    # -- Git LFS (the batch API on the Hub; the bytes on the storage host) -------------------------
    def _lfs(self, kind: str, repo_id: str, rest: list[str], body: bytes) -> None:
        if len(rest) == 2 and rest[0] == "complete":  # the client sends no token: the URL's secret is the grant
            return self._lfs_complete(rest[1], body)
        repo = self._repo_or_error(kind, repo_id)
        if repo is None:
            return
        prefix = "" if kind == "model" else f"{kind}s/"
        base = f"{self.hub.url}/{prefix}{repo_id}.git/info/lfs"
        if rest == ["objects", "batch"]:
            if not self._authorized():
                return self._error(401, None, "Invalid credentials in Authorization header")
            req = json.loads(body or b"{}")
            if req.get("operation") != "upload":
                return self._error(400, None, "fake Hub: only the upload operation of the LFS batch API")
            out = []
            for obj in req.get("objects", []):
                oid, size = str(obj.get("oid", "")), int(obj.get("size", -1))
                if not re.fullmatch(r"[0-9a-f]{64}", oid) or size < 0:
                    out.append({"oid": oid, "size": max(size, 0), "error": {"code": 422, "message": "invalid object"}})
                    continue
                if self.hub.store.has(oid, size):
                    out.append({"oid": oid, "size": size})  # already stored: no actions, nothing to send
                    continue
                token = hashlib.sha256(os.urandom(16)).hexdigest()[:32]
                chunk = self.hub.multipart_chunk if size > self.hub.multipart_chunk else None
                with self.hub.lock:
                    self.hub.uploads[token] = Upload(oid, size, f"{kind}:{repo_id}", chunk)
                verify = {"href": f"{base}/objects/verify", "header": {}}
                if chunk is None:
                    upload = {"href": f"{self.hub.storage_url}/_lfs/put/{token}", "header": {}}
                else:
                    n = -(-size // chunk)
                    header = {"chunk_size": str(chunk)}
                    header.update({f"{i:05d}": f"{self.hub.storage_url}/_lfs/part/{token}/{i}" for i in range(1, n + 1)})
                    upload = {"href": f"{base}/complete/{token}", "header": header}
                out.append({"oid": oid, "size": size, "authenticated": True,
                            "actions": {"upload": upload, "verify": verify}})
            return self._send(200, {"transfer": "basic", "objects": out, "hash_algo": "sha256"},
                              {"Content-Type": "application/vnd.git-lfs+json"})
        if rest == ["objects", "verify"]:
            if not self._authorized():
                return self._error(401, None, "Invalid credentials in Authorization header")
            req = json.loads(body or b"{}")
            if not self.hub.store.has(str(req.get("oid", "")), req.get("size")):
                return self._error(404, None, "Object not found")
            return self._send(200, {"success": True})
        return self._error(404, None, f"fake Hub: no LFS route {'/'.join(rest)}")

    def _lfs_complete(self, token: str, body: bytes) -> None:
        """Multipart completion: every part's ETag, in order; the object is assembled and checked."""
        up = self.hub.uploads.get(token)
        if up is None or up.chunk is None:
            return self._error(404, None, "unknown upload")
        req = json.loads(body or b"{}")
        n = -(-up.size // up.chunk)
        parts = {int(p["partNumber"]): str(p["etag"]).strip('"') for p in req.get("parts", [])}
        if req.get("oid") != up.oid or sorted(parts) != list(range(1, n + 1)) or parts != up.parts:
            return self._error(400, None, "multipart completion does not match the uploaded parts")
        tmp = self.hub.store.tmp(token)
        with open(tmp, "wb") as out_f:
            for i in range(1, n + 1):
                with open(f"{tmp}.{i}", "rb") as part:
                    shutil.copyfileobj(part, out_f, 1 << 20)
        for i in range(1, n + 1):
            os.unlink(f"{tmp}.{i}")
        why = self.hub.store.admit(tmp, up.oid, up.size)
        if why:
            os.unlink(tmp)
            return self._error(400, None, f"multipart upload: {why}")
        with self.hub.lock:
            self.hub.uploads.pop(token, None)
        return self._send(200, {"oid": up.oid, "size": up.size})

    def _storage_route(self, method: str, path: str, fault: Fault | None, body: bytes = b"") -> None:
        """The storage host: PUT an object (basic) or a part (multipart); GET/HEAD an object (the CDN)."""
        segs = [unquote(x) for x in path.split("/")[1:]]
        if method == "PUT" and len(segs) >= 3 and segs[:2] in (["_lfs", "put"], ["_lfs", "part"]):
            up = self.hub.uploads.get(segs[2])
            if up is None:
                return self._error(403, None, "Request has expired")
            tmp = self.hub.store.tmp(segs[2]) + (f".{int(segs[3])}" if segs[1] == "part" else "")
            with open(tmp, "wb") as f:
                etag = self._body_to_file(f, fault)
            if segs[1] == "part":
                with self.hub.lock:
                    up.parts[int(segs[3])] = etag
                return self._send(200, b"", {"ETag": f'"{etag}"'})
            why = self.hub.store.admit(tmp, up.oid, up.size)
            if why:
                os.unlink(tmp)
                return self._error(400, None, why)
            with self.hub.lock:
                self.hub.uploads.pop(segs[2], None)
            return self._send(200, b"", {"ETag": f'"{etag}"'})
        if method in ("GET", "HEAD") and len(segs) >= 2 and segs[0] == "_cdn":
            if re.fullmatch(r"[0-9a-f]{64}", segs[1]) and not self.hub.store.has(segs[1]):
                self.hub.materialize(segs[1])
            return self._send_object(segs[1], method == "HEAD")
        if method in ("GET", "HEAD") and len(segs) == 2 and segs[0] == "_xorb" and HASH_RE.match(segs[1]):
            return self._send_object(segs[1], method == "HEAD", self.hub.cas.xorb_path(segs[1]))
        if segs[:1] in (["v1"], ["v2"]) and self.hub.xet:
            return self._cas_route(method, segs, fault, body)
        return self._error(404, None, f"storage: no route for {method} {path}")

    def _send_object(self, oid: str, head: bool, file: str | None = None) -> None:
        """An LFS object (or a xorb) from disk, streamed, with Range support (the client resumes with one)."""
        file = file or self.hub.store.path(oid)
        if not re.fullmatch(r"[0-9a-f]{64}", oid) or not os.path.isfile(file):
            return self._error(404, None, "NoSuchKey", head=head)
        size = os.path.getsize(file)
        start, end, status = 0, size - 1, 200
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "").strip())
        if m:
            start, end, status = int(m.group(1)), min(int(m.group(2) or size - 1), size - 1), 206
            if start >= size:
                return self._send(416, b"", {"Content-Range": f"bytes */{size}"}, head=head)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("ETag", f'"{oid}"')
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        self._status = status
        if head:
            return
        with open(file, "rb") as f:
            f.seek(start)
            left = end - start + 1
            while left > 0:
                block = f.read(min(left, 1 << 20))
                if not block:
                    break
                self.wfile.write(block)
                left -= len(block)

    def _resolve(self, kind: str, repo_id: str, rev: str, path: str, head: bool) -> None:
        """A file at a revision (branch, tag or commit sha): regular files answered here; LFS files by a
        302 to the storage host, with the headers the client reads its metadata from."""
        repo = self._repo_or_error(kind, repo_id, head=head)
        if repo is None:
            return
        commit = repo.resolve(rev)
        if commit is None:
            return self._error(404, "RevisionNotFound", "Invalid rev id", head=head)
        blob = commit.blobs.get(path)
        if blob is None:
            return self._send(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound",
                                                                   "X-Error-Message": "Entry not found",
                                                                   "X-Repo-Commit": commit.sha}, head=head)
        if blob.sha256 is not None:
            location = f"{self.hub.storage_url}/_cdn/{blob.sha256}/{quote(path.rsplit('/', 1)[-1])}"
            headers = {"Location": location, "X-Repo-Commit": commit.sha, "ETag": f'"{blob.oid}"',
                       "X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(blob.size)}
            if blob.xet is not None and self.hub.xet:  # what a Xet-aware client downloads by
                headers["X-Xet-Hash"] = blob.xet
                headers["Link"] = f'<{self.hub.url}/api/{kind}s/{repo_id}/xet-read-token/{commit.sha}>; rel="xet-auth"'
            return self._send(302, b"", headers, head=head)
        self._send(200, blob.data or b"", {"X-Repo-Commit": commit.sha, "ETag": f'"{blob.oid}"',
                                           "Content-Type": "application/octet-stream"}, head=head)

    # -- Xet (the tokens on the Hub; the CAS and the xorb bytes on the storage host) -----------------
    def _xet_token(self, repo: Repo, op: str, rev: str, query: dict) -> None:
        """A CAS token, as JSON (what hf_xet reads) and headers (what huggingface_hub reads)."""
        if not self.hub.xet:
            return self._error(404, None, NO_XET)
        scope = "write" if op == "xet-write-token" else "read"
        if scope == "write" and not self._authorized():
            return self._error(401, None, "Invalid credentials in Authorization header")
        if repo.resolve(rev) is None and not (scope == "write" and query.get("create_pr")):
            return self._error(404, "RevisionNotFound", "Invalid rev id")
        token, grant = self.hub.grant_xet(scope)
        headers = {"X-Xet-Cas-Url": self.hub.storage_url, "X-Xet-Access-Token": token,
                   "X-Xet-Token-Expiration": str(int(grant.expires))}
        return self._send(200, {"casUrl": self.hub.storage_url, "accessToken": token, "exp": int(grant.expires)},
                          headers)

    def _xet_refusal(self, scope: str) -> tuple[int, str] | None:
        """Why the request's CAS token does not allow `scope` (401/403), or None."""
        auth = self.headers.get("Authorization", "")
        grant = self.hub.xet_grants.get(auth[7:]) if auth.startswith("Bearer ") else None
        if grant is None or grant.expires <= time.time():
            return 401, "missing or expired Xet token"
        if scope == "write" and grant.scope != "write":
            return 403, "this Xet token does not have the write scope"
        return None

    def _cas_route(self, method: str, segs: list[str], fault: Fault | None, body: bytes) -> None:
        """The CAS API (xet-core openapi/cas.openapi.yaml), V1 routes."""
        if method == "POST" and len(segs) == 4 and segs[1] == "xorbs":
            refusal = self._xet_refusal("write") or (
                (400, "malformed xorb key") if segs[2] != "default" or not HASH_RE.match(segs[3]) else None)
            if refusal is not None:  # refused before anything is written; the body is read and dropped
                for _ in self._body_chunks(None):
                    pass
                return self._error(refusal[0], None, refusal[1])
            tmp = self.hub.cas.tmp(f"{segs[3]}.{threading.get_ident()}.{time.monotonic_ns()}")
            try:
                with open(tmp, "wb") as f:
                    self._body_to_file(f, fault)
            except BaseException:  # a body cut mid-way (dropped connection): nothing of it is kept
                os.unlink(tmp)
                raise
            try:
                inserted = self.hub.cas.admit_xorb(tmp, segs[3])
            except FormatError as ex:
                return self._error(400, None, f"bad xorb serialization: {ex}")
            return self._send(200, {"was_inserted": inserted})
        refusal = self._xet_refusal("write" if method == "POST" and segs[1] == "shards" else "read")
        if refusal is not None:
            return self._error(refusal[0], None, refusal[1])
        if method == "POST" and segs == ["v1", "shards"]:
            try:
                result = self.hub.cas.admit_shard(body)
            except FormatError as ex:
                return self._error(400, None, f"shard verification failed: {ex}")
            return self._send(200, {"result": result})
        if method == "GET" and len(segs) == 3 and segs[:2] == ["v1", "reconstructions"]:
            first, last = 0, None
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", "").strip())
            if m:
                first, last = int(m.group(1)), int(m.group(2))
            try:
                answer = self.hub.cas.reconstruction(segs[2], f"{self.hub.storage_url}/_xorb", first, last)
            except IndexError:
                return self._error(416, None, "Range Not Satisfiable")
            if answer is None:
                return self._error(404, None, "file not found")
            return self._send(200, answer)
        if method == "POST" and segs == ["v1", "telemetry"]:
            return self._send(200, {})
        # /v1/chunks (global dedup: nothing is tracked) and the V2 routes (the client falls back to V1)
        return self._error(404, None, f"fake CAS: no route for {method} /{'/'.join(segs)}")

    def _faults(self, method: str, body: bytes) -> None:
        if method == "DELETE":
            self.hub.clear_faults()
            return self._send(200, {"faults": 0})
        if method == "POST":
            spec = json.loads(body or b"{}")
            try:
                fault = self.hub.inject(**spec)
            except (TypeError, ValueError) as ex:
                return self._error(400, None, str(ex))
            return self._send(200, {k: v for k, v in dataclasses.asdict(fault).items() if k != "added_at"})
        return self._send(200, [dataclasses.asdict(f) for f in self.hub.faults])


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainstack_dev.fakes.hub", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: any free port")
    p.add_argument("--log", help="append one JSON line per request to this file")
    p.add_argument("--require-token-from-env", metavar="VAR",
                   help="require `Authorization: Bearer $VAR` for writes and private repos (the value is read from "
                        "the environment, never from the command line)")
    p.add_argument("--ready-file", help="write the endpoint URL here once listening")
    p.add_argument("--blob-dir", help="keep LFS objects here (default: a temporary directory removed at exit)")
    ns = p.parse_args(argv)
    token = os.environ.get(ns.require_token_from_env) if ns.require_token_from_env else None
    hub = FakeHub(ns.host, ns.port, token=token, log_path=ns.log, blob_dir=ns.blob_dir)
    if ns.ready_file:
        tmp = f"{ns.ready_file}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(hub.url + "\n")
        os.replace(tmp, ns.ready_file)
    print(f"HF_ENDPOINT={hub.url}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=hub.server.shutdown, daemon=True).start())
    try:
        hub.serve_forever()
    except KeyboardInterrupt:
        pass
    hub.storage.shutdown()
    hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
