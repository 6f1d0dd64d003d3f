"""``trainstack env serve NAME`` and ``trainstack env list``: the reference env servers."""
from __future__ import annotations

import argparse
import json
from dataclasses import replace

from trainstack.errors import ConfigError, ConfigErrors, report_and_exit

DESCRIPTIONS = {
    "chain_sum": "built-in multi-turn running sum (\"3+4\" -> 7, \"+2\" -> 9): the tiny model learns it on CPU",
    "liveweb": "LiveWeb-Arena's Actor (reset/step/stop) behind the protocol; needs a liveweb-arena checkout "
               "(--option root=PATH or LIVEWEB_ARENA_ROOT)",
}


def _options(ns: argparse.Namespace) -> dict:
    import yaml

    out: dict = {}
    if ns.options:
        try:
            loaded = json.loads(ns.options)
        except ValueError as e:
            raise ConfigErrors([ConfigError("--options", f"not JSON: {e}", "e.g. --options '{\"turns\": 3}'",
                                            value=ns.options)]) from None
        if not isinstance(loaded, dict):
            raise ConfigErrors([ConfigError("--options", "must be a JSON object", value=ns.options)])
        out.update(loaded)
    for item in ns.option or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ConfigErrors([ConfigError("--option", "expects KEY=VALUE", "e.g. --option turns=3", value=item)])
        out[key] = yaml.safe_load(value)
    return out


def _as_flag(e: ConfigError) -> ConfigError:
    """Settings keys (``--max_sessions``) as the command line spells them (``--max-sessions``, NAME)."""
    if not e.key.startswith("--"):
        return e
    flag = "NAME" if e.key == "--env" else e.key.replace("_", "-")
    return replace(e, key=flag, fix=e.fix.replace(e.key, flag))


def cmd_serve(ns: argparse.Namespace) -> int:
    from trainstack.http_env.settings import parse_serve

    if not 0 <= ns.port <= 65535:  # bind() would raise OverflowError after the env was built
        report_and_exit(ConfigErrors([ConfigError("--port", f"{ns.port} is not a TCP port", "give --port in [1, 65535], "
                                                  "or 0 for a free one", value=ns.port)]), command="env serve")
    try:
        settings = parse_serve({"env": ns.name, "host": ns.host, "max_sessions": ns.max_sessions,
                                "session_ttl_s": ns.session_ttl_s, "terminal_hook": ns.terminal_hook,
                                "options": _options(ns)}, prefix="--")
        from trainstack.http_env.envs import make_env

        make_env(settings.env, settings.options)  # options checked before anything listens
    except ConfigErrors as err:  # keys as the flags are spelled
        report_and_exit(ConfigErrors([_as_flag(e) for e in err.errors]), command="env serve")
    from trainstack.http_env.server import serve

    refused = _bind_problem(settings.host, ns.port)
    if refused is not None:  # the address is taken or not ours: one message, not uvicorn's traceback
        from trainstack.errors import RuntimeFailure, report_failure_and_exit

        class ServeFailure(RuntimeFailure):
            what = "the env server"

        report_failure_and_exit(ServeFailure(f"cannot listen on {settings.host}:{ns.port}: {refused}",
                                               "pick another --port (0: a free one), or stop what listens there"))
    return serve(settings.env, host=settings.host, port=ns.port, max_sessions=settings.max_sessions,
                 session_ttl_s=settings.session_ttl_s, terminal_hook=settings.terminal_hook, options=settings.options,
                 ready_file=ns.ready_file)


def _bind_problem(host: str, port: int) -> str | None:
    """Why uvicorn could not bind host:port (None: it can), asked the way it binds (SO_REUSEADDR)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as ex:
        return str(ex.strerror or ex)
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as ex:
            return str(ex.strerror or ex)
    return None


def cmd_list(_ns: argparse.Namespace) -> int:
    from trainstack.http_env.envs import ENVS

    for name in ENVS:
        print(f"{name:12s} {DESCRIPTIONS.get(name, '')}")
    return 0


def add_env_commands(sub) -> None:
    env = sub.add_parser("env", help="HTTP environments for agentic RL: serve one, list them (docs/http_env.md)")
    esub = env.add_subparsers(dest="env_command", required=True)
    p = esub.add_parser("serve", help="run an env server (FastAPI + uvicorn) until Ctrl-C",
                        description="Serves the HTTP env protocol (docs/http_env.md) for a registered env.")
    p.add_argument("name", help="the env: " + ", ".join(DESCRIPTIONS))
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=18080, help="port (0: a free one; default 18080)")
    p.add_argument("--max-sessions", type=int, default=64, help="concurrent sessions (more: 503, retried)")
    p.add_argument("--session-ttl-s", type=float, default=600.0, help="idle sessions are closed after this long")
    p.add_argument("--terminal-hook", help="dotted path validating the final action (default: the env's own)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="an env option (repeatable)")
    p.add_argument("--options", help="env options as one JSON object")
    p.add_argument("--ready-file", help="write {url, pid, env} here once listening (used by trainstack's sidecar)")
    p.set_defaults(func=cmd_serve)
    p = esub.add_parser("list", help="the registered envs")
    p.set_defaults(func=cmd_list)
