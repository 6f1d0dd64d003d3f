"""The run directory: files that record what a run is, what happened to it, and where it stands.

Layout and file formats: docs/run_dir.md. Writes are atomic (tmp + os.replace) so a reader
(or a crash) never sees half a file.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import socket
from pathlib import Path
from typing import Any

from trainstack.display import redact
from trainstack.render import SlimeCommand
from trainstack.resolve import ResolvedRun

STATES = ("created", "running", "finished", "failed", "interrupted")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


class RunDir:
    """Paths and records of one run directory."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    # paths
    checkpoints = property(lambda self: self.path / "checkpoints")
    logs = property(lambda self: self.path / "logs")
    tensorboard = property(lambda self: self.path / "tensorboard")
    wandb = property(lambda self: self.path / "wandb")
    events_file = property(lambda self: self.path / "events.jsonl")
    status_file = property(lambda self: self.path / "status.json")
    metrics_file = property(lambda self: self.path / "metrics.jsonl")
    lease_file = property(lambda self: self.path / "lease.json")

    def exists(self) -> bool:
        return (self.path / "config.yaml").exists()

    def stored_args(self) -> dict[str, Any] | None:
        return read_json(self.path / "args.json")

    def write_spec(self, run: ResolvedRun, cmd: SlimeCommand) -> None:
        """What the run is: resolved config, overrides, provenance, the rendered command."""
        import yaml

        for d in (self.checkpoints, self.logs, self.tensorboard, self.wandb):
            d.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path / "config.yaml", yaml.safe_dump(redact(run.config), sort_keys=False))
        overrides = [o.lstrip("+") for o in run.origin.overrides]
        atomic_write(self.path / "overrides.yaml", yaml.safe_dump(overrides))
        atomic_write(self.path / "args.json", json.dumps(redact(run.args), indent=1, sort_keys=True, default=str) + "\n")
        atomic_write(self.path / "provenance.json", json.dumps(run.provenance, indent=1, sort_keys=True) + "\n")
        atomic_write(self.path / "choices.json", json.dumps(run.origin.choices, indent=1, sort_keys=True) + "\n")
        atomic_write(self.path / "command.json", json.dumps({"run_id": run.run_id, "name": run.name, **cmd.to_json()},
                                                            indent=2, sort_keys=True) + "\n")
        atomic_write(self.path / "command.sh", "#!/usr/bin/env bash\n# Rendered by trainstack (secrets redacted).\n"
                     + cmd.shell_line() + "\n")
        os.chmod(self.path / "command.sh", 0o755)

    def event(self, event: str, **fields: Any) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"time": now_iso(), "event": event, "host": socket.gethostname(), "pid": os.getpid(),
                           **fields}, default=str)
        with open(self.events_file, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def events(self) -> list[dict]:
        try:
            lines = self.events_file.read_text().splitlines()
        except OSError:
            return []
        return [json.loads(ln) for ln in lines if ln.strip()]

    def status(self) -> dict[str, Any]:
        return read_json(self.status_file, {}) or {}

    def update_status(self, **fields: Any) -> dict[str, Any]:
        status = {**self.status(), **fields, "updated_at": now_iso()}
        atomic_write(self.status_file, json.dumps(status, indent=1, sort_keys=True, default=str) + "\n")
        return status

    def last_metrics(self) -> tuple[dict[str, float], list[float]]:
        """(latest value per metric, rollout/raw_reward series) from metrics.jsonl."""
        latest: dict[str, float] = {}
        rewards: list[float] = []
        try:
            lines = self.metrics_file.read_text().splitlines()
        except OSError:
            return latest, rewards
        for ln in lines:
            try:
                rec = json.loads(ln)
            except ValueError:
                continue  # a line cut by a kill
            latest.update(rec.get("metrics", {}))
            if "rollout/raw_reward" in rec.get("metrics", {}):
                rewards.append(rec["metrics"]["rollout/raw_reward"])
        return latest, rewards


def record_sweep_point(sweep_dir: str | Path, run_id: str, run_dir: str, overrides: list[str], job_num: int,
                       scheduler: str = "local") -> Path:
    """Add one point to `<sweep_dir>/sweep.json` (the manifest `trainstack compare/status` read).
    Local sweep points run one after another in one process, so read-modify-write is safe."""
    path = Path(sweep_dir) / "sweep.json"
    manifest = read_json(path) or {"sweep_dir": str(Path(sweep_dir).resolve()), "created_at": now_iso(),
                                   "scheduler": scheduler, "runs": []}
    manifest["runs"] = [r for r in manifest["runs"] if r.get("job_num") != job_num]
    manifest["runs"].append({"run_id": run_id, "run_dir": run_dir, "overrides": overrides, "job_num": job_num,
                             "job_id": None})
    atomic_write(path, json.dumps(manifest, indent=1) + "\n")
    return path
