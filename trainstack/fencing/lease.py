"""One writer per run: a lease file in the run directory, safe on shared filesystems.

Acquire = write our record to a private temp file and `link()` it to `lease.json`: link is
atomic and fails if the name exists, also over NFS (unlike O_EXCL on old clients or flock).
The holder renews the lease (heartbeat) every ttl/4 with tmp + `rename()`. A lease whose
expiry has passed can be taken over; so can one whose holder is a dead process on this host
once the trainer process group it started is gone too (a launcher killed with SIGKILL leaves its
trainer finishing a final checkpoint: the relaunch waits for it). A holder that finds another
token in `lease.json` has lost the lease; its trainer is fenced (trainstack/fencing/fence.py).
Epochs never repeat: each one is reserved in an append-only `lease.epochs` before it is linked
into `lease.json`, and a new epoch is above everything there and in publish.jsonl, so deleting
`lease.json` of a live run cannot give a relaunch the live writer's epoch.
Under the Lium commander the record also names the commander epoch it runs under, so that a
worker of a newer commander epoch takes the run dir over and one of an older epoch never does.
"""
from __future__ import annotations

import errno
import json
import os
import secrets
import socket
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from trainstack.fencing.fence import Epoch, commander_epoch
from trainstack.storage.layout import CHECKPOINTS, LEASE_EPOCHS, PUBLISH_LOG
from trainstack.procgroup import group_alive as _group_alive
from trainstack.procgroup import group_members as group_members  # re-exported: older imports keep working
from trainstack.procgroup import pid_alive as pid_alive


def hostname() -> str:
    return os.environ.get("TRAINSTACK_HOSTNAME") or socket.gethostname()


@dataclass
class LeaseRecord:
    token: str
    host: str
    pid: int
    since: float
    heartbeat: float
    expires_at: float
    ttl_s: float
    epoch: Epoch  # increases with every acquisition of this run's lease.json: a fencing number
    trainer_pgid: int | None = None  # the process group of the trainer it started (this host), if any
    commander_epoch: Epoch | None = None  # the Lium commander's epoch this holder runs under (None: no commander)

    def trainer_stopping(self) -> bool:
        """Its launcher (on this host) is dead but the trainer group it started is still finishing."""
        return bool(self.trainer_pgid) and self.host == hostname() and not pid_alive(self.pid) \
            and _group_alive(self.trainer_pgid or 0)

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        left = self.expires_at - time.time()
        group = ""
        if self.trainer_stopping():
            group = f"; its launcher is gone and its trainer (process group {self.trainer_pgid}) is stopping"
        return f"host {self.host}, pid {self.pid}, epoch {self.epoch}, since {since} (lease expires in {left:.0f} s{group})"


_FIELDS = tuple(LeaseRecord.__dataclass_fields__)


class LeaseHeld(Exception):
    def __init__(self, holder: LeaseRecord):
        self.holder = holder
        super().__init__(holder.describe())


def read_record(path: str | Path) -> LeaseRecord | None:
    """lease.json's record (None: absent or unreadable); fields it does not know are ignored."""
    return _read(Path(path))


def _read(path: Path) -> LeaseRecord | None:
    try:
        data = json.loads(path.read_text())
        return LeaseRecord(**{k: data[k] for k in _FIELDS if k in data})
    except (OSError, ValueError, TypeError, KeyError):
        return None


def is_stale(rec: LeaseRecord, now: float | None = None) -> bool:
    now = time.time() if now is None else now
    if now > rec.expires_at:
        return True
    if rec.host != hostname() or pid_alive(rec.pid):
        return False
    return not (rec.trainer_pgid and _group_alive(rec.trainer_pgid))


EPOCH_LOG = LEASE_EPOCHS  # next to lease.json, append-only


def epoch_floor(path: str | Path) -> Epoch:
    """The highest epoch this run dir has ever granted or published under, whatever happened to
    lease.json (deleted by hand, replaced by a copy): the epoch log (append-only, so racing writers
    can never lower its max) and the epochs recorded in checkpoints/publish.jsonl."""
    run_dir = Path(path).parent
    best = 0
    for log, key in ((run_dir / EPOCH_LOG, None), (run_dir / CHECKPOINTS / PUBLISH_LOG, "epoch")):
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                value = json.loads(line)
                ep = value.get(key) if key is not None and isinstance(value, dict) else value
            except ValueError:
                continue  # a torn line
            if isinstance(ep, int) and not isinstance(ep, bool):
                best = max(best, ep)
    return best


