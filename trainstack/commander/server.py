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
    print(f"trainstack commander: serving http://{host}:{port} (pods use {config.public_url}); state {store.path}",
          file=sys.stderr, flush=True)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        reconciler.stop()
        store.close()
    return 0
