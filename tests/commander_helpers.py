"""A real commander (`trainstack commander serve`: uvicorn in a subprocess) for tests, pointed at
the fake Lium; SIGKILL and restart on the same database."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from conftest import ROOT

TOKEN = "test-admin-token-0123456789abcdef"
FAST = {"--lease-ttl": "6", "--heartbeat": "1", "--worker-deadline": "4", "--tick": "0.3", "--probe": "0.5",
        "--start-timeout": "60", "--stop-timeout": "30", "--backoff": "0.5", "--backoff-max": "2"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CommanderProc:
    def __init__(self, tmp: Path, lium_env: dict[str, str], **flags: str):
        self.db = tmp / "commander.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "commander.log"
        self.flags = {**FAST, **flags}
        self.env = {**os.environ, **lium_env, "TRAINSTACK_COMMANDER_TOKEN": TOKEN, "PYTHONPATH": str(ROOT),
                    "PYTHONUNBUFFERED": "1"}
        self.proc: subprocess.Popen | None = None

    def start(self) -> "CommanderProc":
        argv = [sys.executable, "-m", "trainstack", "commander", "serve", "--db", str(self.db), "--port",
                str(self.port)]
        for k, v in self.flags.items():
            argv += [k, v]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.client().get("/v1/health", timeout=1)
                return self
            except Exception:
                assert self.proc.poll() is None, self.log.read_text()
                time.sleep(0.1)
        raise AssertionError("commander did not answer: " + self.log.read_text())

    def client(self, token: str = TOKEN):
        from trainstack.commander.client import CommanderClient

        return CommanderClient(self.url, token)

    def kill9(self) -> None:
        from trainstack.procgroup import kill_group

        assert self.proc is not None
        kill_group(self.proc, reap_wait_s=10)

    def stop(self) -> None:
        from trainstack.procgroup import stop_group

        if self.proc is not None and self.proc.poll() is None:
            stop_group(self.proc, term_wait_s=15)


def worker_token(run_id: str) -> str:
    from trainstack.commander.server import worker_token_for

    return worker_token_for(TOKEN)(run_id)


def wait_for(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
