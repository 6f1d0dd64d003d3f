"""`trainstack status` and `trainstack cancel`: where a sweep's (or some runs') jobs stand.

Targets: a sweep directory (its `sweep.json` manifest), run directories, or run ids (looked up
under --runs-root). Per run: run_id, the overrides that vary across the rows, the run's own state,
last checkpoint, last reward and where the logs are from the run dir; then each run's launcher
(its spec's `launcher`) fills what only it knows (SLURM: the scheduler's state; Lium: the pod) and
answers `cancel` and `logs`. Nothing here names a backend.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.launch.base import Row
from trainstack.reports.status_view import RUN_ID_WHOLE, render, table_rows  # noqa: F401  (the table: status_view.py)
from trainstack.run.rundir import RunDir
from trainstack.run.rundir.targets import RunRef, expand
from trainstack.storage import layout


def _run_row(ref: RunRef) -> Row:
    from trainstack.run.rundir import summary

    facts = summary.cached(ref.run_dir)  # one small file per run (run/rundir/summary.py), read by collect
    slurm = facts.slurm
    overrides = ref.overrides if ref.overrides is not None else facts.overrides
    return Row(run_id=ref.run_id or slurm.get("run_id") or ref.run_dir.name, run_dir=str(ref.run_dir),
               launcher=facts.launcher,
               overrides=[str(o).lstrip("+") for o in overrides],
               job_id=str(ref.job_id or slurm.get("job_id") or "") or None,
               job_name=slurm.get("job_name"), logs=dict(ref.logs or slurm.get("logs") or {}))


def locate(target: str, runs_root: str = "runs") -> str:
    """A run id that is not under the runs root: the run dir a launcher's own records know for it (a Lium
    run launched from another directory: the commander knows it), else the target unchanged."""
    from trainstack.run.rundir.targets import find_run

    if "/" in target or layout.is_sweep_dir(target) or find_run(target, runs_root) is not None:
        return target
    from trainstack import registry

    for name in registry.names():
        try:
            found = registry.launcher_class(name).locate(target)
        except ConfigErrors:
            continue
        if found is not None:
            return str(found)
    return target


def collect(targets: Sequence[str], runs_root: str = "runs",
            corrupt: dict[str, list[ConfigError]] | None = None) -> list[Row]:
    """Rows for sweep dirs, run dirs and run ids (in the order given); ConfigErrors for bad targets and
    for corrupt files in their run directories. `corrupt`: collect those per run instead (by run dir),
    each such row marked, so one broken run does not hide the others (`trainstack status`)."""
    from trainstack.run.rundir import check, summary

    def readable(ref: RunRef) -> None:  # each run's summary: its files checked (and read) only when they changed
        summary.read(ref.run_dir)
        check.require_readable([ref.run_dir], skip=tuple(n for n in check.SHAPE_BY_NAME if n != layout.LEASE))

    refs = expand([locate(t, runs_root) for t in targets], runs_root)
    rows, errors = [], []
    for ref in refs:
        try:
            readable(ref)
        except ConfigErrors as ex:
            if corrupt is None:
                errors += ex.errors
                continue
            corrupt[str(ref.run_dir)] = ex.errors
            first = ex.errors[0]
            kind = "corrupt" if " is corrupt:" in first.problem else "unreadable"
            rows.append(Row(run_id=ref.run_id or ref.run_dir.name, run_dir=str(ref.run_dir),
                            overrides=[str(o).lstrip("+") for o in ref.overrides or []],
                            problem=f"{kind}: {first.key.rsplit('/', 1)[-1]} (below)"))
            continue
        rows.append(_run_row(ref))
    if errors:
        raise ConfigErrors(errors)
    return rows


def run_states(run_dirs: Sequence[str | Path]) -> dict[str, str | None]:
    """Each run's state as `trainstack status` reports it (status.json, then its launcher: the
    scheduler, the commander), by run dir: compare shows the same truth as status."""
    rows = fill([_run_row(RunRef(Path(d), Path(d).name)) for d in run_dirs])
    return {r.run_dir: r.state for r in rows}


def default_targets(runs_root: str) -> list[str]:
    """`trainstack status` alone: the sweep in this directory, else every run under the runs root."""
    if layout.is_sweep_dir("."):
        return ["."]
    from trainstack.run.rundir.targets import run_ids

    return [str(Path(runs_root) / rid) for rid in run_ids(runs_root)]


def by_launcher(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """Rows grouped by the launcher each run was submitted with (order kept)."""
    out: dict[str, list[Row]] = {}
    for r in rows:
        out.setdefault(r.launcher, []).append(r)
    return out


def fill(rows: list[Row]) -> list[Row]:
    """Scheduler state, run state, what the run did (checkpoint, rollouts, reward), restarts; and the
    overrides that vary."""
    from trainstack.registry import get
    from trainstack.run.rundir import summary
    from trainstack.run.rundir.hub_state import hub_note
    from trainstack.run.rundir.liveness import judge

    for name, group in by_launcher(rows).items():  # what the runs logged where they ran, into their run dirs here
        try:
            get(name).fetch_traces([r.run_dir for r in group])
        except ConfigErrors:
            pass
        else:
            summary.forget([r.run_dir for r in group])  # read again below: what came back is the run's truth
    for r in rows:
        if r.problem:  # a corrupt run dir: its files are not read (the errors are printed under the table)
            r.state = r.problem
            continue
        rd = RunDir(r.run_dir)
        facts = summary.cached(rd.path)  # status.json, progress, events: made from the run's files (run/rundir/summary.py)
        st = facts.status
        r.state = judge(rd.path, st).text()  # "running" only while the lease names a live holder
        r.last_checkpoint, r.rollouts, r.target, r.reward = facts.last_checkpoint, facts.rollouts, facts.target, \
            facts.reward
        hub = st.get("hub") or {}
        r.hub_pushed, r.hub_commit, r.hub_pending = hub.get("last_pushed"), hub.get("commit"), hub.get("pending")
        r.resumed_from, r.restarts = list(facts.resumed_from), facts.restarts
        if isinstance(st.get("hub"), dict) and r.state not in ("running", None):  # a Hub-synced run's pushes
            note = hub_note(st, rd.events())
            r.state = f"{r.state}, {note}" if note else r.state  # e.g. "finished, hub: 0/2 pushed, 401"
        r.logs = {**r.logs, "trainer": str(rd.trainer_log)}
    for name, group in by_launcher([r for r in rows if not r.problem]).items():
        try:
            get(name).status(group)
        except ConfigErrors:  # a launcher not installed here: the run dir's facts are all status can show
            for r in group:
                r.scheduler, r.reason = "?", f"launcher '{name}' is not installed here"
    by_key: dict[str, set] = {}
    for r in rows:
        for o in r.overrides:
            k, _, v = o.partition("=")
            by_key.setdefault(k, set()).add(v)
    common = set.intersection(*({o.partition("=")[0] for o in r.overrides} for r in rows)) if rows else set()
    for r in rows:
        r.varying = list(r.overrides) if len(rows) == 1 else [
            o for o in r.overrides
            if len(by_key[o.partition("=")[0]]) > 1 or o.partition("=")[0] not in common]
        r.varying = [o for o in r.varying if o.partition("=")[0] != "run_id"]  # the row's own column
    return rows


def run_status(targets: Sequence[str], runs_root: str = "runs", as_json: bool = False, wide: bool = False,
               watch: float | None = None) -> int:
    from trainstack.errors import report_and_exit
    from trainstack.reports.status_view import ENDED, add_timing

    chosen = list(targets) or default_targets(runs_root)
    if not chosen:
        print(f"trainstack status: no runs under {runs_root} (give a sweep dir, run ids, or --runs-root DIR)",
              file=sys.stderr)
        return 0
    seen: list[Row] = []
    corrupt: dict[str, list[ConfigError]] = {}

    def show() -> None:
        corrupt.clear()
        try:
            rows = fill(collect(chosen, runs_root, corrupt))
        except ConfigErrors as ex:
            report_and_exit(ex, command="status")
        add_timing([r for r in rows if not r.problem])  # a corrupt run dir's files are not read
        seen[:] = rows
        if as_json:
            print(json.dumps([r.to_json() for r in rows], indent=1, default=str))
        else:
            title = ", ".join(targets) if targets else (None if chosen == ["."] else f"runs under {runs_root}")
            render(rows, title=title, wide=wide)

    if watch is None:
        show()
        if corrupt:  # the readable runs are shown above; the broken ones named here, with the fix
            report_and_exit(ConfigErrors([e for errs in corrupt.values() for e in errs]), command="status")
        return 0
    from trainstack.reports.status_view import watch as follow

    return follow(show, watch, ended=lambda: all((r.state or "").split(",")[0] in ENDED for r in seen))


def run_cancel(targets: Sequence[str], runs_root: str = "runs", dry: bool = False, purge: bool = False) -> int:
    """Each run's launcher stops it (SLURM: scancel; Lium: the commander; here: the launching process)."""
    from trainstack.errors import RuntimeFailure, report_and_exit, report_failure_and_exit
    from trainstack.registry import get

    try:
        rows = collect(targets, runs_root)
        launchers = {name: get(name) for name in by_launcher(rows)}
    except ConfigErrors as ex:
        report_and_exit(ex, command="cancel")
    unpurged = sorted(n for n, lch in launchers.items() if purge and not lch.purges)
    if unpurged:  # --purge: only launchers that keep storage outside the run dir (Lium volumes) delete it
        report_and_exit(ConfigErrors([ConfigError("--purge", f"runs of the {', '.join(unpurged)} launcher keep "
                                                  "nothing outside their run dir", "cancel them without --purge")]),
                        command="cancel")
    code = 0
    for name, group in by_launcher(rows).items():
        try:
            code = launchers[name].cancel(group, dry, **({"purge": True} if purge else {})) or code
        except RuntimeFailure as ex:
            report_failure_and_exit(ex)
    return code
