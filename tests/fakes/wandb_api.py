"""A local fake of the W&B public API's GraphQL endpoint, enough for ``wandb.Api()`` (0.31.0).

This is **not** W&B: it is a small stdlib HTTP server on 127.0.0.1 that answers the GraphQL
operations the public API client sends for what trainstack's ``--source wandb`` does:

| operationName   | sent by                                   | answered with                                  |
| --------------- | ----------------------------------------- | ---------------------------------------------- |
| ``Viewer``, ``GetDefaultEntity`` | ``wandb.Api()`` (credential check, default entity) | a fake user ``viewer {id entity username ...}`` |
| ``Runs``        | ``Api().runs("entity/project", filters)`` | ``project {runCount runs {edges {node {RunFragment}} pageInfo}}`` filtered by the MongoDB-style ``filters`` trainstack sends (``group``, ``name``, ``display_name``, ``$or``, ``$and``, ``$in``) |
| ``RunFullHistory`` | ``run.history(samples=N, pandas=False)`` | ``project {run {history: [json line per step]}}`` |
| ``RunSampledHistory`` | ``run.history(keys=[...])``          | ``project {run {sampledHistory: [[rows]]}}``    |
| ``RunHistoryKeys`` | ``run.lastHistoryStep`` (first step of ``scan_history``) | ``project {run {historyKeys {lastStep keys}}}`` |
| ``Run``         | ``Api().run("e/p/id")`` / lazy loads       | ``project {run {RunFragment}}``                 |
| anything else   | (not used by trainstack)                  | a GraphQL error naming the operation            |

``POST /sdk/otel/v1/metrics`` (the client's telemetry) is accepted and ignored.

How it was derived: the client was pointed at a logging server (``Api(overrides={"base_url":
...})``), every request body was recorded (``FakeWandbAPI.requests`` keeps them, so a test can
assert what was asked), and each answer was shaped after the fragments in
``wandb/apis/public/runs.py`` (``RUN_FRAGMENT``, ``_create_runs_query``, ``_full_history``)
until the client's parsing accepted it. ``scan_history()`` is only half served: after ``RunHistoryKeys``
wandb-core asks ``RunParquetHistory`` for parquet export URLs and downloads parquet files,
which this fake does not produce, so trainstack reads history with ``run.history(samples=N,
pandas=False)`` (one ``RunFullHistory`` query per run) instead.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_KEY = "x" * 40  # wandb checks only the shape of the key; the fake accepts any


@dataclass
class FakeRun:
    id: str  # the run id (GraphQL `name`)
    display_name: str = ""
    group: str | None = None
    state: str = "finished"
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)  # one dict per logged row (with _step)
    job_type: str | None = None
    tags: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for row in self.history:
            out.update(row)
        return out

    def node(self, project_id: str) -> dict[str, Any]:
        keys = sorted({k for row in self.history for k in row})
        return {
            "projectId": project_id, "id": f"UnVuOnYx{self.id}", "tags": self.tags, "name": self.id,
            "displayName": self.display_name or self.id, "sweepName": None, "state": self.state,
            "config": json.dumps({k: {"value": v, "desc": None} for k, v in self.config.items()}),
            "group": self.group, "jobType": self.job_type, "commit": None, "readOnly": False,
            "createdAt": "2026-01-01T00:00:00", "heartbeatAt": "2026-01-01T00:01:00", "description": None,
            "notes": None, "systemMetrics": "{}", "summaryMetrics": json.dumps(self.summary()),
            "historyLineCount": len(self.history), "user": {"name": "tester", "username": "tester"},
            "historyKeys": {"lastStep": max((r.get("_step", i) for i, r in enumerate(self.history)), default=-1),
                            "keys": {k: {"typeCounts": [{"type": "number", "count": 1}]} for k in keys}},
        }


def _match(run: FakeRun, flt: Any) -> bool:
    """The subset of W&B's MongoDB-style run filters trainstack sends."""
    if not flt:
        return True
    for key, cond in flt.items():
        if key == "$or":
            if not any(_match(run, c) for c in cond):
                return False
            continue
        if key == "$and":
            if not all(_match(run, c) for c in cond):
                return False
            continue
        value = {"name": run.id, "id": run.id, "display_name": run.display_name or run.id,
                 "displayName": run.display_name or run.id, "group": run.group, "state": run.state,
                 "jobType": run.job_type}.get(key)
        if key.startswith("config."):
            value = run.config
            for part in key.split(".")[1:]:
                if part == "value":
                    continue
                value = value.get(part) if isinstance(value, dict) else None
        if isinstance(cond, dict):
            if "$in" in cond and value not in cond["$in"]:
                return False
            if "$eq" in cond and value != cond["$eq"]:
                return False
            if "$ne" in cond and value == cond["$ne"]:
                return False
        elif value != cond:
            return False
    return True


