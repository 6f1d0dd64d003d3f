"""The env server a run needs, around the trainer: started before it, stopped after it.

A run whose env preset has ``meta.http_env`` gets, at every launch (fresh or resumed, any
launcher: the lifecycle's wrap_runner hook, ``feature.py``, calls ``with_sidecars``):

1. if the block has ``serve``: ``trainstack env serve ENV --port 0`` in its own process group
   (it dies with the launcher), logging to ``logs/http_env_server.log``; its bound URL is read
   from ``logs/http_env_server.json`` and ``/health`` must answer before the trainer starts;
2. ``<run_dir>/http_env.yaml`` (the rendered ``--custom-config-path``): ``http_env:`` with the
   client settings and the URL of the server (the one just started, or ``url``);
3. the trainer; when it has exited, the server gets SIGTERM, then SIGKILL, by process group.

A server that does not come up fails the run with exit code 1 and the reason in events.jsonl
(the trainer never starts). ``dry_run_notes`` tells the dry run which URL a launch will use and
whether ``/health`` answers. Stdlib only (the lifecycle and the dry run import it).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from trainstack.http_env import protocol as P
from trainstack.http_env.settings import CONFIG_KEY, HttpEnvBlock, ServeSettings, parse_block
from trainstack.procgroup import die_with_parent
from trainstack.storage import layout

if TYPE_CHECKING:
    from trainstack.config.resolve import ResolvedRun
    from trainstack.run.lifecycle import Runner, StartRunner
    from trainstack.run.rundir import RunDir
    from trainstack.run.spec import RunSpec

READY_TIMEOUT_S = 60.0
HEALTH_TIMEOUT_S = 3.0


def block_of(config: dict) -> Optional[HttpEnvBlock]:
    """The env preset's ``meta.http_env``, parsed (None when the env has none)."""
    node = ((config.get("env") or {}).get("meta") or {}).get(CONFIG_KEY)
    return None if node is None else parse_block(node)


