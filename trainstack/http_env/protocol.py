"""The HTTP environment protocol, version 1: paths, fields and status codes (docs/http_env.md).

One module spells the wire format; the server (``server.py``) and the generate function's client
(``plugins/trainstack_plugins/http_env/client.py``) both import it. Stdlib only.

    GET  /health              -> {status, env, protocol, sessions, max_sessions, session_ttl_s}
    POST /v1/session/start    {request_id, task{prompt, label, metadata}}
                              -> {session_id, observation, info, replayed}
    POST /v1/session/step     {request_id, session_id, turn, action}
                              -> {turn, observation, reward, done, truncated, info, validation, replayed}
    POST /v1/session/close    {request_id, session_id | start_request_id} -> {closed}

Every call carries a client-made ``request_id``; the same id sent again (a retry after a lost
response) is answered from the server's record, so an action is applied once. ``turn`` is the
step's index in the episode: a step whose turn is not the session's next one is refused (409).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

VERSION = 1
HEALTH = "/health"
START = "/v1/session/start"
STEP = "/v1/session/step"
CLOSE = "/v1/session/close"

# Status codes and what the client does with them.
OK = 200
BAD_REQUEST = 400  # malformed body or task: not retried
NOT_FOUND = 404  # unknown, closed or expired session: not retried
CONFLICT = 409  # wrong turn, or the episode already ended: not retried
AT_CAPACITY = 503  # max_sessions reached: retried with backoff (a 5xx)


@dataclass
class StepReply:
    """One step's answer, as recorded by the server (replayed verbatim for a retried request id)."""

    turn: int
    observation: Optional[str]
    reward: float
    done: bool
    truncated: bool = False
    info: dict = field(default_factory=dict)
    validation: Optional[dict] = None  # {reward, detail} from the terminal hook, on the final step only

    def to_json(self) -> dict[str, Any]:
        return {"turn": self.turn, "observation": self.observation, "reward": self.reward, "done": self.done,
                "truncated": self.truncated, "info": self.info, "validation": self.validation}
