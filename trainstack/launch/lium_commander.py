"""The Lium launcher's settings (`cluster.lium`) and its commander: a client of the one at the
configured URL, or of one started on this host. Apart from trainstack/launch/lium.py (submitting)
so that lium_status (following runs) imports this, not the launcher (no import circle)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from trainstack.errors import CommanderFailure, ConfigError, ConfigErrors

STATE_DIR = Path(os.environ.get("TRAINSTACK_HOME", "~/.trainstack")).expanduser()
LOCAL_IDLE_EXIT_S = 120.0  # a commander a launch started exits this long after its last run ended


@dataclass
class LiumSettings:
    """`cluster.lium`: the pod a run needs, and how the commander keeps it on one."""

    pod: dict[str, Any] = field(default_factory=dict)  # trainstack/commander/provider.py PodRequest fields
    restart_limit: int = 5  # pods re-provisioned without progress (a newer checkpoint) before it is failed
    capacity_wait_s: float = 3600.0  # no node free: keep trying (with backoff) this long, then fail the run
    spend_limit: Optional[float] = None  # USD per run: at the limit the run is paused and its pod removed
    sweep_spend_limit: Optional[float] = None  # USD for all runs of the sweep together
    commander_url: Optional[str] = None  # default $TRAINSTACK_COMMANDER_URL, else a commander on this host
    public_url: Optional[str] = None  # what pods use to reach a commander started here (default its local URL)
    commander_port: int = 8780  # port of a commander started here
    poll_s: float = 5.0  # wait=true: seconds between status polls
    wait: bool = False  # block until every run has ended (Optuna needs it)
    metric: str = "rollout/raw_reward"  # what a finished run returns to the sweeper

    def problems(self) -> list[tuple[str, Any, str, str]]:
        from trainstack.commander.provider import PodRequest
        from trainstack.schema import to_typed

        out: list[tuple[str, Any, str, str]] = []
        known = {f.name for f in fields(PodRequest)}
        for k, v in self.pod.items():
            if k not in known:
                out.append((f"pod.{k}", v, "not a Lium pod setting", f"use one of: {', '.join(sorted(known))}"))
        if not out:
            pod = {k: ([v] if k == "countries" and isinstance(v, str) else v) for k, v in self.pod.items()}
            _, errors = to_typed(PodRequest, pod, "pod.", lambda _k: "")
            out += [(e.key, e.value, e.problem, e.fix.replace("set pod.", "set cluster.lium.pod.")) for e in errors]
        if self.pod.get("template_id") and self.pod.get("image"):
            out.append(("pod.image", self.pod["image"], "set either template_id or image, not both", "remove one of them"))
        if self.capacity_wait_s < 0:
            out.append(("capacity_wait_s", self.capacity_wait_s, "must be 0 or more", "cluster.lium.capacity_wait_s=3600"))
        if self.restart_limit < 0:
            out.append(("restart_limit", self.restart_limit, "must be 0 or more", "cluster.lium.restart_limit=5"))
        return out


# ------------------------------------------------------------------------------------------
# The commander
# ------------------------------------------------------------------------------------------
def _token() -> str:
    from trainstack.commander.server import TOKEN_ENV

    token = os.environ.get(TOKEN_ENV, "")
    if len(token) < 16:
        raise ConfigErrors([ConfigError(
            TOKEN_ENV, "the Lium commander's token is not set (or shorter than 16 characters)",
            f"export {TOKEN_ENV}=$(openssl rand -hex 24) in the shell that launches and where the commander runs")])
    return token


def commander(settings: LiumSettings, start: bool = True):
    """A client of the commander at the configured URL, or of one started on this host."""
    from trainstack.commander.client import CommanderClient, CommanderError
    from trainstack.commander.server import URL_ENV

    token = _token()
    url = settings.commander_url or os.environ.get(URL_ENV)
    if url:
        return CommanderClient(url, token)
    port = int(settings.commander_port)
    client = CommanderClient(f"http://127.0.0.1:{port}", token)
    try:
        client.get("/v1/health", timeout=2)
        return client
    except CommanderError as ex:
        if ex.status:
            raise CommanderFailure(f"the commander at {client.url} refused us ({ex.detail})",
                                   f"use the token it was started with ({_token_hint()})") from None
    if not start:
        raise CommanderFailure(f"no commander answers at {client.url}",
                               f"start one (trainstack commander serve) or set {URL_ENV}")
    start_local_commander(port, settings.public_url)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            client.get("/v1/health", timeout=2)
            return client
        except CommanderError:
            time.sleep(0.3)
    raise CommanderFailure(f"the commander started here did not answer at {client.url} within 30 s",
                           f"see {STATE_DIR / 'commander.log'}")


def _token_hint() -> str:
    from trainstack.commander.server import TOKEN_ENV

    return f"${TOKEN_ENV}"


def start_local_commander(port: int, public_url: str | None) -> None:
    """`trainstack commander serve` on this host, detached (it outlives this launch), state in ~/.trainstack."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "trainstack", "commander", "serve", "--db", str(STATE_DIR / "commander.db"),
            "--port", str(port), "--exit-when-idle", str(LOCAL_IDLE_EXIT_S)]
    if public_url:
        argv += ["--public-url", public_url]
    with open(STATE_DIR / "commander.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=str(STATE_DIR))
    (STATE_DIR / "commander.pid").write_text(str(proc.pid))
    print(f"trainstack: started a Lium commander on this host (pid {proc.pid}, port {port}, log "
          f"{STATE_DIR / 'commander.log'}); it exits {LOCAL_IDLE_EXIT_S:.0f} s after its last run has ended "
          "(or: trainstack commander stop)", file=sys.stderr, flush=True)
