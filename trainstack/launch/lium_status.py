"""`LiumLauncher.status | cancel | logs` (what `trainstack status | cancel | logs` ask for a Lium run;
its `lium.json` in the run dir names the commander): the commander's record is the truth about pod, phase,
lease epoch, restarts, last checkpoint, Hub commit and cost; the run dir on the submit host only
holds the spec."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Sequence

from trainstack.run.rundir import RunDir
from trainstack.storage import layout


def _client(run_dir: str | Path):
    import os

    from trainstack.commander.client import CommanderClient
    from trainstack.commander.server import TOKEN_ENV, URL_ENV

    rec = RunDir(run_dir).read(layout.LIUM, {}) or {}
    url = os.environ.get(URL_ENV) or rec.get("commander_url")
    token = os.environ.get(TOKEN_ENV, "")
    if not url or not token:
        return None, f"set {TOKEN_ENV}" + ("" if url else f" and {URL_ENV}") + " to ask the Lium commander"
    return CommanderClient(url, token), None


def locate(run_id: str) -> Path | None:
    """Where the commander says `run_id` was launched from (its spec records the submit host's run dir),
    when that run dir is on this host: `trainstack status|logs|cancel RUN` from any directory. Asks the
    commander at $TRAINSTACK_COMMANDER_URL, else the one a launch starts on this host; nothing without
    $TRAINSTACK_COMMANDER_TOKEN."""
    import os

    from trainstack.commander.client import CommanderClient, CommanderError
    from trainstack.commander.server import TOKEN_ENV, URL_ENV

    token = os.environ.get(TOKEN_ENV, "")
    if len(token) < 16 or not run_id or "/" in run_id:
        return None
    from trainstack.launch.lium_commander import local_url

    url = os.environ.get(URL_ENV) or local_url()
    if not url:
        return None
    try:
        spec = CommanderClient(url, token, timeout=3).get(f"/v1/runs/{run_id}/spec")
    except CommanderError:
        return None
    where = ((spec.get("extra") or {}).get("lium") or {}).get("submit_run_dir") if isinstance(spec, dict) else None
    if not where or not layout.is_run_dir(Path(where)):
        return None
    return Path(where)


def record(run_dir: str | Path, run_id: str) -> tuple[dict[str, Any] | None, str | None]:
    from trainstack.commander.client import CommanderError

    client, why = _client(run_dir)
    if client is None:
        return None, why
    try:
        return client.get(f"/v1/runs/{run_id}"), None
    except CommanderError as ex:
        return None, f"commander: {ex.detail}"


def pull_metrics(run_dir: str | Path) -> None:
    """What the commander's copy of the pod's metrics.jsonl has that this run dir's lacks (relay.py): compare
    and status read the run dir, while the run trains and after its pod is gone. Quiet when no commander answers."""
    from trainstack.commander.client import CommanderError
    from trainstack.metrics.relay import write_local

    rd = RunDir(run_dir)
    run_id = (rd.read(layout.LIUM, {}) or {}).get("run_id")
    client, _ = _client(run_dir)
    if client is None or not run_id:
        return
    try:
        have = rd.metrics_file.stat().st_size
    except OSError:
        have = 0
    try:
        got = client.get(f"/v1/runs/{run_id}/metrics?offset={have}")
        if got.get("size", 0) < have:  # the pod's file was rewritten shorter: take the copy whole
            got = client.get(f"/v1/runs/{run_id}/metrics?offset=0")
    except CommanderError:
        return
    if got.get("text") or (got.get("offset") == 0 and got.get("size") == 0 and have):
        write_local(run_dir, int(got.get("offset") or 0), str(got.get("text") or ""))


def fill_lium(rows: Sequence[Any]) -> None:
    for r in rows:
        rec, why = record(r.run_dir, r.run_id)
        if rec is None:
            r.scheduler, r.reason = "lium ?", why
            continue
        r.scheduler = rec["phase"] + ("" if rec["desired"] in ("running", rec["phase"]) else f" -> {rec['desired']}")
        r.reason = rec.get("message") if rec["phase"] in ("failed", "paused", "pending", "lost") else None
        r.state = rec["phase"] if rec["phase"] in ("finished", "failed", "cancelled", "paused") else (
            "running" if rec["phase"] == "running" else r.state)
        r.pod, r.epoch, r.restarts = rec.get("pod_id"), rec.get("epoch"), rec.get("restarts") or 0
        r.cost_usd, r.hub_commit = rec.get("cost_usd"), rec.get("last_hub_commit")
        if rec.get("last_checkpoint") is not None:
            r.last_checkpoint = rec["last_checkpoint"]
        progress = rec.get("progress") or {}
        if progress.get("reward") is not None:
            r.reward = progress["reward"]
        r.target = progress.get("num_rollout") or r.target
        r.rollouts = progress.get("rollouts") if progress.get("rollouts") is not None else r.rollouts
        if progress.get("hub_pushed") is not None:
            r.hub_pushed = progress["hub_pushed"]
        r.job_id = (rec.get("pod_id") or "")[:8] or None
        r.logs = {"trainer": f"trainstack logs {r.run_id}"}


def cancel_lium(rows: Sequence[Any], dry: bool, purge: bool = False) -> int:
    """Ask the commander to stop each run; `purge`: also delete the run's volume once its pod is gone
    (a finished run's is deleted too; a volume named in the settings, not made by the commander, is kept)."""
    from trainstack.commander.client import CommanderError

    code = 0
    for r in rows:
        client, why = _client(r.run_dir)
        if client is None:
            print(f"trainstack cancel: {r.run_id}: {why}", file=sys.stderr)
            code = 2
            continue
        what = f"the Lium commander at {client.url} to stop it{' and delete its volume' if purge else ''}"
        if dry:
            print(f"trainstack cancel: {r.run_id}: would ask {what} (--dry: nothing sent)", file=sys.stderr)
            continue
        try:
            client.post(f"/v1/runs/{r.run_id}/cancel" + ("?purge=true" if purge else ""))
        except CommanderError as ex:
            print(f"trainstack cancel: {r.run_id}: {ex.detail}", file=sys.stderr)
            code = 1
            continue
        print(f"trainstack cancel: {r.run_id}: asked {what}: its trainer saves a final checkpoint, then the pod is "
              "removed (`trainstack status` shows when it has ended)", file=sys.stderr)
    return code


def _local_again(client):
    """The commander of this host (one a launch started, state in state_dir()), started again when the
    run's commander URL is that local one; else the client unchanged (its error is the one to report)."""
    from urllib.parse import urlparse

    from trainstack.launch.lium_commander import LiumSettings, commander

    url = urlparse(client.url)
    if url.hostname != "127.0.0.1" or not url.port:
        return client
    return commander(LiumSettings(commander_port=url.port), start=True)


def resume_lium(rows: Sequence[Any], spend_limit: float | None, sweep_spend_limit: float | None,
                from_scratch: bool) -> int:
    """Resume paused runs, with new spend limits (a run paused at its limit is refused with the limit to set)."""
    from trainstack.commander.client import CommanderError, Unreachable

    code = 0
    body = {k: v for k, v in (("spend_limit", spend_limit), ("sweep_spend_limit", sweep_spend_limit)) if v is not None}
    for r in rows:
        client, why = _client(r.run_dir)
        if client is None:
            print(f"trainstack resume: {r.run_id}: {why}", file=sys.stderr)
            code = 2
            continue
        try:
            try:
                got = client.post(f"/v1/runs/{r.run_id}/resume" + ("?from_scratch=true" if from_scratch else ""), body)
            except Unreachable:  # the commander a launch started here exits when idle (a paused run is): again
                client = _local_again(client)
                got = client.post(f"/v1/runs/{r.run_id}/resume" + ("?from_scratch=true" if from_scratch else ""), body)
        except CommanderError as ex:
            print(f"trainstack resume: {r.run_id}: {ex.detail}", file=sys.stderr)
            code = code or 1
            continue
        limits = ", ".join(f"{k.replace('_', ' ')} ${v:.2f}" for k in ("spend_limit", "sweep_spend_limit")
                           if (v := got.get(k)) is not None) or "no spend limit"
        print(f"resumed {r.run_id} ({limits}); follow it: trainstack status {r.run_id}", file=sys.stderr)
    return code


def logs(run_dir: str | Path, run_id: str, follow: bool, which: str = "trainer", poll_s: float = 2.0) -> int:
    """Print the run's trainer (or worker) log from its pod; with follow, until the run ends."""
    from trainstack.commander.client import CommanderError

    client, why = _client(run_dir)
    if client is None:
        print(f"trainstack logs: {why}", file=sys.stderr)
        return 2
    offset = 0
    while True:
        try:
            got = client.get(f"/v1/runs/{run_id}/logs?which={which}&offset={offset}")
        except CommanderError as ex:
            if follow and ex.status == 503:  # the pod is being replaced
                time.sleep(poll_s)
                continue
            print(f"trainstack logs: {ex.detail}", file=sys.stderr)
            return 1
        sys.stdout.write(got["text"])
        sys.stdout.flush()
        if got["source"] == "pod":
            offset = got["offset"]
        if not follow or got["phase"] in ("finished", "failed", "cancelled", "paused"):
            if got["source"] == "commander" and not got["text"]:
                print(f"trainstack logs: {run_id} has no pod now ({got['phase']}) and no saved log tail",
                      file=sys.stderr)
            return 0
        time.sleep(poll_s)
