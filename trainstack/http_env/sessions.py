"""The server's sessions: request-id replay, turn order, TTL, the concurrency limit, the terminal hook.

Independent of FastAPI (``server.py`` maps these calls and ``HttpError`` onto HTTP), so the rules
are plain asyncio code:

- ``start`` with a request id seen before answers the session that id created (a retried start
  never opens a second session); one still in progress is awaited. An env whose start raises
  leaves nothing registered (the env frees what it allocated, as LiveWeb's ``reset`` does).
- ``step`` runs under the session's lock; a request id seen before is answered from the record
  (the action is not applied again); otherwise the turn must be the session's next one (409).
- The step that ends the episode runs the terminal hook (if any) once; its verdict is part of
  the recorded reply, so a replay never validates twice.
- ``close`` by session id or by the start's request id (a client whose start replies were all
  lost can still free the session); closing twice is not an error.
- Sessions idle for longer than the TTL are closed by ``reap``; a start beyond ``max_sessions``
  is refused with 503 (the client retries it with backoff).
"""
from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from trainstack.http_env import protocol as P
from trainstack.http_env.envs import EpisodeLost, Env, Stepped, TaskError

log = logging.getLogger("trainstack.http_env")


class HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class TerminalContext:
    """What a terminal hook sees: the env and its episode handle, the task, and the episode so far."""

    env: Env
    handle: Any
    session_id: str
    task: dict
    actions: list[str]
    rewards: list[float]
    result: Stepped  # the final step's result (for LiveWeb's stop action: reward 0.0, info.final_answer)


TerminalHook = Callable[[TerminalContext], Any]  # -> float | {"reward": float, ...} | None (sync or async)


def load_hook(path: str) -> TerminalHook:
    module, _, name = path.rpartition(".")
    if not module:
        raise ValueError(f"terminal hook {path!r} is not a dotted path module.function")
    return getattr(importlib.import_module(module), name)


@dataclass
class Session:
    id: str
    handle: Any
    task: dict
    start_reply: dict
    last_used: float
    turn: int = 0
    done: bool = False
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    replies: dict[str, dict] = field(default_factory=dict)  # step request id -> recorded reply
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class _StartRecord:
    done: asyncio.Event
    session_id: Optional[str] = None
    at: float = 0.0


