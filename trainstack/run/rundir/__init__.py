"""The run directory: files that record what a run is, what happened to it, and where it stands.

Layout and file formats: docs/run_dir.md. Writes are atomic (a temp name private to the writing
thread + os.replace) so a reader (or a crash) never sees half a file. Several writers share a run
dir (the lifecycle, the Hub sync thread, a worker): status.json's read-modify-write holds a lock
(threads: a threading.Lock; processes: flock on a lock file), so no update is lost, and an event is
one O_APPEND write under flock, so events.jsonl lines never interleave.
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, Protocol

from trainstack.secrets import scrub
from trainstack.storage import layout
from trainstack.storage.files import append_line as append_line
from trainstack.storage.files import atomic_write as atomic_write
from trainstack.storage.files import locked as locked
from trainstack.storage.files import now_iso as now_iso
from trainstack.storage.files import temp_name as temp_name

STATES = ("created", "running", "finished", "failed", "interrupted")


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


class StoredSpec(Protocol):
    """What `RunDir.write_spec` stores of a run spec (trainstack/run/spec.py's RunSpec): the run dir
    names only this, so it sits below the spec that writes itself into it."""

    run_id: str
    name: str
    config: dict[str, Any]
    overrides: Any
    args: dict[str, Any]
    arg_sources: dict[str, Any]
    choices: dict[str, Any]

    def slime_command(self) -> Any: ...  # a trainstack.render.command.SlimeCommand

    def write(self, run_dir: str | Path | None = None) -> Path: ...


class RunDir:
    """Paths and records of one run directory."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    # paths
    checkpoints = property(lambda self: self.path / layout.CHECKPOINTS)
    logs = property(lambda self: self.path / layout.LOGS)
    tensorboard = property(lambda self: self.path / layout.TENSORBOARD)
    wandb = property(lambda self: self.path / layout.WANDB)
    events_file = property(lambda self: self.path / layout.EVENTS)
    status_file = property(lambda self: self.path / layout.STATUS)
    metrics_file = property(lambda self: self.path / layout.METRICS)
    lease_file = property(lambda self: self.path / layout.LEASE)
    spec_file = property(lambda self: self.path / layout.SPEC)
    trainer_log = property(lambda self: self.path / layout.LOGS / layout.TRAINER_LOG)
    slurm_file = property(lambda self: self.path / layout.SLURM)

    def file(self, name: str) -> Path:
        """A file of the layout by its constant (layout.CONFIG, ...)."""
        return self.path / name

    def exists(self) -> bool:
        return layout.is_run_dir(self.path)

    def stored_args(self) -> dict[str, Any] | None:
        """The args of the spec this run dir last executed (the resume check compares with them)."""
        return read_json(self.path / layout.ARGS)

    def read(self, name: str, default: Any = None) -> Any:
        """One reader for the run dir's JSON and YAML files (None/default when absent or unreadable)."""
        path = self.path / name
        if name.endswith((".yaml", ".yml")):
            import yaml

            try:
                return yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            except (OSError, ValueError, yaml.YAMLError):
                return default
        return read_json(path, default)

    def write_spec(self, spec: StoredSpec) -> None:
        """What the run is: spec.json (what `exec` runs) and its views for people and diff/compare."""
        import yaml

        for d in (self.checkpoints, self.logs, self.tensorboard, self.wandb):
            d.mkdir(parents=True, exist_ok=True)
        cmd = spec.slime_command()
        spec.write(self.path)
        atomic_write(self.path / layout.CONFIG, yaml.safe_dump(spec.config, sort_keys=False))
        atomic_write(self.path / layout.OVERRIDES, yaml.safe_dump(list(spec.overrides)))
        atomic_write(self.path / layout.ARGS, json.dumps(spec.args, indent=1, sort_keys=True, default=str) + "\n")
        atomic_write(self.path / layout.PROVENANCE, json.dumps(spec.arg_sources, indent=1, sort_keys=True) + "\n")
        atomic_write(self.path / layout.CHOICES, json.dumps(spec.choices, indent=1, sort_keys=True) + "\n")
        atomic_write(self.path / layout.COMMAND, json.dumps({"run_id": spec.run_id, "name": spec.name,
                                                             **cmd.to_json()}, indent=2, sort_keys=True) + "\n")
        atomic_write(self.path / layout.COMMAND_SH, "#!/usr/bin/env bash\n# Rendered by trainstack (secrets "
                     "redacted).\n" + cmd.shell_line() + "\n")
        os.chmod(self.path / layout.COMMAND_SH, 0o755)

    def event(self, event: str, *, refresh: bool = True, **fields: Any) -> None:
        """One line in events.jsonl, then summary.json made anew (`refresh=False`: the caller's next write,
        a status update, makes it)."""
        self.path.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"time": now_iso(), "event": event, "host": socket.gethostname(), "pid": os.getpid(),
                           **fields}, default=str)
        append_line(self.events_file, scrub(line))
        if refresh:
            self.refresh_summary()

    def events(self) -> list[dict]:
        """events.jsonl's records (a line cut by a kill, or anything not a JSON object, is skipped)."""
        try:
            lines = self.events_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return []
        out = []
        for ln in lines:
            try:
                rec = json.loads(ln)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    def status(self) -> dict[str, Any]:
        data = read_json(self.status_file, {})
        return data if isinstance(data, dict) else {}

    def update_status(self, *, refresh: bool = True, **fields: Any) -> dict[str, Any]:
        """Merge `fields` into status.json; read and write happen under one lock, so concurrent
        updates (the lifecycle and the Hub sync thread, two processes) never drop each other's keys.
        `refresh=False`: the caller makes summary.json itself (right after; a reader meanwhile sees it
        stale by its stamps and makes its own)."""
        with locked(self.path / layout.STATUS_LOCK):
            status = {**self.status(), **fields, "updated_at": now_iso()}
            atomic_write(self.status_file, json.dumps(status, indent=1, sort_keys=True, default=str) + "\n")
        if refresh:
            self.refresh_summary()
        return status

    def refresh_summary(self) -> None:
        """summary.json made anew from the run's files (run/rundir/summary.py): status and compare read it."""
        from trainstack.run.rundir.summary import refresh

        refresh(self.path)

    def metric_series(self) -> dict[str, list[tuple[float, float]]]:
        """metrics.jsonl as {metric: [(step, value)]}, one value per step (the last written wins: a
        resumed run redoes the rollouts after its checkpoint)."""
        from trainstack.metrics import jsonl

        return jsonl.read(self.path)

    def last_metrics(self) -> tuple[dict[str, float], list[float]]:
        """(value at the last step of each metric, rollout/raw_reward per rollout step), deduplicated by step."""
        series = self.metric_series()
        latest = {name: pts[-1][1] for name, pts in series.items() if pts}
        return latest, [v for _, v in series.get("rollout/raw_reward", [])]
