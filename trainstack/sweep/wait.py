"""A waited sweep (`hydra.launcher.wait=true`, or a launcher that runs to the end): block until every run
has ended, with a progress line whenever it changes, then give each point its result.

The launcher says how each run ended (`Launcher.sweep_poll`: its scheduler, its commander) and brings
what the run logged where it ran into the run dir here (`Launcher.fetch_traces`); the result's value is
read from that run dir (trainstack/run/result.py), the same numbers `trainstack compare` shows.
"""
from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from trainstack.run import result as sr

if TYPE_CHECKING:
    from trainstack.launch.base import Launcher, RunEnd
    from trainstack.run.rundir.manifest import SweepRun
    from trainstack.run.spec import RunSpec

REPEAT_S = 60.0  # an unchanged progress line is said again this often (the sweep is alive)


def wait_for_runs(launcher: "Launcher", specs: Sequence["RunSpec"], runs: Sequence["SweepRun"], settings: Any,
                  say: Callable[[str], None] | None = None, poll_s: float | None = None) -> list["RunEnd"]:
    """Every run's end, polling the launcher every `poll_s` (its settings' `poll_s`, else 5 s)."""
    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    poll = max(float(poll_s if poll_s is not None else getattr(settings, "poll_s", 5.0) or 5.0), 0.1)
    ends: list[RunEnd | None] = [None] * len(specs)
    shown, shown_at = "", 0.0
    while True:
        open_dirs = [s.run_dir for s, e in zip(specs, ends) if e is None]
        launcher.fetch_traces(open_dirs)
        for i, end in enumerate(launcher.sweep_poll(specs, runs, settings)):
            if ends[i] is None and end is not None:
                ends[i] = end
        line = progress_line(specs, ends)
        now = time.monotonic()
        if line != shown or now - shown_at >= REPEAT_S:
            say(line)
            shown, shown_at = line, now
        if all(e is not None for e in ends):
            if open_dirs:
                launcher.fetch_traces(open_dirs)  # the metrics logged between the last poll and the end
            return [e for e in ends if e is not None]
        time.sleep(poll)


def progress_line(specs: Sequence["RunSpec"], ends: Sequence["RunEnd | None"]) -> str:
    """`trainstack: waiting for 4 runs: 1 finished, 1 failed, 2 running (a 3/6, b 0/6)`."""
    from trainstack.run.rundir.progress import progress

    done = sum(e is not None and e.state == sr.FINISHED for e in ends)
    failed = sum(e is not None and e.state == sr.FAILED for e in ends)
    going = [(s.run_id, progress(s.run_dir).rollouts_text()) for s, e in zip(specs, ends) if e is None]
    parts = [f"{done} finished"] + ([f"{failed} failed"] if failed else []) + (
        [f"{len(going)} queued or running (" + ", ".join(f"{rid} {text}" for rid, text in going[:4])
         + (", ..." if len(going) > 4 else "") + ")"] if going else [])
    n = len(specs)
    return f"trainstack: {'waited for' if not going else 'waiting for'} {n} run{'s' if n != 1 else ''}: " \
           + ", ".join(parts)


def results(specs: Sequence["RunSpec"], nums: Sequence[int], shown: Sequence[list[str]], ends: Sequence["RunEnd"],
            objective: sr.Objective, direction: Any = None) -> list[sr.RunResult]:
    """Each waited point's result: how it ended, and its objective's value from its run dir."""
    out = []
    for spec, num, overrides, end in zip(specs, nums, shown, ends):
        res = sr.RunResult(num=num, run_id=spec.run_id, run_dir=spec.run_dir, overrides=list(overrides),
                           state=end.state, code=end.code, error=end.error)
        out.append(sr.finish(res, objective, direction))
    return out
