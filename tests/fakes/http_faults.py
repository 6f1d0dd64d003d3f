"""Faults the way production has them, between a real client and a real HTTP server.

``FaultProxy`` is a TCP-level HTTP/1.1 proxy in front of any server (the env server, an inference
server). Per request path it can: ``drop`` (forward the request, let the server act on it, then
close the connection without a reply: a lost response), ``status`` (answer an error without
forwarding), ``status_after`` (forward, then replace the server's reply with an error), ``hang``
(never answer). Everything is counted in ``log``. ``ScriptedSGLang`` is an inference server with
SGLang's native ``/generate`` shape whose replies a test scripts (token ids and log-probs), and
which records the ``input_ids`` it was sent.
"""
from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import urlparse


@dataclass
class Fault:
    path: str
    action: str  # drop | status | status_after | hang
    times: int = 1
    skip: int = 0  # matching requests let through before the fault starts
    status: int = 503
    seen: int = 0


@dataclass
class FaultProxy:
    upstream: str
    faults: list[Fault] = field(default_factory=list)
    log: list[tuple[str, str]] = field(default_factory=list)  # (path, what happened)

    def __post_init__(self):
        u = urlparse(self.upstream)
        self._up = (u.hostname, u.port)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.url = ""

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.log if p == path)

    # --- lifecycle ----------------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        self._ready.set()
        self._loop.run_forever()

    def start(self) -> str:
        self._thread.start()
        self._ready.wait(10)
        return self.url

    def stop(self) -> None:
        def shutdown():
            self._server.close()
            for t in asyncio.all_tasks(self._loop):
                t.cancel()
            self._loop.call_soon(self._loop.stop)

        self._loop.call_soon_threadsafe(shutdown)
        self._thread.join(5)

    def __enter__(self) -> "FaultProxy":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- HTTP ---------------------------------------------------------------------------------
    @staticmethod
    async def _read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        body = await reader.readexactly(length) if length else b""
        return head, body

    @staticmethod
    def _reply(status: int, obj: dict) -> bytes:
        body = json.dumps(obj).encode()
        return (f"HTTP/1.1 {status} Injected\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                "Connection: keep-alive\r\n\r\n").encode() + body

    def _fault_for(self, path: str) -> Fault | None:
        for f in self.faults:
            if f.path == path:
                f.seen += 1
                if f.skip < f.seen <= f.skip + f.times:
                    return f
        return None

    async def _forward(self, head: bytes, body: bytes) -> bytes:
        r, w = await asyncio.open_connection(*self._up)
        w.write(head + body)
        await w.drain()
        msg = await self._read_message(r)
        w.close()
        assert msg is not None, "the upstream server closed without a reply"
        return msg[0] + msg[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                msg = await self._read_message(reader)
                if msg is None:
                    return
                head, body = msg
                path = head.split(b" ", 2)[1].decode()
                fault = self._fault_for(path)
                if fault is None:
                    writer.write(await self._forward(head, body))
                    self.log.append((path, "forwarded"))
                elif fault.action == "drop":
                    await self._forward(head, body)  # the server acted on it
                    self.log.append((path, "dropped"))
                    writer.transport.abort()
                    return
                elif fault.action == "status":
                    self.log.append((path, f"status {fault.status}"))
                    writer.write(self._reply(fault.status, {"error": f"injected {fault.status}"}))
                elif fault.action == "status_after":
                    await self._forward(head, body)
                    self.log.append((path, f"applied, then status {fault.status}"))
                    writer.write(self._reply(fault.status, {"error": f"injected {fault.status}"}))
                elif fault.action == "hang":
                    self.log.append((path, "hang"))
                    await asyncio.sleep(3600)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()


class ScriptedSGLang:
    """``POST /generate`` answering ``reply(request) -> (token ids, log-probs, text, finish)`` in turn."""

    def __init__(self, reply: Callable[[dict], tuple[list[int], list[float], str, str]]):
        self.reply = reply
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.requests.append(req)
                ids, lps, text, finish = outer.reply(req)
                body = json.dumps({"text": text, "output_ids": ids, "meta_info": {
                    "finish_reason": {"type": finish}, "completion_tokens": len(ids),
                    "output_token_logprobs": [[lp, i, None] for lp, i in zip(lps, ids)]}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def __enter__(self) -> "ScriptedSGLang":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