class SessionStore:
    def __init__(self, env: Env, *, max_sessions: int, session_ttl_s: float,
                 terminal_hook: Optional[TerminalHook] = None, hook_name: Optional[str] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.env = env
        self.max_sessions = max_sessions
        self.session_ttl_s = session_ttl_s
        self.terminal_hook = terminal_hook
        self.hook_name = hook_name
        self.clock = clock
        self.sessions: dict[str, Session] = {}
        self.starts: dict[str, _StartRecord] = {}
        self.ended: dict[str, tuple[str, float]] = {}  # session id -> ("closed" | "expired", when)
        self.pending = 0  # starts in progress (they count against max_sessions)
        self.counters = {"starts": 0, "steps": 0, "replays": 0, "closes": 0, "expired": 0}

    # --- start ------------------------------------------------------------------------------
    async def start(self, request_id: str, task: dict) -> dict:
        rec = self.starts.get(request_id)
        if rec is not None:
            await rec.done.wait()
            if rec.session_id is not None and rec.session_id in self.sessions:
                self.counters["replays"] += 1
                return {**self.sessions[rec.session_id].start_reply, "replayed": True}
            if rec.session_id is not None:
                raise HttpError(P.CONFLICT, f"the session start request {request_id} opened "
                                f"({rec.session_id}) has been {self._why_gone(rec.session_id)}")
            # the earlier attempt failed and left nothing: this one starts afresh
        if len(self.sessions) + self.pending >= self.max_sessions:
            raise HttpError(P.AT_CAPACITY, f"at capacity: {len(self.sessions)} sessions open, "
                            f"{self.pending} starting (max_sessions={self.max_sessions})")
        rec = _StartRecord(done=asyncio.Event(), at=self.clock())
        self.starts[request_id] = rec
        self.pending += 1
        try:
            started = await self.env.start(task)
        except TaskError as e:
            self.starts.pop(request_id, None)
            raise HttpError(P.BAD_REQUEST, f"bad task: {e}") from None
        except Exception as e:  # noqa: BLE001 - an env failure is the client's 5xx, retried
            self.starts.pop(request_id, None)
            log.warning("env %s start failed: %s", self.env.name, e)
            raise HttpError(500, f"env start failed: {type(e).__name__}: {e}") from None
        finally:
            self.pending -= 1
            rec.done.set()
        sid = uuid.uuid4().hex
        reply = {"session_id": sid, "observation": started.observation, "info": started.info}
        self.sessions[sid] = Session(sid, started.handle, task, reply, last_used=self.clock())
        rec.session_id = sid
        self.counters["starts"] += 1
        return {**reply, "replayed": False}

    # --- step -------------------------------------------------------------------------------
    def _why_gone(self, session_id: str) -> str:
        why = self.ended.get(session_id)
        if why is None:
            return "never opened here (or forgotten)"
        return "closed" if why[0] == "closed" else f"closed after {self.session_ttl_s:g} s idle (session TTL)"

    async def step(self, request_id: str, session_id: str, turn: int, action: str) -> dict:
        s = self.sessions.get(session_id)
        if s is None:
            raise HttpError(P.NOT_FOUND, f"session {session_id}: {self._why_gone(session_id)}")
        async with s.lock:
            if request_id in s.replies:
                self.counters["replays"] += 1
                return {**s.replies[request_id], "replayed": True}
            if session_id not in self.sessions:  # closed while this request waited for the lock
                raise HttpError(P.NOT_FOUND, f"session {session_id}: {self._why_gone(session_id)}")
            if s.done:
                raise HttpError(P.CONFLICT, f"session {session_id}: the episode ended at turn {s.turn - 1}")
            if turn != s.turn:
                raise HttpError(P.CONFLICT, f"session {session_id}: step for turn {turn}, but the next turn is "
                                f"{s.turn} (a different request id for an action already applied?)")
            s.last_used = self.clock()
            try:
                res = await self.env.step(s.handle, action)
            except EpisodeLost as e:
                raise HttpError(P.NOT_FOUND, f"session {session_id}: {e}") from None
            except Exception as e:  # noqa: BLE001
                log.warning("env %s step failed: %s", self.env.name, e)
                raise HttpError(500, f"env step failed: {type(e).__name__}: {e}") from None
            s.turn += 1
            s.actions.append(action)
            s.rewards.append(float(res.reward))
            self.counters["steps"] += 1
            validation = None
            if res.done:
                s.done = True
                validation = await self._validate(s, res)
            reply = P.StepReply(turn=turn, observation=res.observation, reward=float(res.reward), done=res.done,
                                truncated=res.truncated, info=res.info, validation=validation).to_json()
            s.replies[request_id] = reply
            s.last_used = self.clock()
            return {**reply, "replayed": False}

    async def _validate(self, s: Session, res: Stepped) -> Optional[dict]:
        if self.terminal_hook is None:
            return None
        ctx = TerminalContext(self.env, s.handle, s.id, s.task, list(s.actions), list(s.rewards), res)
        try:
            verdict = self.terminal_hook(ctx)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception as e:  # noqa: BLE001 - reported in the reply: the client fails the sample, no silent 0
            log.warning("terminal hook %s failed: %s", self.hook_name, e)
            return {"reward": None, "error": f"{type(e).__name__}: {e}", "hook": self.hook_name}
        if verdict is None:
            return None
        if isinstance(verdict, dict):
            return {**verdict, "reward": float(verdict["reward"]), "hook": self.hook_name}
        return {"reward": float(verdict), "hook": self.hook_name}

    # --- close ------------------------------------------------------------------------------
    async def close(self, request_id: str, session_id: Optional[str] = None,
                    start_request_id: Optional[str] = None) -> dict:
        if session_id is None and start_request_id is not None:
            rec = self.starts.get(start_request_id)
            if rec is not None:
                await rec.done.wait()
                session_id = rec.session_id
        if session_id is None:
            return {"closed": False}
        s = self.sessions.pop(session_id, None)
        if s is None:
            return {"closed": False}
        self.ended[session_id] = ("closed", self.clock())
        self.counters["closes"] += 1
        async with s.lock:  # a step in progress finishes first
            return await self._close_env(s)

    async def _close_env(self, s: Session) -> dict:
        try:
            await self.env.close(s.handle)
        except Exception as e:  # noqa: BLE001
            log.warning("env %s close failed: %s", self.env.name, e)
            return {"closed": True, "error": f"{type(e).__name__}: {e}"}
        return {"closed": True}

    # --- housekeeping -----------------------------------------------------------------------
    async def reap(self) -> int:
        """Close sessions idle for longer than the TTL; forget old start and end records."""
        now = self.clock()
        idle = [s for s in self.sessions.values() if now - s.last_used > self.session_ttl_s and not s.lock.locked()]
        for s in idle:
            self.sessions.pop(s.id, None)
            self.ended[s.id] = ("expired", now)
            self.counters["expired"] += 1
            await self._close_env(s)
        keep = 4 * self.session_ttl_s
        for rid in [r for r, rec in self.starts.items() if rec.done.is_set() and now - rec.at > keep]:
            del self.starts[rid]
        for sid in [k for k, (_, at) in self.ended.items() if now - at > keep]:
            del self.ended[sid]
        return len(idle)

    async def close_all(self) -> None:
        for sid in list(self.sessions):
            s = self.sessions.pop(sid)
            self.ended[sid] = ("closed", self.clock())
            await self._close_env(s)

    def health(self) -> dict:
        return {"status": "ok", "env": self.env.name, "protocol": P.VERSION, "sessions": len(self.sessions),
                "starting": self.pending, "max_sessions": self.max_sessions, "session_ttl_s": self.session_ttl_s,
                "terminal_hook": self.hook_name, "counters": dict(self.counters)}
