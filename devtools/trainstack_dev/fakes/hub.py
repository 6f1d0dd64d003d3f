"""A local Hugging Face Hub for tests and manual runs: the endpoints `huggingface_hub` 2.4.0 calls to
create a repo, upload (preupload + NDJSON commit), read repo/revision info, list trees and refs, tag,
and download (`resolve` GET/HEAD), with git-like immutable commits in memory.

The real client talks to it through `HF_ENDPOINT` or `HfApi(endpoint=...)`. Every file is answered
`regular` at preupload, so no LFS/Xet traffic happens (keep files small). Faults are injected per
request (`FakeHub.inject` or `POST /_fake/faults`): 5xx/429 answers (with Retry-After), slow
answers, connections dropped before an answer, in the middle of a request body, or after a commit
was applied (a lost response). Every request is logged (method, path, status, fault; never headers,
so never a token).

    python -m trainstack_dev.fakes.hub --port 0        # prints HF_ENDPOINT=http://127.0.0.1:PORT
    scripts/hub-local.sh up                        # the same in the background (docs/hub.md)
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import json
import os
import random
import re
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
GITATTRIBUTES = b"*.pt filter=lfs diff=lfs merge=lfs -text\n*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
STALE_PARENT = "A commit has happened since. Please refresh and try again."


def git_oid(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class Commit:
    sha: str
    parent: str | None
    message: str
    files: dict[str, bytes]  # path -> content (the whole tree at this commit)
    time: float


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
                 log_path: str | None = None, seed: int = 0):
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.requests: list[dict[str, Any]] = []
        self.faults: list[Fault] = []
        self.lock = threading.RLock()
        self.log_path = log_path
        self.rng = random.Random(seed)
        self.commit_hooks: list[Any] = []  # called as hook(repo, commit) after every applied commit
        handler = type("Handler", (_Handler,), {"hub": self})
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> "FakeHub":
        self._thread = threading.Thread(target=self.server.serve_forever, name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

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

    def files(self, repo_id: str, rev: str = "main", repo_type: str = "model") -> dict[str, bytes]:
        repo = self.repo(repo_id, repo_type)
        commit = repo.resolve(rev) if repo else None
        return dict(commit.files) if commit else {}

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
            self._apply(repo, "main", "initial commit", {".gitattributes": GITATTRIBUTES}, [], [])
            self.repos[key] = repo
        return 200, {"url": f"{self.url}/{repo_id}", "name": repo_id, "id": hashlib.sha1(key.encode()).hexdigest()[:24]}

    def _apply(self, repo: Repo, branch: str, message: str, adds: dict[str, bytes], deletes: list[str],
               deleted_folders: list[str]) -> Commit:
        parent = repo.branches.get(branch)
        files = dict(repo.commits[parent].files) if parent else {}
        for path in deletes:
            files.pop(path, None)
        for folder in deleted_folders:
            prefix = folder.rstrip("/") + "/"
            for path in [p for p in files if p.startswith(prefix)]:
                del files[path]
        files.update(adds)
        digest = hashlib.sha1(json.dumps([parent, message, time.time_ns(), sorted(deletes), sorted(deleted_folders),
                                          sorted((p, git_oid(c)) for p, c in adds.items())]).encode()).hexdigest()
        commit = Commit(digest, parent, message, files, time.time())
        repo.commits[digest] = commit
        repo.branches[branch] = digest
        for hook in list(self.commit_hooks):
            hook(repo, commit)
        return commit


def _tree_entries(files: dict[str, bytes], path: str, recursive: bool) -> list[dict] | None:
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
            entries[p] = {"type": "file", "path": p, "size": len(content), "oid": git_oid(content)}
    if prefix and not entries:
        return None
    return list(entries.values())


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # the request log replaces stderr noise
        pass

    # -- plumbing ----------------------------------------------------------------------------
    def _read_body(self, fault: Fault | None) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            body = b"".join(chunks)
        else:
            length = int(self.headers.get("Content-Length") or 0)
            if fault is not None and fault.kind == "drop_mid_body":
                self.rfile.read(length // 2)
                raise _Drop()
            body = self.rfile.read(length) if length else b""
        return body

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

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        line = f"{method} {split.path}"
        self._status = 0
        fault = None if split.path.startswith("/_fake/") else self.hub._fault_for(line)
        entry: dict[str, Any] = {"t": time.time(), "method": method, "path": split.path,
                                 "fault": fault.kind if fault else None, "auth": bool(self.headers.get("Authorization"))}
        try:
            if fault is not None and fault.kind == "delay":
                time.sleep(fault.delay_s)
            if fault is not None and fault.kind == "drop":
                raise _Drop()
            body = self._read_body(fault) if method in ("POST", "PUT", "DELETE") else b""
            if fault is not None and fault.kind == "status":
                headers = {"Retry-After": str(int(fault.retry_after))} if fault.retry_after is not None else {}
                self._error(fault.status, None, f"injected {fault.status}", head=method == "HEAD") \
                    if not headers else self._send(fault.status, {"error": "rate limited"}, headers,
                                                   head=method == "HEAD")
            else:
                self._route(method, split.path, parse_qs(split.query), body, lose=fault is not None
                            and fault.kind == "lose_response")
        except _Drop:
            self._drop()
            entry["status"] = "dropped"
            self.hub.log(entry)
            return
        entry["status"] = self._status
        self.hub.log(entry)

    # -- routes ------------------------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict[str, list[str]], body: bytes, lose: bool) -> None:
        head = method == "HEAD"
        segs = [unquote(s) for s in path.split("/")[1:]]
        if segs[:2] == ["_fake", "faults"]:
            return self._faults(method, body)
        if segs[:2] == ["_fake", "requests"]:
            return self._send(200, self.hub.requests[-1000:])
        if segs[:2] == ["_fake", "health"]:
            return self._send(200, {"ok": True, "repos": len(self.hub.repos)})
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
                                    "siblings": [{"rfilename": p} for p in sorted(commit.files)]})
        if op == "preupload" and method == "POST":
            commit = repo.resolve(rest[1] if len(rest) > 1 else "main")
            current = commit.files if commit else {}
            files = json.loads(body or b"{}").get("files", [])
            return self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                               "oid": git_oid(current[f["path"]]) if f["path"] in current else None}
                                              for f in files], "commitOid": commit.sha if commit else None})
        if op == "commit" and method == "POST":
            return self._commit(repo, rest[1] if len(rest) > 1 else "main", body, lose)
        if op == "tree" and method == "GET":
            commit = repo.resolve(rest[1] if len(rest) > 1 else "main")
            if commit is None:
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            entries = _tree_entries(commit.files, "/".join(rest[2:]), query.get("recursive", ["False"])[0].lower()
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
        adds: dict[str, bytes] = {}
        deletes: list[str] = []
        folders: list[str] = []
        for ln in lines:
            key, value = ln.get("key"), ln.get("value", {})
            if key == "file":
                adds[value["path"]] = base64.b64decode(value["content"]) if value.get("encoding") == "base64" \
                    else value["content"].encode()
            elif key == "deletedFile":
                deletes.append(value["path"])
            elif key == "deletedFolder":
                folders.append(value["path"])
            elif key == "lfsFile":
                return self._error(400, None, "fake Hub: LFS files are not supported (preupload answers regular)")
        with self.hub.lock:
            if rev not in repo.branches:
                return self._error(404, "RevisionNotFound", "Invalid rev id")
            parent = header.get("parentCommit")
            if parent and not repo.branches[rev].startswith(parent):
                return self._error(412, None, STALE_PARENT)
            commit = self.hub._apply(repo, rev, header.get("summary") or "", adds, deletes, folders)
        if lose:
            raise _Drop()
        prefix = "" if repo.repo_type == "model" else f"{repo.repo_type}s/"
        return self._send(200, {"success": True, "commitOid": commit.sha, "pullRequestUrl": None,
                                "commitUrl": f"{self.hub.url}/{prefix}{repo.repo_id}/commit/{commit.sha}"})

    def _resolve(self, kind: str, repo_id: str, rev: str, path: str, head: bool) -> None:
        repo = self._repo_or_error(kind, repo_id, head=head)
        if repo is None:
            return
        commit = repo.resolve(rev)
        if commit is None:
            return self._error(404, "RevisionNotFound", "Invalid rev id", head=head)
        content = commit.files.get(path)
        if content is None:
            return self._error(404, "EntryNotFound", "Entry not found", head=head)
        self._send(200, content, {"X-Repo-Commit": commit.sha, "ETag": f'"{git_oid(content)}"',
                                  "Content-Type": "application/octet-stream"}, head=head)

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
    ns = p.parse_args(argv)
    token = os.environ.get(ns.require_token_from_env) if ns.require_token_from_env else None
    hub = FakeHub(ns.host, ns.port, token=token, log_path=ns.log)
    if ns.ready_file:
        tmp = f"{ns.ready_file}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(hub.url + "\n")
        os.replace(tmp, ns.ready_file)
    print(f"HF_ENDPOINT={hub.url}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=hub.server.shutdown, daemon=True).start())
    try:
        hub.server.serve_forever()
    except KeyboardInterrupt:
        pass
    hub.server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
