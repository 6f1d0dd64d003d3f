"""The reference env server: the protocol (``protocol.py``) over FastAPI + uvicorn.

``make_app(env, ...)`` maps the four endpoints onto a ``SessionStore`` (``sessions.py``, where the
rules live); ``serve(...)`` runs it in the foreground (``trainstack env serve NAME``), writing the
bound URL to ``--ready-file`` once it listens (the sidecar waits for that file, then ``/health``);
``BackgroundServer`` runs one in a thread (tests, benchmarks). FastAPI and uvicorn are imported
inside the functions (the CLI stays fast).
"""
# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations at runtime.
import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

from trainstack.http_env import protocol as P
from trainstack.http_env.envs import Env
from trainstack.http_env.sessions import HttpError, SessionStore, load_hook

REAP_EVERY_S = 5.0


def _field(body: Any, name: str, kind: type, required: bool = True) -> Any:
    if not isinstance(body, dict):
        raise HttpError(P.BAD_REQUEST, "the body must be a JSON object")
    v = body.get(name)
    if v is None and not required:
        return None
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        raise HttpError(P.BAD_REQUEST, f"field {name!r} must be a {kind.__name__}")
    return v


def make_store(env: Env, *, max_sessions: int = 64, session_ttl_s: float = 600.0,
               terminal_hook: Optional[str] = None) -> SessionStore:
    hook_name = terminal_hook or env.default_terminal_hook
    hook = load_hook(hook_name) if hook_name else None
    return SessionStore(env, max_sessions=max_sessions, session_ttl_s=session_ttl_s, terminal_hook=hook,
                        hook_name=hook_name)


def make_app(store: SessionStore):
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    @asynccontextmanager
    async def lifespan(_app):
        async def reaper():
            while True:
                await asyncio.sleep(min(REAP_EVERY_S, store.session_ttl_s / 4))
                await store.reap()

        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()
            await store.close_all()

    app = FastAPI(title=f"trainstack http env: {store.env.name}", lifespan=lifespan)
    app.state.store = store

    @app.exception_handler(HttpError)
    async def http_error(_request: Request, exc: HttpError):
        headers = {"Retry-After": "1"} if exc.status == P.AT_CAPACITY else None
        return JSONResponse({"error": exc.message}, status_code=exc.status, headers=headers)

    async def body_of(request: Request) -> Any:
        try:
            return await request.json()
        except (ValueError, UnicodeDecodeError):
            raise HttpError(P.BAD_REQUEST, "the body is not JSON") from None

    @app.get(P.HEALTH)
    async def health():
        return store.health()

    @app.post(P.START)
    async def start(request: Request):
        body = await body_of(request)
        task = _field(body, "task", dict, required=False) or {}
        return await store.start(_field(body, "request_id", str), task)

    @app.post(P.STEP)
    async def step(request: Request):
        body = await body_of(request)
        return await store.step(_field(body, "request_id", str), _field(body, "session_id", str),
                                _field(body, "turn", int), _field(body, "action", str))

    @app.post(P.CLOSE)
    async def close(request: Request):
        body = await body_of(request)
        sid = _field(body, "session_id", str, required=False)
        srid = _field(body, "start_request_id", str, required=False)
        if sid is None and srid is None:
            raise HttpError(P.BAD_REQUEST, "close needs session_id or start_request_id")
        return await store.close(_field(body, "request_id", str), sid, srid)

    return app


def _uvicorn_server(app, host: str, port: int):
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", access_log=False)
    return uvicorn.Server(config)


def _bound_url(server, host: str) -> str:
    sock = server.servers[0].sockets[0]
    return f"http://{host}:{sock.getsockname()[1]}"


def serve(env_name: str, *, host: str = "127.0.0.1", port: int = 18080, max_sessions: int = 64,
          session_ttl_s: float = 600.0, terminal_hook: Optional[str] = None, options: Optional[dict] = None,
          ready_file: Optional[str] = None) -> int:
    """Serve ``env_name`` until SIGINT/SIGTERM (uvicorn's handlers); port 0 picks a free port."""
    from trainstack.http_env.envs import make_env

    env = make_env(env_name, options)
    store = make_store(env, max_sessions=max_sessions, session_ttl_s=session_ttl_s, terminal_hook=terminal_hook)
    server = _uvicorn_server(make_app(store), host, port)

    async def main() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            url = _bound_url(server, host)
            if ready_file:
                tmp = Path(f"{ready_file}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps({"url": url, "pid": os.getpid(), "env": env_name}))
                os.replace(tmp, ready_file)
            print(f"trainstack: serving env {env_name} at {url} (max_sessions={max_sessions}, session_ttl_s="
                  f"{session_ttl_s:g}, terminal_hook={store.hook_name})", file=sys.stderr, flush=True)
        await task

    asyncio.run(main())
    return 0 if server.started else 1


class BackgroundServer:
    """A server in a daemon thread on a free port (tests, benchmarks): ``with BackgroundServer(store) as url``."""

    def __init__(self, store: SessionStore, host: str = "127.0.0.1"):
        self.store = store
        self.host = host
        self.url = ""
        self._server = _uvicorn_server(make_app(store), host, 0)
        self._thread = threading.Thread(target=self._run, name="http-env-server", daemon=True)

    def _run(self) -> None:
        asyncio.run(self._server.serve())

    def start(self) -> str:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the env server did not start")
            time.sleep(0.01)
        self.url = _bound_url(self._server, self.host)
        return self.url

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
