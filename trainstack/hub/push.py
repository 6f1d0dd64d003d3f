"""Push one complete checkpoint so that a reader never sees a partial one.

Order: the checkpoint's files (read in place; the client splits huge folders into several commits),
then its --save-hf export and new rollout trajectories, then ONE commit with the pointer
(`<run_id>/latest.json`), the checkpoint's manifest and the run spec. The pointer names the commit
whose tree holds the files (`files_commit`, immutable) and their sizes, so a reader downloads
exactly what was pushed even if the branch moves on. The pointer commit is made against the branch
head it was decided on (`parent_commit`): if another writer committed in between it is re-read,
and a pointer never moves to an iteration at or below the one the Hub already names. The process
must still hold the run (fence) before every step.
"""
from __future__ import annotations

import glob
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trainstack.fencing.fence import Epoch, Fenced
from trainstack.hub import layout
from trainstack.hub.client import HubClient, StalePointer
from trainstack.run.rundir import now_iso
from trainstack.storage.layout import iter_name

MANIFEST_FORMAT = 1
HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
HF_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


class ChangedDuringUpload(Exception):
    """A file of the checkpoint changed size while it was uploaded (it is pushed again)."""


@dataclass
class PushJob:
    run_id: str
    iteration: int
    save_dir: str
    lease_epoch: Epoch  # the run-dir lease's epoch this push runs under (recorded in the pointer)
    args: dict[str, Any]  # the training config, for the resume check of whoever restores it
    inputs: dict[str, Any] | None = None  # input paths + content fingerprints (trainstack/config/input_identity.py)
    spec_json: bytes | None = None
    hf_template: str | None = None  # --save-hf
    rollout_template: str | None = None  # --save-debug-rollout-data, when hub.push_rollouts
    keep: int | None = None
    host: str = ""


@dataclass
class PushResult:
    iteration: int
    commit: str | None = None  # the pointer commit (None: nothing committed)
    files_commit: str | None = None
    files: int = 0
    bytes: int = 0
    hf_commit: str | None = None
    hf_missing: bool = False  # --save-hf is set but the export of this save was not complete
    rollouts: list[str] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    skipped: str | None = None  # why nothing was committed
    seconds: float = 0.0


def _sizes(root: Path, rels: list[str]) -> dict[str, int]:
    return {rel: (root / rel).stat().st_size for rel in rels}


def checkpoint_files(save_dir: str, iteration: int) -> dict[str, int]:
    """The files of one save, relative to --save: `iter_N/**` and its data cursor."""
    root = Path(save_dir)
    d = root / iter_name(iteration)
    rels = sorted(str(p.relative_to(root).as_posix()) for p in d.rglob("*") if p.is_file())
    if (root / layout.data_cursor(iteration)).is_file():
        rels.append(layout.data_cursor(iteration))
    return _sizes(root, rels)


