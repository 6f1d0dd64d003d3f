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

LOCAL_IDLE_EXIT_S = 120.0  # a commander a launch started exits this long after its last run ended
LOCAL_INFO = "commander.json"  # {url, pid, port} of the commander started in a state dir


def state_dir() -> Path:
    """Where a commander this host starts keeps its state: $TRAINSTACK_HOME, default ~/.trainstack. One
    commander per state dir, on a free port (it was port 8780 for everyone: a second user's or checkout's
    commander was refused, or answered with the wrong runs)."""
    return Path(os.environ.get("TRAINSTACK_HOME", "~/.trainstack")).expanduser()


def local_url(home: Path | None = None) -> str | None:
    """The URL of the commander started in this state dir, while its process lives."""
    import json

    try:
        info = json.loads(((home or state_dir()) / LOCAL_INFO).read_text())
        os.kill(int(info["pid"]), 0)
        return str(info["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


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
    commander_port: Optional[int] = None  # port of a commander started here (default: a free one)
    poll_s: float = 5.0  # wait=true: seconds between status polls
    wait: bool = False  # block until every run has ended (Optuna needs it)
    metric: str = "rollout/raw_reward"  # what a finished run returns to the sweeper

    def problems(self) -> list[tuple[str, Any, str, str]]:
        from trainstack.commander.provider import PodRequest
        from trainstack.config.schema import to_typed

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
    port = settings.commander_port
    here = f"http://127.0.0.1:{port}" if port else local_url()  # the one this state dir started
    if here:
        client = CommanderClient(here, token)
        try:
            client.get("/v1/health", timeout=2)
            return client
        except CommanderError as ex:
            if ex.status:
                raise CommanderFailure(f"the commander at {client.url} refused us ({ex.detail})",
                                       f"use the token it was started with ({_token_hint()})") from None
    if not start:
        raise CommanderFailure(f"no commander answers at {here or f'the one started in {state_dir()}'}",
                               f"start one (trainstack commander serve) or set {URL_ENV}")
    from trainstack.launch.ray_start import free_port

    port = port or free_port()
    client = CommanderClient(f"http://127.0.0.1:{port}", token)
    start_local_commander(port, settings.public_url)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            client.get("/v1/health", timeout=2)
            return client
        except CommanderError:
            time.sleep(0.3)
    raise CommanderFailure(f"the commander started here did not answer at {client.url} within 30 s",
                           f"see {state_dir() / 'commander.log'}")


def _token_hint() -> str:
    from trainstack.commander.server import TOKEN_ENV

    return f"${TOKEN_ENV}"


def start_local_commander(port: int, public_url: str | None) -> None:
    """`trainstack commander serve` on this host, detached (it outlives this launch), state in state_dir();
    its URL and pid in commander.json there, for the next launch, status and `commander stop`."""
    import json

    home = state_dir()
    home.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "trainstack", "commander", "serve", "--db", str(home / "commander.db"),
            "--port", str(port), "--exit-when-idle", str(LOCAL_IDLE_EXIT_S)]
    if public_url:
        argv += ["--public-url", public_url]
    with open(home / "commander.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=str(home))
    (home / "commander.pid").write_text(str(proc.pid))
    (home / LOCAL_INFO).write_text(json.dumps({"url": f"http://127.0.0.1:{port}", "pid": proc.pid, "port": port}))
    print(f"trainstack: started a Lium commander on this host (pid {proc.pid}, port {port}, state and log in "
          f"{home}); it exits {LOCAL_IDLE_EXIT_S:.0f} s after its last run has ended "
          "(or: trainstack commander stop)", file=sys.stderr, flush=True)
