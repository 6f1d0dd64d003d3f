"""`trainstack sync RUN`: upload a run's offline W&B runs, oldest first.

A run without a W&B key logs offline (the lifecycle sets WANDB_MODE=offline); every launch or
resume of it is one `offline-run-<time>-<id>` directory under `<run_dir>/wandb/`, all with the
run's stable W&B id. Uploading them in the order they were written makes one W&B run whose
history continues across the restarts (the trainer continues `_step`: trainstack/tiny/metrics.py);
out of order, W&B would drop the older steps. Each directory is one `wandb sync DIR` (the key comes
from this machine's environment or `wandb login`, never from argv); the first failure stops the
rest, so nothing is uploaded out of order. A directory `wandb sync` marked as synced is skipped
unless `--again`.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from trainstack.config.userconfig import default_runs_root
from trainstack.errors import ConfigError, ConfigErrors

_STAMP = re.compile(r"^offline-run-(\d{8}_\d{6})-")


def offline_dirs(run_dir: str | Path) -> list[Path]:
    """The run's offline W&B run directories in the order they were created."""
    return offline_dirs_under(Path(run_dir) / "wandb")


def offline_dirs_under(root: Path, wandb_id: str | None = None) -> list[Path]:
    """Offline W&B run directories under `root` (of one W&B id when given), oldest first: the time in
    their name, then their modification time for two made in the same second."""
    if not root.is_dir():
        return []
    found = [p for p in root.rglob("offline-run-*") if p.is_dir() and _STAMP.match(p.name)
             and (wandb_id is None or p.name.endswith(f"-{wandb_id}"))]

    def key(p: Path) -> tuple[str, float]:
        m = _STAMP.match(p.name)
        return (m.group(1) if m else "", p.stat().st_mtime)

    return sorted(found, key=key)


def next_step(root: Path, wandb_id: str) -> int:
    """The `_step` a restarted offline run continues from: one past the last step its earlier offline
    runs logged (0 for a first run), so the uploaded history is one run's, in order."""
    from trainstack.metrics.wandb_offline import read_run

    last = -1
    for d in offline_dirs_under(root, wandb_id):
        for f in d.glob("run-*.wandb"):
            try:
                steps = [r["_step"] for r in read_run(f)["history"] if isinstance(r.get("_step"), int)]
            except (OSError, ValueError):
                continue
            last = max([last, *steps])
    return last + 1


def synced(d: Path) -> bool:
    return any(d.glob("*.wandb.synced"))


def wandb_executable() -> str | None:
    """`wandb` on PATH, else the one installed beside this Python (a venv not activated)."""
    found = shutil.which("wandb")
    if found:
        return found
    beside = Path(sys.executable).parent / "wandb"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def sync_argv(exe: str, d: Path, project: str | None = None, entity: str | None = None) -> list[str]:
    return [exe, "sync", *(["--project", project] if project else []), *(["--entity", entity] if entity else []),
            str(d)]


def run_sync(target: str, runs_root: str = "runs", *, project: str | None = None, entity: str | None = None,
             again: bool = False, dry: bool = False, out=None) -> int:
    """0: every directory uploaded (or nothing to upload); 1: a `wandb sync` failed (the rest not tried)."""
    from trainstack.run.rundir.targets import bad_target, find_run

    out = out or sys.stdout
    run_dir = find_run(target, runs_root)
    if run_dir is None:
        raise ConfigErrors([bad_target(target, runs_root)])
    dirs = offline_dirs(run_dir.resolve())
    todo = [d for d in dirs if again or not synced(d)]
    if not todo:
        print(f"trainstack sync: nothing to upload for {run_dir} ({len(dirs)} offline W&B run"
              f"{'s' if len(dirs) != 1 else ''}{', all synced already (--again uploads them again)' if dirs else ''})",
              file=out)
        return 0
    exe = wandb_executable()
    if exe is None and not dry:
        raise ConfigErrors([ConfigError("wandb", "the `wandb` command is not installed on this machine",
                                        "pip install wandb (then `wandb login`, or export WANDB_API_KEY)")])
    for i, d in enumerate(todo, 1):
        argv = sync_argv(exe or "wandb", d, project, entity)
        print(f"[{i}/{len(todo)}] {' '.join(argv)}", file=out, flush=True)
        if dry:
            continue
        code = subprocess.call(argv)
        if code != 0:
            rest = len(todo) - i
            print(f"trainstack sync: `wandb sync` failed (exit {code}) for {d}"
                  + (f"; the {rest} newer one{'s' if rest != 1 else ''} not uploaded (order matters): "
                     "fix it and run `trainstack sync` again" if rest else ""), file=sys.stderr)
            return 1
    return 0


def cmd_sync(ns: argparse.Namespace) -> int:
    return run_sync(ns.run, ns.runs_root, project=ns.project, entity=ns.entity, again=ns.again, dry=ns.dry)


def add_sync(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("sync", help="upload a run's offline W&B runs to W&B, oldest first (one W&B run per run id)")
    p.add_argument("run", help="a run id (under --runs-root) or a run directory")
    p.add_argument("--runs-root", default=default_runs_root(), help="where run ids are looked up (default $TRAINSTACK_RUNS_ROOT, else ./runs)")
    p.add_argument("--project", help="upload into this W&B project instead of the one the run logged to")
    p.add_argument("--entity", help="W&B entity (team) to upload into")
    p.add_argument("--again", action="store_true", help="also the directories already synced")
    p.add_argument("--dry", action="store_true", help="print the `wandb sync` commands only")
    p.set_defaults(func=cmd_sync)