def hf_export_files(path: str | Path) -> dict[str, int] | None:
    """The files of a complete --save-hf directory (config.json and every weight file it needs), else None."""
    d = Path(path)
    if not (d / "config.json").is_file():
        return None
    for index in HF_INDEXES:
        if (d / index).is_file():
            try:
                shards = set(json.loads((d / index).read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError, AttributeError):
                return None
            if not all((d / s).is_file() for s in shards):
                return None
            break
    else:
        if not any((d / w).is_file() for w in HF_WEIGHTS):
            return None
    rels = sorted(str(p.relative_to(d).as_posix()) for p in d.rglob("*") if p.is_file() and ".tmp." not in p.name)
    return _sizes(d, rels)


def rollout_root_and_pattern(template: str) -> tuple[Path, re.Pattern[str]]:
    """The fixed directory of a `{rollout_id}` template and a regex for the paths below it."""
    head = template.split("{", 1)[0]
    root = Path(head if head.endswith(os.sep) else os.path.dirname(head) or ".")
    rel = os.path.relpath(template, root).replace(os.sep, "/")
    pattern = re.escape(rel).replace(re.escape("{rollout_id}"), r"(?P<id>(?:eval_)?\d+)")
    return root, re.compile(f"^{pattern}$")


def rollout_files(template: str, upto: int, pushed: dict[str, int]) -> tuple[Path, dict[str, int]]:
    """Trajectory files of rollouts <= upto not on the Hub yet (relative to the template's directory)."""
    root, pattern = rollout_root_and_pattern(template)
    out: dict[str, int] = {}
    if not root.is_dir():
        return root, out
    for p in root.rglob("*"):
        if not p.is_file() or ".tmp." in p.name:
            continue
        rel = p.relative_to(root).as_posix()
        m = pattern.match(rel)
        if m and int(m.group("id").removeprefix("eval_")) <= upto:
            size = p.stat().st_size
            if pushed.get(rel) != size:
                out[rel] = size
    return root, out


def _patterns(files: dict[str, int]) -> list[str]:
    """upload_folder's allow patterns naming exactly these files (glob characters escaped)."""
    return [glob.escape(rel) for rel in sorted(files)]


def _check(fence: Callable[[], bool]) -> None:
    if not fence():
        raise Fenced("this process no longer holds the run's lease: nothing more is pushed")


def push_checkpoint(client: HubClient, job: PushJob, fence: Callable[[], bool],
                    pushed_rollouts: dict[str, int] | None = None) -> PushResult:
    """Push `job.iteration`; raises on any failure (the caller retries), Fenced when the run was lost."""
    t0 = time.monotonic()
    res = PushResult(job.iteration)
    run, n = job.run_id, job.iteration
    _check(fence)
    client.ensure_repo()
    current, _ = client.read_pointer(run)
    if current is not None and int(current.get("iteration", -1)) >= n:
        res.skipped = f"the Hub already has iter {current['iteration']}"
        return res
    files = checkpoint_files(job.save_dir, n)
    _check(fence)
    res.files_commit = client.upload_folder(job.save_dir, run, allow=_patterns(files), message=f"{run}: {iter_name(n)}")
    res.files, res.bytes = len(files), sum(files.values())
    hf: dict[str, Any] | None = None
    if job.hf_template:
        hf_dir = job.hf_template.format(rollout_id=n)
        hf_files = hf_export_files(hf_dir)
        if hf_files is None:
            res.hf_missing = True
        else:
            _check(fence)
            res.hf_commit = client.upload_folder(hf_dir, layout.hf_export(run, n), allow=_patterns(hf_files),
                                                 message=f"{run}: {iter_name(n)} (HF format)")
            hf = {"path": layout.hf_export(run, n), "files": hf_files, "commit": res.hf_commit}
            res.bytes += sum(hf_files.values())
    if job.rollout_template and pushed_rollouts is not None:
        root, new = rollout_files(job.rollout_template, n, pushed_rollouts)
        if new:
            _check(fence)
            client.upload_folder(root, layout.in_run(run, layout.ROLLOUT_DATA), allow=_patterns(new),
                                 message=f"{run}: rollout data up to {n}")
            pushed_rollouts.update(new)
            res.rollouts = sorted(new)
    if checkpoint_files(job.save_dir, n) != files:
        raise ChangedDuringUpload(f"{iter_name(n)} changed while it was uploaded")
    record = {"format": MANIFEST_FORMAT, "run_id": run, "iteration": n, "files": files,
              "files_commit": res.files_commit, "hf": hf, "pushed_at": now_iso(), "host": job.host,
              "lease_epoch": job.lease_epoch, "args": job.args, "inputs": job.inputs}
    body = json.dumps(record, indent=1, sort_keys=True, default=str).encode()
    for _ in range(5):  # the branch may move under us (another run in the repo): decide again
        _check(fence)
        current, head = client.read_pointer(run)
        if current is not None and int(current.get("iteration", -1)) >= n:
            res.skipped = f"the Hub already has iter {current['iteration']}"
            return res
        adds = {layout.pointer(run): body, layout.manifest(run, n): body}
        if job.spec_json is not None:
            adds[layout.in_run(run, layout.SPEC)] = job.spec_json
        deletes, folders, res.deleted = _retention(client, run, n, job.keep, head)
        try:
            res.commit = client.commit(adds, deletes, folders, message=f"{run}: pointer -> {iter_name(n)}",
                                       parent=head)
            break
        except StalePointer:
            continue
    else:
        raise StalePointer("main kept moving while the pointer was committed")
    res.seconds = time.monotonic() - t0
    return res


def _retention(client: HubClient, run: str, n: int, keep: int | None, head: str | None
               ) -> tuple[list[str], list[str], list[int]]:
    """What to delete so that only the newest `keep` checkpoints stay on the branch (HF exports stay)."""
    if keep is None or head is None:
        return [], [], []
    on_hub = set()
    for e in client.ls(layout.in_run(run, layout.MANIFESTS), revision=head):
        m = layout.MANIFEST_RE.match(e.path.rsplit("/", 1)[-1])
        if m:
            on_hub.add(int(m.group(1)))
    drop = [i for i in sorted(on_hub | {n}, reverse=True)[keep:] if i != n]
    if not drop:
        return [], [], []
    cursors = {e.path for e in client.ls(layout.in_run(run, layout.DATA_CURSOR_DIR), revision=head)}
    deletes = [layout.manifest(run, i) for i in drop]
    deletes += [c for i in drop if (c := layout.in_run(run, layout.data_cursor(i))) in cursors]
    folders = [layout.in_run(run, iter_name(i)) for i in drop]
    return deletes, folders, drop