def _reserve(path: Path, epoch: Epoch) -> None:
    """Record `epoch` before it can be held: every epoch in lease.json is <= the log's max."""
    fd = os.open(path.parent / EPOCH_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{epoch}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def heartbeat_interval(ttl_s: float) -> float:
    return max(ttl_s / 4.0, 0.2)


# link() is refused where a filesystem has no hard links (some network volumes, FUSE, vfat).
NO_LINKS = {getattr(errno, n) for n in ("EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS", "EMLINK", "EACCES")
            if hasattr(errno, n)}


def link_or_create(src: Path, dst: Path) -> None:
    """Publish `src`'s record as `dst` only if `dst` does not exist (FileExistsError otherwise).

    `link()` is atomic and needs no cleanup; where the filesystem has no hard links, `dst` is
    created with O_CREAT|O_EXCL (exclusive on every local and NFSv3+ filesystem) and the record
    written and fsynced into it. A reader that catches the new file still empty reads no record and
    retries (`_read` -> None), as it does for a lease being replaced."""
    try:
        os.link(src, dst)
        return
    except FileExistsError:
        raise
    except OSError as ex:
        if ex.errno not in NO_LINKS:
            raise
    data = src.read_bytes()
    fd = os.open(dst, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


class Lease:
    """A held lease; keep it alive with start_heartbeat(), give it back with release()."""

    def __init__(self, path: Path, record: LeaseRecord):
        self.path = path
        self.record = record
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = threading.Event()

    @classmethod
    def acquire(cls, path: str | Path, ttl_s: float = 60.0, attempts: int = 5,
                under: Epoch | None = None) -> "Lease":
        """Take the run dir; `under`: the commander epoch we run under (default: the environment's)."""
        path = Path(path)
        under = commander_epoch() if under is None else under
        path.parent.mkdir(parents=True, exist_ok=True)
        seen_epoch = 0
        for _ in range(attempts):
            current = _read(path)
            seen_epoch = max(seen_epoch, current.epoch if current else 0, epoch_floor(path))
            now = time.time()
            rec = LeaseRecord(token=secrets.token_hex(16), host=hostname(), pid=os.getpid(), since=now,
                              heartbeat=now, expires_at=now + ttl_s, ttl_s=ttl_s, epoch=seen_epoch + 1,
                              commander_epoch=under)
            tmp = path.with_name(f".lease.{rec.token}")
            tmp.write_text(json.dumps(asdict(rec)))
            try:
                if not path.exists():  # the link can succeed: epochs never repeat, even without lease.json
                    _reserve(path, rec.epoch)
                link_or_create(tmp, path)
                return cls(path, rec)
            except FileExistsError:
                pass
            finally:
                tmp.unlink(missing_ok=True)
            current = _read(path)
            if current is None:  # vanished or being replaced: try again
                time.sleep(0.05)
                continue
            if not is_stale(current):
                raise LeaseHeld(current)
            seen_epoch = max(seen_epoch, current.epoch)
            cls._evict(path, current)
        current = _read(path)
        if current is not None:
            raise LeaseHeld(current)
        raise RuntimeError(f"could not acquire {path} after {attempts} attempts")

    @staticmethod
    def _evict(path: Path, stale: LeaseRecord) -> None:
        """Move a stale lease aside; if a fresh one got there first, put it back."""
        aside = path.with_name(f".lease.stale.{stale.token}.{secrets.token_hex(4)}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return
        moved = _read(aside)
        if moved is not None and moved.token != stale.token:
            try:
                link_or_create(aside, path)  # restore the lease we should not have touched
            except FileExistsError:
                pass
        aside.unlink(missing_ok=True)

    def holds(self) -> bool:
        """Does lease.json still carry our token (the fence of the Hub sync and the heartbeat)."""
        cur = _read(self.path)
        return cur is not None and cur.token == self.record.token

    def renew(self, **changes) -> bool:
        """Extend the lease (and record `changes`, e.g. trainer_pgid); False when it was lost."""
        if not self.holds():
            self.lost.set()
            return False
        now = time.time()
        self.record.heartbeat, self.record.expires_at = now, now + self.record.ttl_s
        for k, v in changes.items():
            setattr(self.record, k, v)
        tmp = self.path.with_name(f".lease.{self.record.token}.renew")
        tmp.write_text(json.dumps(asdict(self.record)))
        os.replace(tmp, self.path)
        return True

    def start_heartbeat(self, on_lost: Callable[[], None] | None = None) -> None:
        interval = heartbeat_interval(self.record.ttl_s)

        def beat() -> None:
            while not self._stop.wait(interval):
                try:
                    ok = self.renew()
                except OSError:
                    ok = True  # a transient FS error: the lease stays valid until expiry
                if not ok:
                    if on_lost:
                        on_lost()
                    return

        self._thread = threading.Thread(target=beat, name="trainstack-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Mark the lease expired (not deleted) so the next holder's epoch keeps counting up."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        if self.holds():
            self.record.expires_at = 0.0
            tmp = self.path.with_name(f".lease.{self.record.token}.release")
            tmp.write_text(json.dumps(asdict(self.record)))
            os.replace(tmp, self.path)


def evict(path: str | Path, holder: LeaseRecord) -> None:
    """Move `holder`'s lease aside so the next acquire takes over at once: for a caller that knows,
    from an authority above the run dir (the Lium commander's epoch), that this holder was superseded."""
    Lease._evict(Path(path), holder)
