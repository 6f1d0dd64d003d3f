"""What an environment behind the server implements, and the registry of built-in ones.

An env is three coroutines: ``start(task) -> Started``, ``step(handle, action) -> Stepped`` and
``close(handle)``. The server (``server.py``) owns sessions, request ids, TTL, the concurrency
limit and the terminal hook; an env only runs episodes. ``trainstack env serve NAME`` serves a
registered one. Stdlib only.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from trainstack.errors import ConfigError, ConfigErrors

# name -> "module:factory"; factory(options: dict) -> Env. Imported only when served.
ENVS: dict[str, str] = {
    "chain_sum": "trainstack.http_env.chain_sum:make_env",
    "liveweb": "trainstack.http_env.liveweb:make_env",
}


class TaskError(ValueError):
    """The task cannot be started (unknown task id, malformed metadata): answered 400, never retried."""


class EpisodeLost(RuntimeError):
    """The env no longer has the episode (its own restart, its own timeout): answered 404, never retried."""


@dataclass
class Started:
    handle: Any  # the env's own episode state; only the env reads it
    observation: str
    info: dict = field(default_factory=dict)


@dataclass
class Stepped:
    observation: Optional[str]
    reward: float
    done: bool
    truncated: bool = False  # the env ended the episode early (its own step limit), not by a final action
    info: dict = field(default_factory=dict)


class Env(Protocol):
    name: str
    default_terminal_hook: Optional[str]  # dotted path used when the server is given none

    async def start(self, task: dict) -> Started: ...

    async def step(self, handle: Any, action: str) -> Stepped: ...

    async def close(self, handle: Any) -> None: ...


def make_env(name: str, options: dict | None = None) -> Env:
    target = ENVS.get(name)
    if target is None:
        raise ConfigErrors([ConfigError("env", f"'{name}' is not a registered HTTP environment",
                                        f"use one of: {', '.join(ENVS)}", value=name)])
    module, _, factory = target.partition(":")
    return getattr(importlib.import_module(module), factory)(dict(options or {}))
