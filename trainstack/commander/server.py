"""`trainstack commander serve`: the API (uvicorn, one process, one worker) and the reconciler
in the same process, over one SQLite database.

Tokens: the admin token comes from the environment (`TRAINSTACK_COMMANDER_TOKEN`); each run's
worker token is derived from it (HMAC of the run id), so a pod holds a token that only works
for its own run, and nothing but the admin token needs storing.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import sys
from pathlib import Path

TOKEN_ENV = "TRAINSTACK_COMMANDER_TOKEN"
URL_ENV = "TRAINSTACK_COMMANDER_URL"


def worker_token_for(admin_token: str):
    def token(run_id: str) -> str:
        return hmac.new(admin_token.encode(), f"worker:{run_id}".encode(), hashlib.sha256).hexdigest()
    return token


def serve(db: str, host: str, port: int, public_url: str | None, **timing) -> int:
    admin = os.environ.get(TOKEN_ENV, "")
    if len(admin) < 16:
        print(f"trainstack commander: set {TOKEN_ENV} to a random token of at least 16 characters "
              "(e.g. `export TRAINSTACK_COMMANDER_TOKEN=$(openssl rand -hex 24)`); nothing was started",
              file=sys.stderr)
        return 2
    import uvicorn

    from trainstack.commander.api import create_app
    from trainstack.commander.reconciler import CommanderConfig, Reconciler
    from trainstack.commander.store import Store

    try:
        config = CommanderConfig(public_url=public_url or f"http://{host}:{port}",
                                 **{k: v for k, v in timing.items() if v is not None})
    except ValueError as ex:
        print(f"trainstack commander: {ex}; nothing was started", file=sys.stderr)
        return 2
    store = Store(Path(db).expanduser())
    tokens = worker_token_for(admin)
    reconciler = Reconciler(store, config, tokens)
    app = create_app(store, config, admin, tokens, reconciler)
    reconciler.start()
    print(f"trainstack commander: serving http://{host}:{port} (pods use {config.public_url}); state {store.path}"
          + (f"; exits {config.exit_when_idle_s:.0f} s after its last run ended" if config.exit_when_idle_s else ""),
          file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    if config.exit_when_idle_s:
        import threading

        threading.Thread(target=_exit_when_idle, args=(server, store, config.exit_when_idle_s), daemon=True,
                         name="commander-idle").start()
    try:
        server.run()
    finally:
        reconciler.stop()
        store.close()
    return 0


def idle(store) -> bool:
    """No run the commander still has to do something for: every run ended or paused, no pod open, and
    no purged volume left to delete."""
    from trainstack.commander.store import TERMINAL_PHASES

    if store.open_pods():
        return False
    return all(r.phase in TERMINAL_PHASES and not (r.purge and r.volume_id) for r in store.runs())


def _exit_when_idle(server, store, after_s: float, every_s: float = 1.0) -> None:
    """A commander a launch started on the submit host stops itself once its last run has ended (and its
    pods are removed) for `after_s`: nothing is left running that the user did not start on purpose."""
    import time

    since = time.monotonic()
    while not server.should_exit:
        time.sleep(every_s)
        if not idle(store):
            since = time.monotonic()
        elif time.monotonic() - since >= after_s:
            print(f"trainstack commander: no active run for {after_s:.0f} s; exiting (state kept in {store.path})",
                  file=sys.stderr, flush=True)
            server.should_exit = True


def stop_local(state_dir: Path) -> int:
    """`trainstack commander stop`: SIGTERM the commander a launch started here (its pid file in state_dir),
    after checking the pid still is that commander."""
    import signal

    pid_file = state_dir / "commander.pid"
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        print(f"trainstack commander: none started here is running ({pid_file})", file=sys.stderr)
        pid_file.unlink(missing_ok=True)
        return 1
    if b"commander" not in cmdline or b"serve" not in cmdline:
        print(f"trainstack commander: pid {pid} in {pid_file} is not a commander; nothing stopped", file=sys.stderr)
        pid_file.unlink(missing_ok=True)
        return 1
    os.kill(pid, signal.SIGTERM)
    print(f"trainstack commander: stopped pid {pid} (runs keep their state in {state_dir}; pods of active runs stay "
          "until a commander runs again)", file=sys.stderr)
    pid_file.unlink(missing_ok=True)
    (state_dir / "commander.json").unlink(missing_ok=True)
    return 0
