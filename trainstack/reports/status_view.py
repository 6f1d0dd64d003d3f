"""`trainstack status`'s table, as a reader needs it: when each run started and how long it has trained,
one line a row where the terminal allows (the columns a glance needs first; the rest named under the
table), a legend for the compact cells (`e1 x0 $0.0042`, `12 @ 0f3c...`), why a value is unknown when
the column that said so was left out, and `--watch` to follow it. status.py gathers the rows; this module
only shows them."""
from __future__ import annotations

import datetime as _dt
import sys
import time
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from trainstack.launch.base import Row
    from trainstack.terminal.tables import Column

RUN_ID_WHOLE = 21  # run ids up to this long are never folded; a longer one folds after a "-" (tables.py)
STARTS = ("launch", "resume")
ENDED = ("finished", "failed", "cancelled", "interrupted", "paused", "stopped")


def _when(value: Any) -> _dt.datetime | None:
    try:
        t = _dt.datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


def timing(events: Sequence[dict], running: bool, now: _dt.datetime | None = None) -> tuple[str | None, float | None]:
    """(the first launch's time, seconds trained over every launch) from events.jsonl: a launch or resume
    opens a stretch, its exit closes it; a stretch with no exit (a SIGKILL) ends at its last event, the open
    one of a running run now."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    started, open_at, last, total = None, None, None, 0.0
    for e in events:
        t = _when(e.get("time"))
        if t is None:
            continue
        if e.get("event") in STARTS:
            if open_at is not None and last is not None:
                total += max((last - open_at).total_seconds(), 0)
            open_at = t
            started = started or t
        elif e.get("event") == "exit" and open_at is not None:
            total += max((t - open_at).total_seconds(), 0)
            open_at = None
        last = t
    if open_at is not None:
        total += max(((now if running else last or open_at) - open_at).total_seconds(), 0)
    return (started.isoformat() if started else None), (total if started else None)


def add_timing(rows: Sequence["Row"]) -> None:
    from trainstack.run.rundir import RunDir

    for r in rows:
        r.started, r.seconds = timing(RunDir(r.run_dir).events(), running=(r.state or "").startswith("running"))


def started_cell(iso: str | None, today: _dt.date | None = None) -> str:
    """Local time: `14:05` today, `11-27 14:05` before."""
    t = _when(iso) if iso else None
    if t is None:
        return "-"
    local = t.astimezone()
    return local.strftime("%H:%M" if local.date() == (today or _dt.date.today()) else "%m-%d %H:%M")


def table_rows(rows: list["Row"]) -> tuple[list["Column"], list[list[str]]]:
    """Columns (by priority: what a glance needs first) and cells of the status table."""
    from trainstack.run.rundir.progress import Progress
    from trainstack.terminal.console import duration
    from trainstack.terminal.tables import Column

    any_job = any(r.job_id for r in rows)
    any_hub = any(r.hub_pushed is not None or r.hub_pending is not None for r in rows)
    any_pod = any(r.pod is not None or r.epoch for r in rows)
    ids = min(max((len(r.run_id) for r in rows), default=12), RUN_ID_WHOLE)  # a run id whole, when it can be
    states = [(r.state or "-") + (f", resumed x{len(r.resumed_from)}" if r.resumed_from else "") for r in rows]
    cols = [Column("run_id", 0, min_width=max(ids, 12)),
            Column("run", 0, min_width=min(max((len(s) for s in states), default=8), 20)),  # a state on one line
            Column("rollouts", 1, numeric=True), Column("reward", 1, numeric=True),
            Column("started", 2, numeric=True), Column("duration", 2, numeric=True),
            Column("varying overrides", 3, min_width=14, max_lines=2), Column("ckpt", 3, numeric=True)]
    if any_hub:
        cols.append(Column("hub", 1, min_width=12))  # a Hub run's key fact: kept before overrides and ckpt
    if any_pod:  # Lium runs: pod, lease epoch, restarts, cost (from the commander)
        cols.append(Column("pod", 1, min_width=12))
    if any_job:
        cols += [Column("scheduler", 2, min_width=9), Column("job", 4, numeric=True)]
    cols.append(Column("logs", 5, min_width=12, max_lines=2))
    cells = []
    for r, run_state in zip(rows, states):
        rollouts = Progress(rollouts=r.rollouts, target=r.target).rollouts_text()
        row = [r.run_id, run_state, rollouts, "-" if r.reward is None else f"{r.reward:.3f}",
               started_cell(r.started), "-" if r.seconds is None else duration(r.seconds),
               " ".join(r.varying) or "-", "-" if r.last_checkpoint is None else str(r.last_checkpoint)]
        if any_hub:
            hub = "-" if r.hub_pushed is None else f"{r.hub_pushed} @ {(r.hub_commit or '?')[:8]}"
            row.append(hub + (f" ({r.hub_pending} pending)" if r.hub_pending is not None else ""))
        if any_pod:
            pod = "-" if r.pod is None and not r.epoch else (
                f"{(r.pod or '-')[:8]} e{r.epoch} x{r.restarts} ${r.cost_usd or 0:.4f}"
                + (f" hub {r.hub_commit[:10]}" if r.hub_commit and r.hub_pushed is None else ""))
            row.append(pod)
        if any_job:
            row += [(r.scheduler or "-") + (f" ({r.reason})" if r.reason else ""), r.job_id or "-"]
        row.append("\n".join(v for k, v in r.logs.items() if k in ("stdout", "trainer")))
        cells.append(row)
    return cols, cells


LEGEND = {  # a compact cell's parts, for the columns that have them
    "run": "run: the run's state; `resumed xN`: launched N more times, each resuming its checkpoint",
    "rollouts": "rollouts: trained, or trained/asked while short of the run's num_rollout",
    "duration": "duration: training time over every launch (started: the first launch, local time)",
    "hub": "hub: `ITER @ COMMIT`, the newest checkpoint on the Hub and its commit; `(N pending)`: not pushed yet",
    "pod": "pod: `POD eEPOCH xRESTARTS $COST`: the pod, the run's lease epoch (a new pod or worker takes the "
           "next), pods re-provisioned, spend so far",
}


def notes(rows: Sequence["Row"], cols: Sequence["Column"], hidden: Sequence[str], cells: list[list[str]]) -> list[str]:
    """The legend of the compact columns shown, and why a value is unknown where the table cannot say:
    a launcher's reason (the scheduler column) when that column was left out, a `-` in a shown column."""
    shown = {c.name: [row[i] for row in cells] for i, c in enumerate(cols) if c.name not in hidden}
    needed = {"run": lambda v: "resumed" in v, "rollouts": lambda v: "/" in v}
    out = [text for name, text in LEGEND.items()
           if name in shown and any(needed.get(name, lambda v: v != "-")(v) for v in shown[name])]
    if any(v == "-" for name, values in shown.items() if name != "varying overrides" for v in values):
        out.append("-: not known yet (no metrics, checkpoint, launch or job recorded for the run so far)")
    for r in rows:
        if r.reason and "scheduler" not in shown:
            out.append(f"{r.run_id}: {r.scheduler or 'launcher'}: {r.reason}")
    return out


def render(rows: list["Row"], title: str | None = None, wide: bool = False, file=None) -> None:
    from trainstack.terminal.tables import fold, print_table, terminal_width

    out = file or sys.stdout
    cols, cells = table_rows(rows)
    hidden = print_table(cols, cells, title=title, file=out, wide=wide)
    width = None if wide else terminal_width()
    for line in notes(rows, cols, hidden, cells):
        print("\n".join(fold(line, width, "", "  ")), file=out)


def watch(show, every_s: float, file=None, ended=lambda: False) -> int:
    """`status --watch`: `show()` again every `every_s` seconds until Ctrl-C or `ended()` (every run has
    ended); on a terminal each view replaces the last, elsewhere they follow each other, timestamped."""
    out = file or sys.stdout
    live = bool(getattr(out, "isatty", lambda: False)())
    try:
        while True:
            if live:
                out.write("\033[H\033[2J")
            print(f"trainstack status --watch: {time.strftime('%H:%M:%S')} (every {every_s:g} s; Ctrl-C stops)",
                  file=out)
            show()
            out.flush()
            if ended():
                return 0
            time.sleep(every_s)
            if not live:
                print(file=out)
    except KeyboardInterrupt:
        return 0
