"""An SGLang-compatible HTTP server on 127.0.0.1, backed by the tiny policy.

slime's rollout code (``slime.rollout.sglang_rollout.generate``, custom generate functions,
``abort``) talks HTTP to ``http://{args.sglang_router_ip}:{args.sglang_router_port}``. This
server answers what slime 624b824a sends and reads:

- ``POST /generate`` with ``input_ids`` (or ``text``), ``sampling_params`` (temperature, top_p,
  top_k, max_new_tokens, stop, stop_token_ids, skip_special_tokens, no_stop_trim,
  sampling_seed) and ``return_logprob`` -> ``text``, ``output_ids`` and ``meta_info`` with
  ``finish_reason`` (``{"type": "stop", "matched": ...}`` / ``{"type": "length", ...}`` /
  ``{"type": "abort"}``), ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``,
  ``weight_version``, ``output_token_logprobs`` (``[logprob, token_id, None]``) and, when
  ``custom_params.return_top_p_token_ids`` is sent (slime does for ``--rollout-top-p`` != 1),
  ``top_p_token_ids`` / ``top_p_token_offsets``;
- ``GET /workers``, ``POST /abort_request``, ``GET /v1/loads`` (what ``abort`` calls at the end
  of every rollout), ``GET /health``, ``/health_generate``, ``/get_model_info``.

Requests are micro-batched: the first request of a batch waits ``window_s`` for more, and the
batch grows while requests keep arriving (slime submits a whole rollout at once), so one
forward pass serves many samples. Randomness per request comes from ``(seed, rollout,
purpose, input_ids, sampling_seed, occurrence)`` (slime sends ``sampling_seed`` =
``rollout_seed + index in group`` under ``--sglang-enable-deterministic-inference``, which the
tiny trainer sets), never from arrival order, so a resumed run regenerates the same tokens.
Every route is one coroutine, :meth:`TinySGLangServer.handle`; aiohttp (slime's own dependency)
serves it on 127.0.0.1 (for plugins with their own HTTP client, e.g. the HTTP env plugin), and
slime's ``http_utils`` client reaches it in-process (``slime_upstream.InProcessClient``: no socket
per sample). Both run on slime's rollout event loop (or a loop of its own).
"""
from __future__ import annotations

import asyncio
import random
import threading
from typing import Any, Callable

from .generate import Request, decode, derive_seed
from .tokenizer import CharTokenizer