class FakeWandbAPI:
    """``with FakeWandbAPI({("ent", "proj"): [FakeRun(...)]}) as fake: wandb.Api(overrides={"base_url": fake.url})``."""

    def __init__(self, projects: dict[tuple[str, str], list[FakeRun]] | None = None, max_requests: int = 2000,
                 max_seconds: float = 120.0):
        self.projects = projects or {}
        self.requests: list[dict[str, Any]] = []  # {"path", "operationName", "variables"}
        self.max_requests = max_requests
        self.max_seconds = max_seconds
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- GraphQL ---------------------------------------------------------------------------
    def answer(self, op: str, variables: dict[str, Any]) -> dict[str, Any]:
        if op in ("Viewer", "GetDefaultEntity"):
            return {"data": {"viewer": {"id": "VXNlcjox", "entity": "tester", "username": "tester",
                                        "email": "tester@example.invalid", "flags": "{}", "teams": {"edges": []},
                                        "admin": False}}}
        key = (variables.get("entity"), variables.get("project"))
        runs = self.projects.get(key)
        if runs is None:
            return {"data": {"project": None}}
        project_id = str(1 + sorted(self.projects).index(key))  # the client does int(projectId)
        if op == "Runs":
            flt = variables.get("filters")
            flt = json.loads(flt) if isinstance(flt, str) else (flt or {})
            chosen = [r for r in runs if _match(r, flt)]
            per_page = int(variables.get("perPage") or 50)
            start = int(variables.get("cursor") or 0)
            page = chosen[start:start + per_page]
            more = start + per_page < len(chosen)
            return {"data": {"project": {
                "internalId": project_id, "runCount": len(chosen), "readOnly": False,
                "runs": {"edges": [{"node": r.node(project_id), "cursor": str(start + i + 1)} for i, r in enumerate(page)],
                         "pageInfo": {"endCursor": str(start + len(page)), "hasNextPage": more}}}}}
        run = next((r for r in runs if r.id == variables.get("name")), None)
        if run is None:
            return {"data": {"project": {"run": None}}}
        if op == "RunFullHistory":
            samples = int(variables.get("samples") or 500)
            return {"data": {"project": {"run": {"history": [json.dumps(r) for r in run.history[:samples]]}}}}
        if op == "RunSampledHistory":
            out = []
            for spec in variables.get("specs") or []:
                spec = json.loads(spec)
                keys = spec.get("keys") or []
                rows = [{k: r[k] for k in keys if k in r} for r in run.history if all(k in r for k in keys)]
                out.append(rows[: int(spec.get("samples") or 500)])
            return {"data": {"project": {"run": {"sampledHistory": out}}}}
        if op == "RunHistoryKeys":
            node = run.node(project_id)
            return {"data": {"project": {"run": {"historyKeys": node["historyKeys"]}}}}
        if op in ("Run", "RunState"):
            return {"data": {"project": {"run": run.node(project_id)}}}
        return {"errors": [{"message": f"fake W&B API: operation {op!r} is not served"}], "data": None}

    # -- HTTP ------------------------------------------------------------------------------
    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                if self.path.rstrip("/").endswith("/graphql"):
                    try:
                        body = json.loads(raw or b"{}")
                    except ValueError:
                        body = {}
                    op = body.get("operationName") or _op_from_query(body.get("query", ""))
                    variables = body.get("variables") or {}
                    fake.requests.append({"path": self.path, "operationName": op, "variables": variables})
                    payload = json.dumps(fake.answer(op, variables)).encode()
                else:  # telemetry (/sdk/otel/v1/metrics) and anything else: accepted, ignored
                    fake.requests.append({"path": self.path, "operationName": None, "variables": {}})
                    payload = b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):  # noqa: N802
                fake.requests.append({"path": self.path, "operationName": None, "variables": {}})
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):  # quiet
                pass

        return Handler

    def __enter__(self) -> "FakeWandbAPI":
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.timeout = 0.1
        self._server.daemon_threads = True
        deadline = time.monotonic() + self.max_seconds

        def loop() -> None:  # bounded: stops on exit, after max_requests, or after max_seconds
            while not self._stop.is_set() and len(self.requests) < self.max_requests and time.monotonic() < deadline:
                self._server.handle_request()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._server is not None:
            self._server.server_close()


def _op_from_query(query: str) -> str:
    import re

    m = re.search(r"\b(?:query|mutation)\s+(\w+)", query or "")
    return m.group(1) if m else ""
