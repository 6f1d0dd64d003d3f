"""Resume from the Hub: find the run's newest pushed checkpoint (the pointer), download only its files
at the commit the pointer names, check them against the sizes recorded at push time, move them into
--save and write slime's tracker last.

`lookup` is what the resume plan asks (no download: it also runs on a submit host); `materialize`
is what the lifecycle does with the run's lease held, before the trainer starts; `install` is shared
with `trainstack hub pull`.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.hub import layout
from trainstack.storage.checkpoints import is_complete as checkpoint_complete
from trainstack.storage.layout import HUB_RESTORE, TRACKER, iter_name

DOWNLOAD_ATTEMPTS = 5


@dataclass
class HubState:
    """What the Hub holds of a run, as the resume plan saw it."""

    repo_id: str
    record: dict[str, Any] | None  # the pointer: the newest pushed checkpoint's manifest (None: none pushed)
    commit: str | None  # the branch commit the pointer was read at

    source = "hub"  # a resume plan's source when this checkpoint wins (trainstack.hooks.RemoteCheckpoint)

    @property
    def latest(self) -> int | None:
        return int(self.record["iteration"]) if self.record else None

    @property
    def where(self) -> str:
        return f"the Hub ({self.repo_id})"

    @property
    def where_at(self) -> str:
        return f"the Hub ({self.describe()})"

    def describe(self) -> str:
        return f"{self.repo_id}@{(self.commit or '')[:12]}"


def _valid(record: Any, run_id: str) -> bool:
    return (isinstance(record, dict) and record.get("run_id") == run_id and isinstance(record.get("iteration"), int)
            and isinstance(record.get("files"), dict) and isinstance(record.get("files_commit"), str))


def lookup(run: Any, local_latest: int | None, dry: bool = False) -> HubState | None:
    """The Hub's view of the run when Hub restore is on (None when it is off, and for a dry run
    unless it has hub.dry_run_lookup=true: a dry run reads nothing over the network unless asked).
    Unreachable Hub: the run dir's checkpoint is used when there is one, else the launch is refused
    (a fresh start could throw away what the Hub holds)."""
    hub = getattr(run, "hub", None)
    if hub is None or not hub.enabled or not hub.restore or (dry and not hub.dry_run_lookup):
        return None
    from trainstack.hub.client import HubClient, describe_error

    try:
        record, commit = HubClient(hub.repo_id, private=hub.private).read_pointer(run.run_id)
    except Exception as ex:  # noqa: BLE001 - any client or network failure means "the Hub did not answer"
        err = describe_error(ex)
        if local_latest is not None:
            print(f"trainstack: hub: cannot read {hub.repo_id} ({err}); resuming from the run dir's "
                  f"{iter_name(local_latest)}", file=sys.stderr, flush=True)
            return None
        raise ConfigErrors([ConfigError(
            "hub.repo_id", f"cannot read run {run.run_id}'s checkpoint pointer from the Hub ({err}) and the run dir "
            "has no checkpoint; starting fresh could redo what the Hub holds", "retry once the Hub answers (check "
            "HF_ENDPOINT and HF_TOKEN / `hf auth login`), or relaunch with hub.restore=false to start without the "
            "Hub's checkpoints", value=hub.repo_id, source=run.run_dir)]) from None
    if record is not None and not _valid(record, run.run_id):
        raise ConfigErrors([ConfigError(
            "hub.repo_id", f"{layout.pointer(run.run_id)} on the Hub is not a trainstack checkpoint pointer of run "
            f"{run.run_id}", "fix or delete that file on the Hub, or relaunch with hub.restore=false",
            value=hub.repo_id, source=f"{hub.repo_id}@{commit}")])
    return HubState(hub.repo_id, record, commit)


def install(client: Any, run_id: str, record: dict[str, Any], save_dir: str | Path,
            write_tracker: bool = True) -> tuple[int, int]:
    """Download one pushed checkpoint into save_dir (staged, size-checked, moved into place, tracker
    last). Returns (files, bytes); raises RuntimeError with the reason when anything does not match."""
    save = Path(save_dir)
    n = int(record["iteration"])
    staging = save / HUB_RESTORE
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    files: dict[str, int] = {str(k): int(v) for k, v in record["files"].items()}
    try:
        for rel, size in sorted(files.items()):
            got = _download(client, layout.in_run(run_id, rel), record["files_commit"], staging)
            if got.stat().st_size != size:
                raise RuntimeError(f"{rel}: {got.stat().st_size} bytes on the Hub, {size} recorded when it was pushed")
        root = staging / run_id
        for top in sorted({rel.split("/", 1)[0] for rel in files if "/" in rel} - {layout.DATA_CURSOR_DIR}):
            dest = save / top
            if dest.exists():  # a partial or older copy of the same iteration: replaced as a whole
                shutil.rmtree(dest) if dest.is_dir() else dest.unlink()
            os.replace(root / top, dest)
        for rel in files:
            if rel.startswith(layout.DATA_CURSOR_DIR + "/"):
                (save / rel).parent.mkdir(parents=True, exist_ok=True)
                os.replace(root / rel, save / rel)
        if not checkpoint_complete(str(save), n):
            raise RuntimeError(f"{iter_name(n)} is not a complete checkpoint after the download")
        if write_tracker:
            tmp = save / f".{TRACKER}.hub.tmp"
            tmp.write_text(str(n))
            os.replace(tmp, save / TRACKER)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return len(files), sum(files.values())


def _download(client: Any, path: str, revision: str, staging: Path) -> Path:
    delay = 1.0
    for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
        try:
            return client.download(path, revision, str(staging))
        except Exception:
            from huggingface_hub.errors import EntryNotFoundError, RevisionNotFoundError

            if attempt == DOWNLOAD_ATTEMPTS or isinstance(sys.exc_info()[1], (EntryNotFoundError,
                                                                              RevisionNotFoundError)):
                raise
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def materialize(spec: Any, rundir: Any, state: HubState) -> None:
    """Bring the Hub's checkpoint into the run dir before the trainer starts (the lease is held)."""
    from trainstack.hub.client import HubClient, describe_error

    assert state.record is not None
    save = spec.args.get("save") or str(rundir.checkpoints)
    t0 = time.monotonic()
    n = state.latest
    print(f"trainstack: hub: downloading {iter_name(n or 0)} of {spec.run_id} from {state.describe()}",
          file=sys.stderr, flush=True)
    try:
        count, size = install(HubClient(state.repo_id, private=spec.hub.private), spec.run_id, state.record, save)
    except Exception as ex:  # noqa: BLE001 - reported as one clear refusal, nothing started
        raise ConfigErrors([ConfigError(
            "hub.repo_id", f"could not restore {iter_name(n or 0)} of run {spec.run_id} from the Hub: "
            f"{describe_error(ex)}", "retry once the Hub answers, or relaunch with hub.restore=false to resume from "
            "the run dir / start fresh", value=state.repo_id, source=state.describe())]) from None
    rundir.event("hub_restore", repo_id=state.repo_id, iteration=n, commit=state.commit,
                 files_commit=state.record["files_commit"], files=count, bytes=size,
                 seconds=round(time.monotonic() - t0, 3), pushed_by=state.record.get("host"))
    hub_status = dict(rundir.status().get("hub") or {})
    hub_status.update(repo_id=state.repo_id, last_pushed=n, commit=state.commit,
                      files_commit=state.record["files_commit"], restored=n)
    rundir.update_status(hub=hub_status)