class TinySGLangServer:
    def __init__(self, model_getter: Callable, *, seed: int = 0, context_len: int | None = None,
                 tokenizer: CharTokenizer | None = None, window_s: float = 0.002, max_batch: int = 1024,
                 allow_auto_truncate: bool = False):
        self.model_getter = model_getter
        self.tok = tokenizer or CharTokenizer()
        self.seed = seed
        self.context_len = context_len
        self.allow_auto_truncate = allow_auto_truncate  # SGLang's --allow-auto-truncate: cut, do not refuse
        self.draining = False  # set by drain(): the run is ending, no more decoding
        self.window_s = window_s
        self.max_batch = max_batch
        self.requests = 0  # /generate calls served
        self.http_requests = 0  # requests that came over a socket (the rest in-process)
        self.batches = 0  # forward batches run
        self.weight_version = "0"
        self._scope: tuple = ()
        self._seen: dict[tuple, int] = {}
        self._pending: list[tuple[Request, dict, asyncio.Future]] = []
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._task: Any = None
        self.url = ""

    def begin(self, rollout_id: int, purpose: str) -> None:
        """Start a rollout (or eval pass): the seeds of its requests derive from this scope."""
        self._scope = (rollout_id, purpose)
        self._seen = {}
        self.weight_version = str(rollout_id)

    # --- request handling (runs on the server's loop) ---
    def _request(self, body: dict) -> tuple[Request, dict]:
        sp = dict(body.get("sampling_params") or {})
        if body.get("input_ids") is not None:
            ids = [int(i) for i in body["input_ids"]]
        else:
            ids = self.tok.encode(str(body.get("text", "")))
        stop = sp.get("stop") or []
        stop = (stop,) if isinstance(stop, str) else tuple(s for s in stop if s)
        key = (tuple(ids), sp.get("sampling_seed"))
        occurrence = self._seen.get(key, 0)
        self._seen[key] = occurrence + 1
        rng = random.Random(derive_seed(self.seed, *self._scope, key, occurrence))
        self._check_length(len(ids), int(sp.get("max_new_tokens") or 128))
        req = Request(ids=ids, max_new_tokens=int(sp.get("max_new_tokens") or 128),
                      temperature=float(sp.get("temperature", 1.0)), top_p=float(sp.get("top_p", 1.0)),
                      top_k=int(sp.get("top_k", -1) if sp.get("top_k") is not None else -1),
                      stop_ids=frozenset({self.tok.eos_token_id, *(sp.get("stop_token_ids") or [])}),
                      stop=stop, rng=rng,
                      want_top_p_ids=bool((sp.get("custom_params") or {}).get("return_top_p_token_ids")))
        return req, sp

    def context(self) -> int:
        """The context a request must fit: the model's positions, capped by --rollout-max-context-len."""
        return min(self.model_getter().config.max_position_embeddings, self.context_len or 1 << 30)

    def _check_length(self, n_input: int, max_new_tokens: int) -> None:
        """Refuse what SGLang's TokenizerManager._validate_one_request refuses, with its words (the decoder would
        otherwise cap the budget silently, and training would see shorter samples than a GPU run)."""
        ctx = self.context()
        if n_input >= ctx:
            raise ValueError(f"The input ({n_input} tokens) is longer than the model's context length ({ctx} tokens).")
        if n_input + max_new_tokens > ctx and not self.allow_auto_truncate:
            raise ValueError(f"Requested token count exceeds the model's maximum context length of {ctx} tokens. You "
                             f"requested a total of {n_input + max_new_tokens} tokens: {n_input} tokens from the input "
                             f"messages and {max_new_tokens} tokens for the completion. Please reduce the number of "
                             "tokens in the input messages or the completion to fit within the limit.")

    def _response(self, r: Request, sp: dict, body: dict) -> dict:
        out = list(r.output_ids)
        text = self.tok.decode(out, skip_special_tokens=sp.get("skip_special_tokens", True))
        if r.finish_reason == "stop" and isinstance(r.matched, str) and not sp.get("no_stop_trim", False):
            text = text[: len(text) - len(r.matched)] if text.endswith(r.matched) else text
        finish: dict[str, Any] = {"type": r.finish_reason}
        if r.finish_reason == "stop":
            finish["matched"] = r.matched
        elif r.finish_reason == "length":
            finish["length"] = len(out)
        meta: dict[str, Any] = {"id": f"tiny-{self.requests}", "finish_reason": finish, "prompt_tokens": len(r.ids),
                                "completion_tokens": len(out), "cached_tokens": 0,
                                "weight_version": self.weight_version}
        if r.want_top_p_ids:  # SGLang's top-p replay data: the kept ids per token, ragged by offsets
            meta["top_p_token_ids"], meta["top_p_token_offsets"] = r.top_p_ids, r.top_p_offsets
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(r.logprobs, out)]
        return {"text": text, "output_ids": out, "meta_info": meta}

    async def _generate(self, body: dict) -> dict:
        assert self._loop is not None and self._wake is not None
        req, sp = self._request(body)
        if self.draining:  # shutting down: every request ends aborted at once, as a queued one does
            req.finish_reason = "abort"
            return self._response(req, sp, body)
        fut = self._loop.create_future()
        self._pending.append((req, sp, fut))
        self._wake.set()
        await fut
        return self._response(req, sp, body)

    async def _batcher(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            n = -1
            while len(self._pending) != n and len(self._pending) < self.max_batch:  # grow while requests arrive
                n = len(self._pending)
                await asyncio.sleep(self.window_s)
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
            if self._pending:
                self._wake.set()
            if not batch:
                continue
            self.requests += len(batch)
            self.batches += 1
            model = self.model_getter()
            ctx = min(model.config.max_position_embeddings, self.context_len or 1 << 30)  # auto-truncate cuts here
            try:
                decode(model, [r for r, _, _ in batch], ctx, self.tok.decode)
            except Exception as e:  # every waiter gets the error (an HTTP 400), the server lives on
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            for _, _, fut in batch:
                if not fut.done():
                    fut.set_result(None)

    def drain(self) -> None:
        """The run is over: abort what is queued and every request still to come (from this thread, any)."""
        self.draining = True
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._abort_all)

    def _abort_all(self) -> None:
        for req, _, fut in self._pending:
            req.finish_reason = "abort"
            if not fut.done():
                fut.set_result(None)
        self._pending = []

    # --- routes: served over HTTP (aiohttp) and in-process (slime_upstream.InProcessClient) ---
    async def handle(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Answer one request: ``(HTTP status, JSON-able body)``. ``body`` is the decoded JSON."""
        if method == "POST" and path == "/generate":
            try:
                return 200, await self._generate(body if isinstance(body, dict) else {})
            except Exception as e:  # an SGLang-style error body
                return 400, {"error": {"message": f"{type(e).__name__}: {e}"}}
        if method == "POST" and path == "/abort_request":
            self._abort_all()
            return 200, {}
        if method == "GET" and path == "/v1/loads":
            return 200, {"num_reqs": len(self._pending)}
        if method == "GET" and path == "/workers":
            return 200, {"workers": [{"url": self.url}]}
        if method == "GET" and path in ("/health", "/health_generate"):
            return 200, {}
        if method == "GET" and path == "/get_model_info":
            return 200, {"model_path": "trainstack-tiny", "is_generation": True}
        return 404, {"error": {"message": f"{method} {path}: not served by the tiny SGLang server"}}

    def _app(self):
        from aiohttp import web

        async def serve(request):
            self.http_requests += 1
            body = None
            if request.method == "POST":
                try:
                    body = await request.json()
                except Exception as e:
                    return web.json_response({"error": {"message": f"{type(e).__name__}: {e}"}}, status=400)
            status, out = await self.handle(request.method, request.path, body)
            return web.json_response(out, status=status)

        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", serve)
        return app

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> tuple[str, int]:
        """Serve on ``loop`` (a running loop in another thread: the tiny trainer passes slime's rollout
        loop, so client and server share one thread and never contend for the GIL), else on a loop
        in a new daemon thread."""
        from aiohttp import web

        where: dict[str, Any] = {}

        async def boot():
            self._wake = asyncio.Event()
            self._runner = web.AppRunner(self._app(), access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            where["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._task = asyncio.get_running_loop().create_task(self._batcher())

        if loop is None:
            ready = threading.Event()
            loop = asyncio.new_event_loop()

            def main():
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            self._thread = threading.Thread(target=main, name="tiny-sglang", daemon=True)
            self._thread.start()
            ready.wait()
        self._loop = loop
        asyncio.run_coroutine_threadsafe(boot(), loop).result()
        self.url = f"http://127.0.0.1:{where['port']}"
        return "127.0.0.1", int(where["port"])

    def stop(self) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
            return

        async def down():
            if self._task is not None:
                self._task.cancel()
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(down(), loop).result(timeout=10)
        if self._thread is not None:  # our own loop: stop it too
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(timeout=10)
        self._loop = None
