"""Helpers for the Hub tests: checkpoints written the way the tiny trainer writes them, a run spec
with Hub sync on, and the invariant every commit on the (fake) Hub must keep."""
from __future__ import annotations

import json
import os
from pathlib import Path

from trainstack.storage.layout import TRACKER, iter_name


def write_checkpoint(save: Path, n: int, payload: bytes | None = None, complete: bool = True,
                     tracker: bool = True) -> dict[str, bytes]:
    """iter_N in the tiny trainer's order (weights, optimizer, ... meta.json last), its data cursor,
    then the tracker. An incomplete one stops before meta.json and leaves the tracker alone.
    Returns {path relative to --save: content} of what was written."""
    d = save / iter_name(n)
    d.mkdir(parents=True, exist_ok=True)
    files = {f"{iter_name(n)}/model.pt": payload or os.urandom(2048 + n),
             f"{iter_name(n)}/optimizer.pt": os.urandom(1024), f"{iter_name(n)}/rng.pt": os.urandom(64),
             f"{iter_name(n)}/scheduler.pt": os.urandom(48)}
    if complete:
        files[f"rollout/global_dataset_state_dict_{n}.pt"] = os.urandom(32)
        files[f"{iter_name(n)}/meta.json"] = json.dumps({"rollout_id": n}).encode()
    for rel, data in files.items():
        p = save / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    if complete and tracker:
        (save / TRACKER).write_text(str(n))
    return files


def make_spec(tmp: Path, *overrides: str):
    """A real RunSpec (composed from conf/) whose run dir is under tmp, with Hub sync on."""
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.run.spec import RunSpec

    run, cmd = build_from_overrides([f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data",
                                     "hub.repo_id=team/ckpts", *overrides])
    return RunSpec.from_run(run, cmd)


def pointer_checker(run_id: str, truth: dict[int, dict[str, bytes]], violations: list[str]):
    """A fake-Hub commit hook: after EVERY commit, the run's pointer (if any) must name a checkpoint whose
    files exist at the commit it names, with the recorded sizes and exactly the bytes the trainer wrote,
    and that checkpoint must be complete (its meta.json pushed)."""
    def check(repo, commit) -> None:
        raw = commit.files.get(f"{run_id}/latest.json")
        if raw is None:
            return
        rec = json.loads(raw)
        n = rec["iteration"]
        at = repo.commits.get(rec["files_commit"])
        if at is None:
            violations.append(f"{commit.sha[:8]}: pointer -> iter {n} names unknown commit {rec['files_commit']}")
            return
        if f"{iter_name(n)}/meta.json" not in rec["files"]:
            violations.append(f"{commit.sha[:8]}: pointer names iter {n} without its meta.json (incomplete)")
        for rel, size in rec["files"].items():
            data = at.files.get(f"{run_id}/{rel}")
            if data is None or len(data) != size:
                violations.append(f"{commit.sha[:8]}: pointer -> iter {n}: {rel} missing or wrong size at files_commit")
            elif n in truth and truth[n].get(rel) != data:
                violations.append(f"{commit.sha[:8]}: pointer -> iter {n}: {rel} differs from what was written")
        if n in truth and set(truth[n]) != set(rec["files"]):
            violations.append(f"{commit.sha[:8]}: pointer -> iter {n} lists {sorted(rec['files'])}, "
                              f"the checkpoint has {sorted(truth[n])}")
    return check


def events(run_dir: Path) -> list[dict]:
    p = Path(run_dir) / "events.jsonl"
    return [json.loads(ln) for ln in p.read_text().splitlines() if ln.strip()] if p.exists() else []
