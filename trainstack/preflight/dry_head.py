"""The dry run's first block: the verdict, then what a reader decides on (the run id and whether a
launch starts fresh or resumes, where the trainer runs, the GPUs and batch arithmetic, the inputs and
the problems found), before the detail. `dry_run=short` prints only this block.

Why a block of its own: the detail (config tree, flag tables, command) is 200-400 lines; the verdict
and the numbers that decide a run must not scroll away above it."""
from __future__ import annotations

from typing import TYPE_CHECKING

from trainstack.config.resolve import ResolvedRun
from trainstack.preflight.dry_summary import Fact, facts
from trainstack.render.command import SlimeCommand
from trainstack.terminal.tables import fold

if TYPE_CHECKING:
    from trainstack.preflight.checks import Report

SHORT = "short"  # dry_run=short: the verdict and the summary only
VERDICT, HINT = "verdict", "hint"  # head_lines' labels that are no summary row


def verdict_line(run_id: str, launcher: str) -> str:
    """The dry run's first (and last) line: every check passed (a refusal is an error report and exit 2)."""
    return f"ok: ready to launch {run_id} on {launcher}"


def _inputs(run: ResolvedRun, cmd: SlimeCommand, runs_here: bool) -> str | None:
    """The input paths the args name, by what happens to them: here already, made by the launch (the env's
    data hook, the inputs feature's downloads and conversions), or checked on the host that runs it."""
    from pathlib import Path

    from trainstack.preflight.host_checks import HostFacts
    from trainstack.preflight.host_checks import _inputs as input_paths

    host = HostFacts.from_run(run, cmd)
    if bool(run.meta.get("env", {}).get("prepare")):
        host.prepared_root = run.paths.data_root
    groups: dict[str, list[str]] = {}
    for dest, _, path in input_paths(host):
        if Path(path).exists():
            state = "on this machine" if runs_here else "on this machine (the host needs them)"
        elif host.made_by_hook(path):
            state = "made by the launch before the trainer"
        else:
            state = "checked on the host before the trainer"
        key = host.key_of(dest)
        if key not in groups.setdefault(state, []):
            groups[state].append(key)
    if not groups:
        return None
    return "; ".join(f"{len(keys)} {state} ({', '.join(keys)})" for state, keys in groups.items())


def _problems(run: ResolvedRun, report: "Report | None", derived: list[Fact]) -> str:
    found = [*run.warnings, *(f.warning for f in derived if f.warning)]
    text = "none" if not found else f"{len(found)} warning{'s' if len(found) != 1 else ''}: " + "; ".join(found)
    if report is not None and report.deferred:
        text += (f" ({len(report.deferred)} host check{'s' if len(report.deferred) != 1 else ''} deferred to the "
                 f"{run.cluster.launcher} host: `trainstack exec` runs them before the trainer; listed below)")
    return text


def head_lines(run: ResolvedRun, cmd: SlimeCommand, report: "Report | None", width: int | None,
               short: bool) -> list[tuple[str, list[str]]]:
    """(label, folded lines) of the block: VERDICT's, each summary row's (`  label  text`), HINT's; display.py
    styles them."""
    runs_here = report.runs_here if report is not None else True
    derived = facts(run, cmd)
    rows: list[tuple[str, str]] = [
        ("run", f"{run.run_id}: {report.plan}" if report is not None and report.plan else run.run_id),
        ("run dir", run.run_dir),
        ("launcher", f"{run.cluster.launcher}: the trainer runs on "
                     f"{'this machine' if runs_here else f'a {run.cluster.launcher} host'}"),
        *((f.label, f.text) for f in derived),
    ]
    inputs = _inputs(run, cmd, runs_here)
    if inputs:
        rows.append(("inputs", inputs))
    rows.append(("problems", _problems(run, report, derived)))
    w_label = max(len(label) for label, _ in rows)
    out: list[tuple[str, list[str]]] = [(VERDICT, fold(verdict_line(run.run_id, run.cluster.launcher), width, "", "  "))]
    for label, text in rows:
        out.append((label, fold(f"{label.ljust(w_label)}  {text}", width, "  ", " " * (w_label + 4))))
    hint = ("(dry_run=short: this block only; dry_run=true adds the config, flags with their sources, env, launch "
            "plan and command)" if short else
            "(the detail follows: config, flags with their sources, env, launch plan, command; "
            "dry_run=short prints only the block above)")
    out.append((HINT, fold(hint, width, "", "  ")))
    return out
