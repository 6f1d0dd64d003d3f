"""What a local launch shows of its trainer's output: progress, not 300 scrolling lines.

The trainer's every line still goes to logs/trainer.log (the guard writes it). On the console a
trainer line that reports a rollout (`rollout 37/300 ... reward 0.412 ...`: the tiny trainer's, or any
trainer's that prints the same words) becomes, on a terminal, one live line redrawn in place with the
reward, rate and ETA; elsewhere (a pipe, a log, CI) one plain line every tenth of the run (and the
first and last) with the same figures appended. Every other line passes through as it came.

Why: `make run` printed a line per rollout with no rate or ETA; a terminal user wants where it is and
when it ends, a log reader wants a line now and then, and the run dir keeps all of it."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import IO, Callable, Optional

ROLLOUT = re.compile(rb"\brollout (\d+)/(\d+)\b")
REWARD = re.compile(rb"\breward (-?\d+(?:\.\d+)?)")
PLAIN_LINES = 10  # a run shows about this many rollout lines when not on a terminal


def duration(seconds: float) -> str:
    """`45s`, `2m05s`, `1h02m`: short enough for a progress line and a status cell."""
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@dataclass
class Progress:
    """Rollouts seen in this launch: the first one's time and count give the rate (start-up excluded)."""

    done: int = 0
    total: int = 0
    reward: Optional[float] = None
    first: Optional[tuple[float, int]] = None  # (monotonic time, rollouts done) at the first rollout line
    last_at: float = field(default_factory=time.monotonic)

    def update(self, done: int, total: int, reward: Optional[float], now: float) -> None:
        if self.first is None:
            self.first = (now, done)
        self.done, self.total, self.reward, self.last_at = done, total, reward, now

    def rate(self) -> Optional[float]:
        """Rollouts per second since the first rollout line of this launch."""
        if self.first is None or self.done <= self.first[1] or self.last_at <= self.first[0]:
            return None
        return (self.done - self.first[1]) / (self.last_at - self.first[0])

    def figures(self) -> str:
        """`12%  reward 0.412  2.10 rollouts/s  ETA 1m59s` (rate and ETA once two rollouts were seen)."""
        parts = [f"{100 * self.done // max(self.total, 1)}%"]
        if self.reward is not None:
            parts.append(f"reward {self.reward:.3f}")
        rate = self.rate()
        if rate:
            per = f"{rate:.2f} rollouts/s" if rate >= 1 else f"{1 / rate:.1f} s/rollout"
            parts += [per, f"ETA {duration((self.total - self.done) / rate)}" if self.done < self.total else "done"]
        return "  ".join(parts)


class Console:
    """The trainer's output as a launch shows it on `out` (a binary stream: the trainer's bytes as they are)."""

    def __init__(self, out: IO[bytes], live: bool, width: int = 80, every: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.out, self.live, self.width, self.every, self.clock = out, live, max(width, 20), every, clock
        self.progress = Progress()
        self._drawn = False  # a live line is on the screen (no newline after it)

    def line(self, raw: bytes) -> None:
        m = ROLLOUT.search(raw)
        if m is None or int(m.group(2)) <= 0:
            self._write(raw)
            return
        done, total = int(m.group(1)), int(m.group(2))
        r = REWARD.search(raw)
        first = self.progress.first is None
        self.progress.update(done, total, float(r.group(1)) if r else None, self.clock())
        if self.live:
            self.out.write(b"\r\033[K" + self._live_text())
            self._drawn = True
            self.out.flush()
            return
        every = self.every or max(-(-total // PLAIN_LINES), 1)
        if first or done == total or done % every == 0:
            self._write(raw.rstrip(b"\r\n") + f"  [{self.progress.figures()}]\n".encode())

    def _write(self, raw: bytes) -> None:
        if self._drawn:  # the line goes above the live line, which is drawn again under it
            self.out.write(b"\r\033[K")
        self.out.write(raw if raw.endswith(b"\n") else raw + b"\n")
        if self._drawn:
            self.out.write(self._live_text())
        self.out.flush()

    def _live_text(self) -> bytes:
        p = self.progress
        return f"rollout {p.done}/{p.total}  {p.figures()}"[: self.width - 1].encode()

    def close(self) -> None:
        """End the live line (the next output starts on a line of its own)."""
        if self._drawn:
            self.out.write(b"\n")
            self.out.flush()
            self._drawn = False


def for_stdout(stream) -> Console:
    """A Console over `stream` (sys.stdout): live on a terminal, plain lines elsewhere."""
    import shutil

    live = bool(getattr(stream, "isatty", lambda: False)())
    return Console(stream.buffer, live=live, width=shutil.get_terminal_size().columns)
