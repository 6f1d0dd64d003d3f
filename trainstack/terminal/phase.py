"""One line for each phase of a launch that takes a while (a Ray head starting, an env server, a download,
a conversion, a commander): `trainstack: <what> ...` once it has taken a second (at once with
`announce=True`), and `trainstack: <what>: done in 36.2 s` (or `failed after`) when it ends. A phase over
within the second prints nothing.

Why: a Ray head's start was 36 s of silence; a reader cannot tell a slow step from a hung one."""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Callable, Iterator, Optional

QUIET_S = 1.0  # a phase shorter than this says nothing


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def phase(what: str, say: Optional[Callable[[str], None]] = None, announce: bool = False,
          prefix: str = "trainstack: ", quiet_s: float = QUIET_S) -> Iterator[None]:
    """Lines about `what` through `say` (stderr); `announce`: the first line at once (the caller has
    nothing better to show meanwhile), else only once `quiet_s` has passed."""
    out = say or _stderr
    t0 = time.monotonic()
    ended = threading.Event()
    shown = threading.Event()

    def announce_later() -> None:
        if not ended.wait(quiet_s):
            out(f"{prefix}{what} ...")
            shown.set()

    watcher = None
    if announce:
        out(f"{prefix}{what} ...")
        shown.set()
    else:
        watcher = threading.Thread(target=announce_later, daemon=True)
        watcher.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        ended.set()
        if watcher is not None:
            watcher.join()
        took = time.monotonic() - t0
        if shown.is_set() and (took >= quiet_s or not ok):
            out(f"{prefix}{what}: {'done in' if ok else 'failed after'} {took:.1f} s")
