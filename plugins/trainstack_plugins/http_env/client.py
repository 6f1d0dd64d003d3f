"""HTTP calls of one episode: the env server (start / step / close) and the inference server (/generate).

Retries are bounded and only where a retry is safe: connection errors, timeouts and 5xx answers,
with exponential backoff; a 4xx is final. A 503 with ``Retry-After`` (the env server at its
``max_sessions``) is not a failure: the call waits what the server asks and tries again, without
using up a retry, until ``capacity_wait_s`` has passed since the first such answer. Env calls carry one request id per logical call, kept
across its retries, so a step whose reply was lost is answered from the server's record and its
action is applied once. ``/generate`` is sent token ids (``input_ids``) and must answer
``meta_info.output_token_logprobs``: the token ids and log-probs the model produced are taken from
there as they are, never re-tokenized or made up.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

from trainstack.http_env import protocol as P


ROUTING_HEADER = "X-SMG-Routing-Key"  # slime's sglang_rollout.generate sets it the same way


class CallFailed(Exception):
    """A call that will not succeed: a 4xx, a malformed reply, or retries used up."""

    def __init__(self, what: str, message: str, status: Optional[int] = None, attempts: int = 1):
        super().__init__(f"{what}: {message}")
        self.what = what
        self.status = status
        self.attempts = attempts


@dataclass
class Retry:
    timeout_s: Optional[float]
    retries: int
    backoff_s: float
    max_backoff_s: float
    capacity_wait_s: float = 0.0  # total wait for a server answering 503 + Retry-After (0: such answers are 5xx)


@dataclass
class CallStats:
    calls: int = 0
    retries: int = 0
    errors: list[str] = field(default_factory=list)  # what each retried attempt met
    capacity_waits: int = 0  # 503 + Retry-After answers waited out
    capacity_wait_s: float = 0.0


@lru_cache(maxsize=1)
def ssl_context() -> Any:
    """One TLS context per process (building one costs ~20 ms; an episode opens one HTTP client)."""
    import ssl

    return ssl.create_default_context()


def new_request_id() -> str:
    return uuid.uuid4().hex


def _error_text(response: Any) -> str:
    try:
        body = response.json()
        if isinstance(body, dict) and "error" in body:
            err = body["error"]
            return str(err.get("message", err) if isinstance(err, dict) else err)[:300]
    except ValueError:
        pass
    return response.text[:300]


def retry_after_s(response: Any) -> Optional[float]:
    """A 503's ``Retry-After`` in seconds (delta-seconds form), or None."""
    if response.status_code != 503:
        return None
    try:
        value = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return value if value >= 0 else None


async def post_json(http: Any, url: str, payload: dict, retry: Retry, stats: CallStats, what: str,
                    headers: Optional[dict] = None) -> dict:
    """POST with bounded retries on connection errors, timeouts and 5xx; raise CallFailed otherwise."""
    import httpx

    stats.calls += 1
    last = ""
    attempt = 0
    capacity_deadline: Optional[float] = None
    while attempt <= retry.retries:
        if attempt:
            stats.retries += 1
            stats.errors.append(f"{what}: {last}")
            await asyncio.sleep(min(retry.backoff_s * 2 ** (attempt - 1), retry.max_backoff_s))
        attempt += 1
        try:
            r = await http.post(url, json=payload, timeout=retry.timeout_s, headers=headers)
        except httpx.TransportError as e:  # connect/read/write errors, timeouts, a dropped reply
            last = f"{type(e).__name__}: {e}".rstrip(": ")
            continue
        wait = retry_after_s(r)
        if wait is not None and retry.capacity_wait_s > 0:
            now = time.monotonic()
            if capacity_deadline is None:
                capacity_deadline = now + retry.capacity_wait_s
            wait = min(wait, capacity_deadline - now)  # the last wait ends at the deadline: one more try then
            if wait > 0:
                stats.capacity_waits += 1
                stats.capacity_wait_s += wait
                attempt -= 1  # a server asking to come back later is not a failed attempt
                await asyncio.sleep(wait)
                continue
            raise CallFailed(what, f"HTTP 503: {_error_text(r)}; still at capacity after waiting "
                             f"capacity_wait_s={retry.capacity_wait_s:g}", 503, attempt)
        if r.status_code >= 500:
            last = f"HTTP {r.status_code}: {_error_text(r)}"
            continue
        if r.status_code >= 400:
            raise CallFailed(what, f"HTTP {r.status_code}: {_error_text(r)} (not retried)", r.status_code, attempt)
        try:
            body = r.json()
        except ValueError:
            raise CallFailed(what, f"the reply is not JSON: {r.text[:200]!r}", r.status_code, attempt) from None
        if not isinstance(body, dict):
            raise CallFailed(what, "the reply is not a JSON object", r.status_code, attempt)
        return body
    raise CallFailed(what, f"gave up after {retry.retries + 1} attempts: {last}", None, retry.retries + 1)


