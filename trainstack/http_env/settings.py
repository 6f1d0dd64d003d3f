"""Typed settings of an HTTP environment: the generate function's (client) and the server's.

They live in an env preset's ``meta.http_env`` block (``conf/env/liveweb.yaml``,
``conf/env/chain_sum.yaml``), are checked by the dry run like every other key, and reach the
generate function through slime's ``--custom-config-path``: trainstack writes
``<run_dir>/http_env.yaml`` with one top-level key ``http_env`` (slime makes it ``args.http_env``).
A sample may override client settings with ``sample.metadata["http_env"]``. The ``serve`` block
(server settings) makes trainstack start the env server for the run itself (``sidecar``).

Stdlib only: the generate function imports this inside slime's Ray workers.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Optional

from trainstack.config.schema import to_typed
from trainstack.errors import ConfigError, ConfigErrors

CONFIG_KEY = "http_env"  # the custom-config key (slime: args.http_env) and the meta block's name
REWARD_MODES = ("sum", "last", "terminal")
OBSERVATION_ROLES = ("user", "tool")
CONTEXTS = ("conversation", "step")


@dataclass
class HttpEnvSettings:
    """What the generate function needs to run one episode (docs/http_env.md, "Settings")."""

    url: Optional[str] = None  # env server base URL; filled in by trainstack when it serves the env itself
    max_turns: int = 8  # model turns per episode (each followed by one env step)
    max_tokens_per_turn: Optional[int] = None  # cap per model turn; null: the rest of the response budget
    reward: str = "sum"  # sum of step rewards | last step's | terminal only (0 unless the env ended the episode)
    observation_role: str = "user"  # chat role the env's observations are rendered as: user | tool
    system_prompt: Optional[str] = None  # a system message before the first observation
    tokenizer: Optional[str] = None  # dir with tokenizer.json + chat template; null: --hf-checkpoint (slime's)
    chat_template_kwargs: dict = field(default_factory=dict)  # extra template variables, e.g. {enable_thinking: false}
    timeout_s: float = 30.0  # one env request attempt
    retries: int = 3  # extra attempts after connection errors, timeouts and 5xx (never after 4xx)
    backoff_s: float = 0.5  # first wait between attempts; doubles each retry
    max_backoff_s: float = 8.0
    generate_timeout_s: Optional[float] = 600.0  # one /generate attempt; null: no limit
    episode_timeout_s: Optional[float] = None  # the whole episode; past it the sample fails (null: no limit)
    context: str = "conversation"  # conversation: one growing chat, one sample | step: each turn's observation alone
    capacity_wait_s: float = 600.0  # how long a start waits for a server at max_sessions (503 + Retry-After)

    CHOICES = {"reward": REWARD_MODES, "observation_role": OBSERVATION_ROLES, "context": CONTEXTS}

    def call_bound_s(self) -> float:
        """Longest one env call can take before the sample fails: every attempt times out."""
        waits = sum(min(self.backoff_s * 2 ** k, self.max_backoff_s) for k in range(self.retries))
        return (self.retries + 1) * self.timeout_s + waits


# Settings that change what is trained (part of the run_id hash); the rest say where and how
# patiently to reach the server.
TRAINING_KEYS = ("max_turns", "max_tokens_per_turn", "reward", "observation_role", "system_prompt", "tokenizer",
                 "chat_template_kwargs", "context")


def identity(node: Mapping[str, Any]) -> dict:
    """The training-relevant part of a ``meta.http_env`` block."""
    return {k: node[k] for k in TRAINING_KEYS if k in node}


@dataclass
class ServeSettings:
    """An env server trainstack starts for the run (and stops after it): ``trainstack env serve ENV``."""

    env: str  # a registered env (trainstack/http_env/envs.py): chain_sum, liveweb
    host: str = "127.0.0.1"  # where it listens, and the host of the URL the generate function gets
    max_sessions: int = 64  # concurrent sessions; a start beyond it is answered 503 (retried by the client)
    session_ttl_s: float = 600.0  # an idle session is closed after this long
    terminal_hook: Optional[str] = None  # dotted path: validates the final action (docs/http_env.md)
    options: dict = field(default_factory=dict)  # env-specific options (e.g. liveweb: root, actor)


def _positive(errors: list[ConfigError], prefix: str, values: Mapping[str, Any], names: tuple[str, ...], *,
              allow_none: bool, integer: bool) -> None:
    """Range checks of the numbers among ``values`` (wrong types are reported by to_typed)."""
    for name in names:
        if name not in values:
            continue
        v = values[name]
        if v is None and allow_none:
            continue
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
            continue
        if v is None or (isinstance(v, float) and not math.isfinite(v)) or v <= 0:
            kind = "an integer >= 1" if integer else "a finite number > 0"
            errors.append(ConfigError(f"{prefix}{name}", f"must be {kind}", f"set {prefix}{name} to {kind}"
                                      + (" or null" if allow_none else ""), value=v))


def parse_settings(node: Mapping[str, Any] | None, prefix: str = f"{CONFIG_KEY}.",
                   source_of: Callable[[str], str] = lambda key: "") -> HttpEnvSettings:
    """A settings mapping -> HttpEnvSettings, or ConfigErrors naming every bad key (did-you-mean)."""
    node = dict(node or {})
    obj, errors = to_typed(HttpEnvSettings, node, prefix, source_of)
    _positive(errors, prefix, node, ("max_turns",), allow_none=False, integer=True)
    _positive(errors, prefix, node, ("max_tokens_per_turn",), allow_none=True, integer=True)
    _positive(errors, prefix, node, ("timeout_s", "max_backoff_s", "capacity_wait_s"), allow_none=False, integer=False)
    _positive(errors, prefix, node, ("generate_timeout_s", "episode_timeout_s"), allow_none=True, integer=False)
    retries, backoff, url = node.get("retries"), node.get("backoff_s"), node.get("url")
    if isinstance(retries, int) and retries < 0:
        errors.append(ConfigError(f"{prefix}retries", "must be >= 0", f"set {prefix}retries to 0..10", value=retries))
    if isinstance(backoff, (int, float)) and (backoff < 0 or not math.isfinite(backoff)):
        errors.append(ConfigError(f"{prefix}backoff_s", "must be a finite number >= 0", value=backoff))
    if isinstance(url, str) and not url.startswith(("http://", "https://")):
        errors.append(ConfigError(f"{prefix}url", "must be an http:// or https:// URL", "e.g. http://127.0.0.1:18080",
                                  value=url))
    if errors:
        raise ConfigErrors([e if e.source else replace(e, source=source_of(e.key)) for e in errors])
    assert obj is not None
    return obj


def parse_serve(node: Mapping[str, Any], prefix: str = f"{CONFIG_KEY}.serve.",
                source_of: Callable[[str], str] = lambda key: "") -> ServeSettings:
    node = dict(node)
    obj, errors = to_typed(ServeSettings, node, prefix, source_of)
    from trainstack.http_env.envs import ENVS

    if isinstance(node.get("env"), str) and node["env"] not in ENVS:
        errors.append(ConfigError(f"{prefix}env", "not a registered env", f"use one of: {', '.join(ENVS)}",
                                  value=node["env"]))
    _positive(errors, prefix, node, ("max_sessions",), allow_none=False, integer=True)
    _positive(errors, prefix, node, ("session_ttl_s",), allow_none=False, integer=False)
    if errors:
        raise ConfigErrors([e if e.source else replace(e, source=source_of(e.key)) for e in errors])
    assert obj is not None
    return obj


@dataclass
class HttpEnvBlock:
    """An env preset's ``meta.http_env``: client settings plus, optionally, a server to start."""

    settings: HttpEnvSettings
    serve: Optional[ServeSettings]
    raw: dict  # the client settings as written (what the custom config file carries)


