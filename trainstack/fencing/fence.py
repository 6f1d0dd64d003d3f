"""Fencing at the write: a trainer proves it still holds its run's lease before a checkpoint
becomes visible, so a superseded writer (a frozen launcher's trainer, a stale pod) never publishes.

The lifecycle that holds the lease passes it to the trainer's process group in the environment
(the lease file, the holder's token and epoch). A check passes when `lease.json` still carries
our token and stays valid for at least `margin_s` more seconds: nobody can take a lease over
before it expires, so a write that finishes inside the margin cannot race a new holder's writes.
Stdlib only (lease.json is parsed by its one reader, trainstack/fencing/lease.py): the tiny trainer and the guard import it.

This module and trainstack/fencing/lease.py are the one home of fencing: the epoch, `Fenced` (raised by a
writer that must stop: the tiny trainer's save, the Hub push) and `EXIT_FENCED` (how a fenced
`trainstack exec` / guard / trainer exits; the Lium worker reads it).
"""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainstack.fencing.lease import LeaseRecord

Epoch = int
"""A fencing number: it only grows, one per grant of a run to a writer, and a writer under an older one is
superseded. Two authorities issue epochs, one above the other: the Lium commander grants a run to a pod
(its `runs.epoch`, handed to the worker as ENV_COMMANDER_EPOCH), and the run dir's lease.json grants it to
one `trainstack exec` (LeaseRecord.epoch, recording the commander epoch it runs under, if any)."""

ENV_COMMANDER_EPOCH = "TRAINSTACK_COMMANDER_EPOCH"
ENV_FILE = "TRAINSTACK_LEASE_FILE"
ENV_TOKEN = "TRAINSTACK_LEASE_TOKEN"
ENV_EPOCH = "TRAINSTACK_LEASE_EPOCH"
ENV_MARGIN = "TRAINSTACK_FENCE_MARGIN_S"
DEFAULT_MARGIN_S = 5.0
EXIT_FENCED = 75  # a trainer that lost its lease stops with this code, having published nothing (EX_TEMPFAIL)


def epoch_superseded(held: Epoch, current: Epoch) -> str | None:
    """Why a writer that holds epoch `held` must stop when its authority is at `current` (None: it is current)."""
    return None if held == current else f"epoch {held} is superseded (current {current})"


def commander_epoch(env: "os._Environ[str] | dict[str, str] | None" = None) -> Epoch | None:
    """The commander epoch this process runs under (a Lium worker's trainer), None outside the commander."""
    raw = (os.environ if env is None else env).get(ENV_COMMANDER_EPOCH, "")
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def margin_for(ttl_s: float) -> float:
    """How long a lease must stay valid for a write to start: covers the write and clock skew."""
    return min(DEFAULT_MARGIN_S, max(0.2, ttl_s / 20.0))


def min_lease_ttl(grace_s: float) -> float:
    """The smallest TTL with which a healthy holder (renewing every ttl/4, one renewal late at most)
    never has its trainer stopped by the guard, which stops it grace + margin before expiry."""
    return max(2.0, 3.0 * (grace_s + 2.0))


class Fenced(Exception):
    """This writer no longer holds the run (its lease or its epoch was superseded): stop without publishing."""


class Fence:
    """The lease a writer runs under (from its environment): immutable and compared by value, as a frozen
    dataclass is; written out because the guard imports it before it starts the trainer, and importing
    dataclasses there cost each launch ~5 ms."""

    __slots__ = ("lease_file", "token", "epoch", "margin_s")
    lease_file: str
    token: str
    epoch: Epoch
    margin_s: float

    def __init__(self, lease_file: str, token: str, epoch: Epoch, margin_s: float = DEFAULT_MARGIN_S):
        for name, value in zip(self.__slots__, (lease_file, token, epoch, margin_s)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field '{name}'")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field '{name}'")

    def _fields(self) -> tuple:
        return (self.lease_file, self.token, self.epoch, self.margin_s)

    def __eq__(self, other: object) -> bool:
        return other.__class__ is self.__class__ and self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"{type(self).__qualname__}(lease_file={self.lease_file!r}, token={self.token!r}, "
                f"epoch={self.epoch!r}, margin_s={self.margin_s!r})")

    @classmethod
    def from_env(cls, env: "os._Environ[str] | dict[str, str] | None" = None) -> "Fence | None":
        env = os.environ if env is None else env
        if not env.get(ENV_FILE) or not env.get(ENV_TOKEN):
            return None
        try:
            return cls(env[ENV_FILE], env[ENV_TOKEN], int(env.get(ENV_EPOCH, "0")),
                       float(env.get(ENV_MARGIN, DEFAULT_MARGIN_S)))
        except ValueError:
            return None

    def to_env(self) -> dict[str, str]:
        return {ENV_FILE: self.lease_file, ENV_TOKEN: self.token, ENV_EPOCH: str(self.epoch),
                ENV_MARGIN: str(self.margin_s)}

    def read(self) -> "LeaseRecord | None":
        """lease.json as its one reader parses it (trainstack/fencing/lease.py)."""
        from trainstack.fencing.lease import read_record

        return read_record(self.lease_file)

    def superseded(self, record: "LeaseRecord | None" = None) -> str | None:
        """Another holder (or none) owns the lease now: never write again."""
        rec = self.read() if record is None else record
        if rec is None:
            return "the lease file is gone or unreadable"
        if rec.token != self.token:
            return (f"lease epoch {self.epoch} was superseded by epoch {rec.epoch} "
                    f"(host {rec.host}, pid {rec.pid})")
        return None

    def problem(self, margin_s: float | None = None, now: float | None = None) -> str | None:
        """Why this writer must not publish now (None: it may, for at least the margin)."""
        rec = self.read()
        why = self.superseded(rec)
        if why or rec is None:
            return why
        margin = self.margin_s if margin_s is None else margin_s
        left = rec.expires_at - (time.time() if now is None else now)
        if left < margin:
            return (f"lease epoch {self.epoch} expires in {left:.1f} s (its holder stopped renewing it; "
                    f"a write needs {margin:.0f} s)")
        return None

    def check(self) -> None:
        why = self.problem()
        if why:
            raise Fenced(why)


def check_from_env() -> None:
    """Raise Fenced when this process runs under a lease it no longer holds (no lease: no fence)."""
    fence = Fence.from_env()
    if fence is not None:
        fence.check()
