"""An SGLang-native ``POST /generate`` on 127.0.0.1, backed by the tiny policy.

slime generate functions talk HTTP to ``http://{args.sglang_router_ip}:{args.sglang_router_port}``;
serving the same request/response shape lets them run here unchanged. Stdlib only
(http.server in a daemon thread, free port). Requests are served one at a time under a
lock; the trainer calls a custom generate function sequentially, so the request order and
hence the sampled tokens are deterministic.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Callable

from .generate import sample
from .tokenizer import CharTokenizer


class TinySGLangServer:
    def __init__(self, model_getter: Callable, tokenizer: CharTokenizer | None = None):
        self.model_getter = model_getter
        self.tok = tokenizer or CharTokenizer()
        self.lock = threading.Lock()
        self.generator: Any = None  # a torch.Generator, set by the trainer before each rollout / eval
        self.requests = 0
        self._httpd: HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def handle_generate(self, req: dict) -> dict:
        sp = dict(req.get("sampling_params") or {})
        if req.get("input_ids") is not None:
            ids = [int(i) for i in req["input_ids"]]
        else:
            ids = self.tok.encode(str(req.get("text", "")))
        with self.lock:
            self.requests += 1
            gen = sample(self.model_getter(), [ids], max_new_tokens=int(sp.get("max_new_tokens", 16)),
                         temperature=float(sp.get("temperature", 1.0)), top_p=float(sp.get("top_p", 1.0)),
                         generator=self.generator, stop_token_ids=sp.get("stop_token_ids"),
                         stop=sp.get("stop") if isinstance(sp.get("stop"), list) else
                         ([sp["stop"]] if sp.get("stop") else None), tokenizer=self.tok)[0]
        text = self.tok.decode(gen.output_ids, skip_special_tokens=sp.get("skip_special_tokens", True))
        meta: dict[str, Any] = {"finish_reason": {"type": gen.finish_reason}, "completion_tokens": len(gen.output_ids),
                "prompt_tokens": len(ids)}
        if gen.finish_reason == "stop" and gen.output_ids and gen.output_ids[-1] == self.tok.eos_token_id:
            meta["finish_reason"]["matched"] = self.tok.eos_token_id
        if req.get("return_logprob"):
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(gen.logprobs, gen.output_ids)]
        return {"text": text, "output_ids": gen.output_ids, "meta_info": meta}

    def start(self) -> tuple[str, int]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep the console for progress lines
                pass

            def _send(self, code: int, obj) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path in ("/health", "/health_generate"):
                    self._send(200, {})
                elif self.path == "/get_model_info":
                    self._send(200, {"model_path": "trainstack-tiny", "is_generation": True})
                else:
                    self._send(404, {"error": f"no route {self.path}"})

            def do_POST(self):
                if self.path != "/generate":
                    self._send(404, {"error": f"no route {self.path}"})
                    return
                try:
                    n = int(self.headers.get("Content-Length", 0))
                    req = json.loads(self.rfile.read(n) or b"{}")
                    self._send(200, server.handle_generate(req))
                except Exception as e:  # an SGLang-style error body, never a dead thread
                    self._send(400, {"error": {"message": f"{type(e).__name__}: {e}"}})

        self._httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="tiny-sglang", daemon=True)
        self._thread.start()
        return "127.0.0.1", self._httpd.server_address[1]

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