def health(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> tuple[bool, str]:
    """(answers, what it said or why not) for ``GET <url>/health``."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + P.HEALTH, timeout=timeout_s) as r:  # noqa: S310 (http only)
            data = json.loads(r.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return False, f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason
    return True, (f"env {data.get('env')}, protocol {data.get('protocol')}, {data.get('sessions')}/"
                  f"{data.get('max_sessions')} sessions, terminal hook {data.get('terminal_hook')}")


def serve_argv(serve: ServeSettings, ready_file: str) -> list[str]:
    argv = [sys.executable, "-m", "trainstack.cli.main", "env", "serve", serve.env, "--host", serve.host, "--port", "0",
            "--max-sessions", str(serve.max_sessions), "--session-ttl-s", str(serve.session_ttl_s),
            "--ready-file", ready_file]
    if serve.terminal_hook:
        argv += ["--terminal-hook", serve.terminal_hook]
    if serve.options:
        argv += ["--options", json.dumps(serve.options, sort_keys=True)]
    return argv


class EnvServerProcess:
    """``trainstack env serve`` in its own process group; stopped by group, never by name."""

    def __init__(self, serve: ServeSettings, rundir: "RunDir", env: dict[str, str], cwd: str):
        rundir.logs.mkdir(parents=True, exist_ok=True)
        self.ready_file = rundir.logs / layout.HTTP_ENV_SERVER_READY
        self.log_path = rundir.logs / layout.HTTP_ENV_SERVER_LOG
        self.ready_file.unlink(missing_ok=True)
        self.url = ""
        self._log = open(self.log_path, "ab")
        self.argv = serve_argv(serve, str(self.ready_file))
        self.proc = subprocess.Popen(self.argv, cwd=cwd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=die_with_parent)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> Optional[str]:
        """None once ``/health`` answers at the bound URL; else why not."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"the env server exited with code {self.proc.returncode} before it listened"
            try:
                self.url = json.loads(self.ready_file.read_text())["url"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.05)
                continue
            ok, said = health(self.url)
            if ok:
                return None
            time.sleep(0.1)
        return f"the env server did not answer {P.HEALTH} within {timeout_s:g} s"

    def stop(self, term_wait_s: float = 10.0) -> Optional[int]:
        from trainstack.procgroup import stop_group

        stop_group(self.proc, term_wait_s=term_wait_s)  # exited already: what it left in its group
        self._log.close()
        return self.proc.returncode


class _NotStarted:
    """The runner of a trainer that never started (its env server did not come up): exit code 1."""

    def __init__(self, why: str):
        self.why = why
        self.signalled: int | None = None
        self.pgid: int | None = None

    def stop(self, signum: int = signal.SIGTERM) -> None:
        self.signalled = self.signalled or signum

    def wait(self) -> int:
        print(f"trainstack: {self.why}; the trainer was not started", file=sys.stderr, flush=True)
        return 1


class _WithServer:
    """The trainer's runner; when it has exited, the env server is stopped."""

    def __init__(self, runner: "Runner", server: Optional[EnvServerProcess], rundir: "RunDir"):
        self.runner, self.server, self.rundir = runner, server, rundir

    @property
    def signalled(self) -> int | None:
        return self.runner.signalled

    @property
    def pgid(self) -> int | None:
        return self.runner.pgid

    def stop(self, signum: int = signal.SIGTERM) -> None:
        self.runner.stop(signum)  # the server stays up: a stopping trainer finishes its rollout through it

    def wait(self) -> int:
        try:
            return self.runner.wait()
        finally:
            if self.server is not None:
                code = self.server.stop()
                self.rundir.event("http_env_server_stopped", url=self.server.url, exit_code=code)


def client_config_text(block: HttpEnvBlock, url: str) -> str:
    """The generate function's settings file (slime's --custom-config-path YAML)."""
    import yaml

    return yaml.safe_dump({CONFIG_KEY: {**block.raw, "url": url}}, sort_keys=False)


def write_client_config(path: str, block: HttpEnvBlock, url: str) -> None:
    from trainstack.run.rundir import atomic_write

    atomic_write(Path(path), client_config_text(block, url))


def launch_files(config: dict, args: dict) -> dict[str, str]:
    """Files a launch writes before the trainer starts that its argv names ({path: text}; the URL of a
    server the launch starts is only known then): what slime's parser reads at start-up."""
    block = block_of(config)
    path = args.get("custom_config_path")
    if block is None or not path:
        return {}
    return {path: client_config_text(block, block.settings.url or "http://127.0.0.1:0")}


def with_sidecars(spec: "RunSpec", start: "StartRunner") -> "StartRunner":
    """``start`` wrapped so the run's env server and settings file exist while the trainer runs."""
    block = block_of(spec.config)
    config_path = spec.args.get("custom_config_path")
    if block is None or not config_path:
        return start
    cwd = str(spec.command.get("cwd") or os.getcwd())

    def start_with(env: dict[str, str], rundir: "RunDir") -> Any:
        server = None
        url = block.settings.url or ""
        if block.serve is not None:
            from trainstack.terminal.phase import phase

            server = EnvServerProcess(block.serve, rundir, env, cwd)
            with phase(f"starting the env server ({block.serve.env}; log {server.log_path})"):
                problem = server.wait_ready()
            if problem:
                server.stop(term_wait_s=2.0)
                why = f"{problem} (argv {' '.join(server.argv)}; log {server.log_path})"
                rundir.event("http_env_server_failed", reason=why)
                return _NotStarted(why)
            url = server.url
            rundir.event("http_env_server_started", url=url, server_pid=server.proc.pid, env=block.serve.env)
        write_client_config(config_path, block, url)
        try:
            runner = start(env, rundir)
        except BaseException:
            if server is not None:
                server.stop()
            raise
        return _WithServer(runner, server, rundir)

    return start_with


def dry_run_notes(run: "ResolvedRun") -> list[str]:
    """What a launch will do about the env server: the URL and whether it answers now."""
    node = (run.meta.get("env") or {}).get(CONFIG_KEY)
    if node is None:
        return []
    try:
        block = parse_block(node)
    except Exception:  # noqa: BLE001 - the validator reports it
        return []
    path = run.args.get("custom_config_path")
    if block.serve is not None:
        s = block.serve
        return [f"http env: a launch starts `trainstack env serve {s.env}` on {s.host} (a free port; max_sessions="
                f"{s.max_sessions}, session_ttl_s={s.session_ttl_s:g}) before the trainer and stops it after; its URL "
                f"goes into {path} (--custom-config-path)"]
    assert block.settings.url is not None
    ok, said = health(block.settings.url)
    state = f"/health answers: {said}" if ok else (
        f"/health does NOT answer ({said}): start it before launching, e.g. `trainstack env serve "
        f"{(run.meta.get('env') or {}).get('name', 'ENV')} --host 0.0.0.0 --port PORT` on that host")
    return [f"http env: the generate function will use the env server at {block.settings.url} (env.meta.http_env.url); "
            f"{state}; settings go into {path} (--custom-config-path)"]