class EnvClient:
    """One episode's calls to the env server."""

    def __init__(self, http: Any, base_url: str, retry: Retry, stats: CallStats):
        self.http, self.base, self.retry, self.stats = http, base_url.rstrip("/"), retry, stats
        self.start_request_id: Optional[str] = None
        self.session_id: Optional[str] = None

    async def start(self, task: dict) -> dict:
        self.start_request_id = new_request_id()
        reply = await post_json(self.http, self.base + P.START, {"request_id": self.start_request_id, "task": task},
                                self.retry, self.stats, "env start")
        sid = reply.get("session_id")
        if not isinstance(sid, str) or not isinstance(reply.get("observation"), str):
            raise CallFailed("env start", "the reply has no session_id/observation")
        self.session_id = sid
        return reply

    async def step(self, turn: int, action: str) -> dict:
        payload = {"request_id": new_request_id(), "session_id": self.session_id, "turn": turn, "action": action}
        reply = await post_json(self.http, self.base + P.STEP, payload, self.retry, self.stats, f"env step {turn}")
        if not isinstance(reply.get("done"), bool) or not isinstance(reply.get("reward"), (int, float)):
            raise CallFailed(f"env step {turn}", "the reply has no done/reward")
        return reply

    async def close(self) -> Optional[str]:
        """Always attempted (also when start's replies were lost: by the start's request id).
        Returns what went wrong, or None."""
        if self.start_request_id is None:
            return None
        payload: dict[str, Any] = {"request_id": new_request_id()}
        if self.session_id is not None:
            payload["session_id"] = self.session_id
        else:
            payload["start_request_id"] = self.start_request_id
        try:
            reply = await post_json(self.http, self.base + P.CLOSE, payload, self.retry, self.stats, "env close")
        except CallFailed as e:
            return str(e)
        return reply.get("error")


@dataclass
class ModelTurn:
    ids: list[int]
    logprobs: list[float]
    text: str  # the server's decoded text (special tokens skipped)
    finish_reason: Optional[str]  # stop | length | abort


async def generate(http: Any, url: str, input_ids: list[int], sampling_params: dict, retry: Retry,
                   stats: CallStats, routing_key: Optional[str] = None) -> ModelTurn:
    """One model turn from token ids (SGLang's native /generate). ``routing_key``: slime's
    ``X-SMG-Routing-Key`` header (the sample's ``session_id`` under ``--router-policy consistent_hashing``),
    so the router sends every turn of an episode to the engine that holds its prefix."""
    payload = {"input_ids": list(input_ids), "sampling_params": sampling_params, "return_logprob": True}
    headers = {ROUTING_HEADER: routing_key} if routing_key else None
    out = await post_json(http, url, payload, retry, stats, "generate", headers)
    meta = out.get("meta_info") or {}
    pairs = meta.get("output_token_logprobs")
    if not isinstance(pairs, list):
        raise CallFailed("generate", "the reply has no meta_info.output_token_logprobs (rollout log-probs come "
                         "from the inference server, never made up)")
    ids = [int(p[1]) for p in pairs]
    logprobs = [float(p[0]) for p in pairs]
    if out.get("output_ids") is not None and [int(i) for i in out["output_ids"]] != ids:
        raise CallFailed("generate", "output_ids and meta_info.output_token_logprobs disagree")
    fr = meta.get("finish_reason")
    finish = fr.get("type") if isinstance(fr, dict) else fr
    return ModelTurn(ids, logprobs, str(out.get("text") or ""), finish)
