"""What a complete checkpoint is, and which one a run resumes from: defined once, used by the
orchestrator (resume plan, status, Hub sync) and by the tiny trainer.

slime's layout under `--save` (Megatron's):

    latest_checkpointed_iteration.txt            the tracker: the commit point slime loads from
    iter_XXXXXXX/                                one checkpoint per saved rollout
    rollout/global_dataset_state_dict_N.pt       the data cursor of rollout N

Completeness (docs/resume.md):
- A checkpoint with a manifest (`iter_*/manifest.json`, written after every other file and before
  the tracker: the tiny trainer writes one, the fenced tracker write adds one to each Megatron
  checkpoint it publishes, trainstack/fencing/tracker_fence.py) is complete only if every file it lists
  exists with the recorded size (and, verified, the recorded SHA-256). The manifest also carries
  the training identity the checkpoint was trained under (`identity`, from `<save>/identity.json`),
  so a changed config is refused even when the run's own records are gone.
- Verified (the resume plan, the tiny trainer's loader): no manifest is a failed verification.
- Unverified (`status`, Hub sync): without a manifest, Megatron's own last-written files decide
  (`.metadata` for torch_dist, `common.pt`), plus the data cursor when the run uses the global dataset.

The tracker names the only *published* checkpoint. Anything newer is unpublished (a writer died,
or was fenced, between writing it and updating the tracker) and is never loaded. When the
published checkpoint is not complete (a truncated or deleted file), or the tracker is gone, the
newest complete older checkpoint is used instead: `plan_recovery` says which files to move aside
and what the tracker must say, so the trainer loads exactly what the resume plan read.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

from trainstack.storage.layout import (
    CHECKPOINT_IDENTITY, DATA_CURSOR, INCOMPLETE_DIR, LOAD_FAILURES, MANIFEST, PUBLISH_LOG, TRACKER, iter_name)

# Megatron writes these last inside an iter dir (torch_dist: .metadata; torch: common.pt).
MEGATRON_MARKERS = ((".metadata",), ("common.pt",))
# Tiny checkpoints written before manifests existed: meta.json was written last.
LEGACY_TINY_MARKER = ("meta.json", "model.pt")
# ...and what such a checkpoint needs besides (the tiny trainer always saves these).
TINY_REQUIRED = ("optimizer.pt", "scheduler.pt", "rng.pt")
_ITER_RE = re.compile(r"^iter_(\d{7,})$")
_STAGING_RE = re.compile(r"^\.iter_\d{7,}\.staging\.")  # the tiny trainer's save in progress

__all__ = ["TRACKER", "iter_name", "Manifest", "CheckpointState", "is_complete", "problem_of", "inspect",
           "plan_recovery", "Recovery", "data_cursor", "move_aside", "published", "Published", "read_identity",
           "record_load_failure", "load_failures", "discard_all"]


def data_cursor(rollout_id: int) -> str:
    """The data cursor of a rollout, relative to the save dir (slime's name)."""
    return DATA_CURSOR.format(rollout_id=rollout_id)


@dataclass(frozen=True)
class Manifest:
    """Every file a checkpoint needs (paths relative to the save dir) with its size in bytes."""

    rollout_id: int
    files: dict[str, int]
    writer: str = ""  # who wrote the checkpoint (trainstack-tiny/1, megatron)
    epoch: int | None = None  # the lease epoch of the writer (fencing, docs/resume.md)
    sha256: dict[str, str] = field(default_factory=dict)  # content hashes (verified by the resume plan)
    identity: dict[str, Any] | None = None  # what it was trained under: {run_id, args, inputs} (identity.json)

    def to_json(self) -> str:
        body: dict[str, Any] = {"rollout_id": self.rollout_id, "files": self.files, "writer": self.writer,
                                "epoch": self.epoch, "sha256": self.sha256}
        if self.identity is not None:
            body["identity"] = self.identity
        return json.dumps(body, indent=1, sort_keys=True, default=str) + "\n"

    @classmethod
    def read(cls, save_dir: str, rollout_id: int) -> "Manifest | None":
        """The manifest of iter_N; None when there is none. Raises ValueError when it is unreadable."""
        path = os.path.join(save_dir, iter_name(rollout_id), MANIFEST)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as ex:
            raise ValueError(f"{MANIFEST} unreadable ({ex})") from None
        try:
            files = {str(k): int(v) for k, v in data["files"].items()}
            identity = data.get("identity")
            return cls(rollout_id=int(data["rollout_id"]), files=files, writer=str(data.get("writer", "")),
                       epoch=data.get("epoch"), sha256=dict(data.get("sha256") or {}),
                       identity=identity if isinstance(identity, dict) else None)
        except (KeyError, TypeError, ValueError, AttributeError) as ex:
            raise ValueError(f"{MANIFEST} malformed ({ex})") from None

    @classmethod
    def of_files(cls, save_dir: str, rollout_id: int, rel_paths: list[str], writer: str,
                 epoch: int | None = None, sha256: dict[str, str] | None = None,
                 identity: dict[str, Any] | None = None) -> "Manifest":
        return cls(rollout_id, {p: os.path.getsize(os.path.join(save_dir, p)) for p in sorted(rel_paths)}, writer,
                   epoch, dict(sha256 or {}), identity)

    def problem(self, save_dir: str, verify: bool = False) -> str | None:
        """Why the files are not what was written. `verify`: also compare content hashes (a
        same-size corruption, or a superseded writer's in-place rewrite); reads every file once."""
        for rel, size in self.files.items():
            try:
                actual = os.path.getsize(os.path.join(save_dir, rel))
            except OSError:
                return f"{rel} is missing"
            if actual != size:
                return f"{rel} has {actual} bytes, the manifest says {size} (truncated or rewritten)"
        if verify:
            for rel, want in sorted(self.sha256.items()):
                try:
                    got = file_sha256(os.path.join(save_dir, rel))
                except OSError as ex:
                    return f"{rel} is unreadable ({ex.strerror or ex})"
                if got != want:
                    return f"{rel} does not match its checksum in the manifest (corrupted or rewritten in place)"
        return None


def file_sha256(path: str) -> str:
    """SHA-256 of a file (hardware-accelerated on x86 with SHA-NI: see docs/benchmarks.md)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def problem_of(save_dir: str, rollout_id: int, needs_cursor: bool = False, verify: bool = False) -> str | None:
    """Why iter_N is not a complete checkpoint, or None when it is (THE completeness test).
    `verify`: check content hashes too, and refuse a checkpoint without a manifest (the resume plan
    and the tiny trainer's loader do; `status` only checks sizes)."""
    d = os.path.join(save_dir, iter_name(rollout_id))
    try:
        names = set(os.listdir(d))
    except OSError:
        return f"{iter_name(rollout_id)} is missing"
    if MANIFEST in names:
        try:
            manifest = Manifest.read(save_dir, rollout_id)
        except ValueError as ex:
            return f"{iter_name(rollout_id)}/{ex}"
        assert manifest is not None
        cursor = data_cursor(rollout_id)
        if needs_cursor and cursor not in manifest.files and not os.path.exists(os.path.join(save_dir, cursor)):
            return f"its data cursor {cursor} is missing (the data would restart from the beginning)"
        return manifest.problem(save_dir, verify)
    if verify:
        return (f"{iter_name(rollout_id)} has no {MANIFEST}, so its files cannot be verified (deleted, or a "
                "checkpoint no trainstack writer published)")
    if any(all(m in names for m in marker) for marker in MEGATRON_MARKERS):
        if needs_cursor and not os.path.exists(os.path.join(save_dir, data_cursor(rollout_id))):
            return f"its data cursor {data_cursor(rollout_id)} is missing (the data would restart from the beginning)"
        return None
    if all(m in names for m in LEGACY_TINY_MARKER):  # a tiny checkpoint whose manifest is gone
        try:
            with open(os.path.join(save_dir, iter_name(rollout_id), "meta.json"), encoding="utf-8") as f:
                listed = json.load(f).get("files")
        except (OSError, ValueError, AttributeError) as ex:
            return f"{iter_name(rollout_id)} has no manifest and its meta.json is unreadable ({ex})"
        required = [str(n) for n in listed] if isinstance(listed, list) else list(TINY_REQUIRED)  # older: all
        missing = [m for m in required if m not in names]
        if needs_cursor and not os.path.exists(os.path.join(save_dir, data_cursor(rollout_id))):
            missing.append(data_cursor(rollout_id))
        if missing:
            return (f"{iter_name(rollout_id)} has no manifest and lacks {', '.join(missing)} "
                    "(it would load fresh optimizer, RNG or data state)")
        return None
    return f"{iter_name(rollout_id)} has no manifest and no completion marker (killed while saving)"


def is_complete(save_dir: str, rollout_id: int, needs_cursor: bool = False, verify: bool = False) -> bool:
    return problem_of(save_dir, rollout_id, needs_cursor, verify) is None


def _listing(save_dir: str) -> tuple[list[int], list[str]]:
    """(iter_N numbers newest first, staging leftovers of killed tiny saves) in one directory read."""
    try:
        names = os.listdir(save_dir)
    except OSError:
        return [], []
    iters = sorted((int(m.group(1)) for n in names if (m := _ITER_RE.match(n))), reverse=True)
    leftovers = sorted(n for n in names if _STAGING_RE.match(n))
    cursors = os.path.dirname(data_cursor(0))
    if cursors in names:  # data cursors staged by killed tiny saves
        try:
            leftovers += sorted(f"{cursors}/{n}" for n in os.listdir(os.path.join(save_dir, cursors))
                                if ".staging." in n)
        except OSError:
            pass
    return iters, leftovers


def iterations(save_dir: str) -> list[int]:
    """Every iter_N directory under the save dir, newest first."""
    return _listing(save_dir)[0]


def read_tracker(save_dir: str) -> str | None:
    try:
        with open(os.path.join(save_dir, TRACKER), encoding="utf-8") as f:
            return f.read().strip()
    except UnicodeDecodeError:  # garbage bytes: a tracker that names nothing
        return "<not text>"
    except OSError:
        return None


@dataclass(frozen=True)
class Published:
    """What publish.jsonl says: the newest publish of the highest lease epoch (the current writer's)."""

    iteration: int
    epoch: int


def published(save_dir: str) -> Published | None:
    """The authority for which checkpoint is current when the tracker and the log disagree: a
    superseded writer whose tracker rename stalled past its lease can still land that rename (and
    append its line) after the next epoch's publishes, but it can never raise the highest epoch."""
    best: tuple[int, int] | None = None  # (epoch, iteration) of the last line of the highest epoch
    try:
        with open(os.path.join(save_dir, PUBLISH_LOG), encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                    it, ep = int(rec["iter"]), rec.get("epoch")
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line of a killed writer
                if not isinstance(ep, int):
                    continue  # a save without a lease (tests, a bare trainer): no epoch to order by
                if best is None or ep >= best[0]:
                    best = (ep, it)
    except OSError:
        return None
    return None if best is None else Published(best[1], best[0])


def manifest_epoch(save_dir: str, rollout_id: int) -> int | None:
    try:
        m = Manifest.read(save_dir, rollout_id)
    except ValueError:
        return None
    return m.epoch if m is not None and isinstance(m.epoch, int) else None


def authority(save_dir: str, tracker: int | None) -> tuple[int | None, str]:
    """(the iteration the plan trusts, why it is not the tracker's). The tracker is followed unless
    it is behind the newest publish of the highest lease epoch in publish.jsonl: that is a superseded
    writer's late rename (it stalled past its lease between its last fence check and the rename),
    repaired and never followed, so nothing the current epoch published is moved aside. A tracker
    ahead of the log is followed (a publish whose log line was not written yet, a Hub restore)."""
    pub = published(save_dir)
    if pub is None or (tracker is not None and tracker >= pub.iteration):
        return tracker, ""
    what = "is missing" if tracker is None else f"names {iter_name(tracker)}"
    if tracker is not None and (ep := manifest_epoch(save_dir, tracker)) is not None:
        what += f" (written under lease epoch {ep})"
    return pub.iteration, (f"the tracker {what}, but lease epoch {pub.epoch} published {iter_name(pub.iteration)} "
                           "last (a superseded writer's late tracker rename): repaired from publish.jsonl")


@dataclass(frozen=True)
class CheckpointState:
    save_dir: str
    tracker: int | None  # what the tracker names (None: absent or not a number)
    latest_complete: int | None  # the checkpoint a resume loads (after recovery, if one is needed)
    problem: str = ""  # what is wrong with what the tracker names, if anything
    unpublished: tuple[int, ...] = ()  # iter dirs newer than latest_complete: never loaded, moved aside
    leftovers: tuple[str, ...] = ()  # staging dirs of killed saves: moved aside
    load_failed: tuple[int, ...] = ()  # checkpoints the trainer failed to load since the last publish

    @property
    def resumable(self) -> bool:
        return self.latest_complete is not None

    @property
    def needs_recovery(self) -> bool:
        return bool(self.unpublished or self.leftovers) or self.tracker != self.latest_complete


def writes_cursors(save_dir: str) -> bool:
    """Whether this run's writer saves data cursors (slime with the global dataset does)."""
    try:
        with os.scandir(os.path.join(save_dir, os.path.dirname(data_cursor(0)))) as it:
            return any(e.is_file() for e in it)
    except OSError:
        return False


def inspect(save_dir: str, needs_cursor: bool | None = None, verify: bool = False) -> CheckpointState:
    """The checkpoint a resume loads: the tracker's when it is complete, else the newest complete
    older one. `needs_cursor` (default: when the writer saves cursors at all) makes a Megatron
    checkpoint without its data cursor incomplete. One directory listing plus one manifest read
    when all is well."""
    if needs_cursor is None:
        needs_cursor = writes_cursors(save_dir)
    text = read_tracker(save_dir)
    tracker = int(text) if text is not None and text.isdigit() else None
    iters, leftovers = _listing(save_dir)
    if text is None and not iters:
        return CheckpointState(save_dir, None, None, leftovers=tuple(leftovers))
    trusted, problem = authority(save_dir, tracker)
    if not problem and text is not None and tracker is None:
        problem = f"the tracker holds {text[:40]!r}, not an iteration number"
    elif not problem and tracker is None:
        problem = "the tracker file is missing"
    failed = load_failures(save_dir)  # published, verified, and still the trainer could not load them
    why = None if trusted is None else problem_of(save_dir, trusted, needs_cursor, verify)
    if trusted is not None and why is None and trusted in failed:
        why = f"the trainer failed to load it ({failed[trusted][:200]}); set aside once, never loaded again"
    if trusted is not None and why is not None:
        problem = (problem + "; " if problem else "") + f"{iter_name(trusted)} is not complete: {why}"
        if trusted == tracker:
            problem = f"the tracker names {iter_name(tracker)}, which is not complete: {why}"
    if not problem:
        latest: int | None = tracker
    else:
        latest = next((n for n in iters if (trusted is None or n <= trusted) and n not in failed
                       and is_complete(save_dir, n, needs_cursor, verify)), None)
    newer = tuple(n for n in iters if latest is None or n > latest)
    return CheckpointState(save_dir, tracker, latest, problem, newer, tuple(leftovers), tuple(sorted(failed)))


def _last_publish_time(save_dir: str) -> float:
    last = 0.0
    try:
        with open(os.path.join(save_dir, PUBLISH_LOG), encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    last = max(last, float(json.loads(line)["time"]))
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        pass
    return last


def load_failures(save_dir: str) -> dict[int, str]:
    """{iteration: error} of the checkpoints the trainer failed to load since the last publish (a
    publish after a failure means training went on from an older one: the failure is history)."""
    since = _last_publish_time(save_dir)
    out: dict[int, str] = {}
    try:
        with open(os.path.join(save_dir, LOAD_FAILURES), encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                    it, when = int(rec["iter"]), float(rec["time"])
                except (ValueError, KeyError, TypeError):
                    continue
                if when >= since:
                    out[it] = str(rec.get("error", ""))
    except OSError:
        pass
    return out


def record_load_failure(save_dir: str, iteration: int, error: str) -> None:
    """Called by a trainer whose load of a published checkpoint raised: the next plan sets it aside
    and resumes from the previous intact one (once: a second failure in a row stops the run)."""
    line = json.dumps({"iter": int(iteration), "error": error[:2000], "pid": os.getpid(), "time": time.time()})
    with open(os.path.join(save_dir, LOAD_FAILURES), "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_identity(save_dir: str) -> dict[str, Any] | None:
    """`<save>/identity.json`: what the run trains, written by the launcher before the trainer starts;
    writers copy it into every manifest (None: absent or unreadable)."""
    try:
        with open(os.path.join(save_dir, CHECKPOINT_IDENTITY), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_identity(save_dir: str, identity: dict[str, Any]) -> None:
    os.makedirs(save_dir, exist_ok=True)
    path = os.path.join(save_dir, CHECKPOINT_IDENTITY)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(identity, indent=1, sort_keys=True, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def checkpoint_identity(save_dir: str, rollout_id: int) -> dict[str, Any] | None:
    """The identity a checkpoint's manifest carries (None: none recorded, an older writer)."""
    try:
        m = Manifest.read(save_dir, rollout_id)
    except ValueError:
        return None
    return m.identity if m is not None else None


def discard_all(save_dir: str) -> list[str]:
    """resume.mode=fresh: move every checkpoint and its records aside (kept under INCOMPLETE_DIR),
    so the run starts from zero and no reader mistakes the old ones for its own."""
    iters, leftovers = _listing(save_dir)
    cursors = os.path.dirname(data_cursor(0))
    names = [iter_name(n) for n in iters] + [n for n in leftovers if "/" not in n]
    names += [TRACKER, PUBLISH_LOG, LOAD_FAILURES, cursors]
    return move_aside(save_dir, names)


@dataclass(frozen=True)
class Recovery:
    """What makes the save dir say exactly what the resume plan read."""

    move_aside: tuple[str, ...]  # iter dirs (names) moved under INCOMPLETE_DIR, never deleted
    tracker: int | None  # the tracker's new value (None: remove it: nothing complete is left)

    def apply(self, save_dir: str) -> list[str]:
        """Move aside, then rewrite the tracker (atomically). Returns where things went."""
        moved = move_aside(save_dir, list(self.move_aside))
        tracker = os.path.join(save_dir, TRACKER)
        if self.tracker is None:
            moved += move_aside(save_dir, [TRACKER])
        else:
            tmp = f"{tracker}.tmp.{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(str(self.tracker))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, tracker)
        return moved


def move_aside(save_dir: str, names: list[str]) -> list[str]:
    """Move entries of the save dir under INCOMPLETE_DIR with a unique suffix; never delete."""
    moved = []
    stamp = f"{time.strftime('%Y%m%dT%H%M%S')}.{os.getpid()}"
    for name in names:
        src = os.path.join(save_dir, name)
        if not os.path.lexists(src):
            continue
        os.makedirs(os.path.join(save_dir, INCOMPLETE_DIR), exist_ok=True)
        dst = os.path.join(save_dir, INCOMPLETE_DIR, f"{name.replace('/', '__')}.{stamp}")
        os.replace(src, dst)
        moved.append(dst)
    return moved


def plan_recovery(state: CheckpointState) -> Recovery | None:
    """None when the save dir already says what a resume should load."""
    if not state.needs_recovery:
        return None
    return Recovery(move_aside=tuple(iter_name(n) for n in state.unpublished) + state.leftovers,
                    tracker=state.latest_complete)