def parse_block(node: Mapping[str, Any], prefix: str = "env.meta.http_env.",
                source_of: Callable[[str], str] = lambda key: "") -> HttpEnvBlock:
    node = dict(node)
    serve_node = node.pop("serve", None)
    errors: list[ConfigError] = []
    settings = serve = None
    try:
        settings = parse_settings(node, prefix, source_of)
    except ConfigErrors as e:
        errors += e.errors
    if serve_node is not None:
        if not isinstance(serve_node, dict):
            errors.append(ConfigError(f"{prefix}serve", "must be a mapping (env, max_sessions, ...)", value=serve_node))
        else:
            try:
                serve = parse_serve(serve_node, f"{prefix}serve.", source_of)
            except ConfigErrors as e:
                errors += e.errors
    if settings is not None and serve is None and settings.url is None:
        errors.append(ConfigError(f"{prefix}url", "no env server: neither a url nor a serve block",
                                  f"set {prefix}url=http://HOST:PORT (a running server), or add {prefix}serve.env=NAME "
                                  "so trainstack starts one for the run"))
    if errors:
        raise ConfigErrors(errors)
    assert settings is not None
    return HttpEnvBlock(settings, serve, node)


def with_overrides(base: HttpEnvSettings, overrides: Mapping[str, Any] | None, prefix: str) -> HttpEnvSettings:
    """``base`` updated by a partial mapping (a sample's ``metadata["http_env"]``), checked the same way."""
    if not overrides:
        return base
    merged = {**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)}, **dict(overrides)}
    return parse_settings(merged, prefix)
