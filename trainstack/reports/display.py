"""Dry-run output: resolved config tree, the three argument groups with their sources, the env,
and a copy-pastable command. Secrets are redacted in everything printed."""
from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from trainstack.config.resolve import ResolvedRun
from trainstack.render.command import SlimeCommand

if TYPE_CHECKING:
    from trainstack.preflight.checks import Report
    from trainstack.run.spec import RunSpec
from trainstack.secrets import redact
from trainstack.terminal.tables import fold


def _flag_rows(cmd: SlimeCommand, run: ResolvedRun, group: str) -> list[tuple[str, str, str]]:
    from trainstack.render.command import flag_spans
    from trainstack.upstream.argtable import load_table

    flags = load_table().flag_to_dest
    return [(flag, " ".join(vals), run.source(flags.get(flag, ""))) for flag, vals in flag_spans(cmd.groups.get(group, []))]


class _Style:
    """ANSI styling on a terminal, plain text in pipes and logs."""

    def __init__(self, stream):
        self.on = bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("NO_COLOR")

    def __call__(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.on else text


def _tree_lines(value: Any, style: _Style, width: int | None, indent: str = "", unset: list[str] | None = None,
                prefix: str = "") -> list[str]:
    """The config as YAML-like lines; a null or empty leaf goes to `unset` (its dotted key) instead, when
    given: the dry run names those once, on a line of their own."""
    lines = []
    for k, v in value.items():
        if unset is not None and (v is None or v == {} or v == []):
            unset.append(f"{prefix}{k}")
            continue
        if isinstance(v, dict) and v:
            sub = _tree_lines(v, style, width, indent + "  ", unset, f"{prefix}{k}.")
            if sub:
                lines.append(f"{indent}{style(str(k), '36')}:")
                lines += sub
        else:
            shown = v if isinstance(v, str) else json.dumps(v)
            lines += _styled_head(fold(f"{k}: {shown}", width, indent, indent + "    "), indent + str(k), style, "36")
    return lines


def _styled_head(lines: list[str], head: str, style: _Style, code: str) -> list[str]:
    """Style `head` at the start of the first folded line (styling after folding keeps widths true)."""
    if style.on and lines and lines[0].startswith(head):
        pad = len(head) - len(head.lstrip())
        lines[0] = head[:pad] + style(head[pad:], code) + lines[0][len(head):]
    return lines


def _rule(title: str, style: _Style, width: int | None = None) -> str:
    """A section rule as wide as the terminal (80 columns in a pipe); a title too long for it is cut."""
    w = width or RULE_WIDTH
    text = f"── {title} "
    if len(text) > w:
        text = text[: max(w - 1, 1)] + "…"
    return style(text + "─" * max(w - len(text), 0), "1")


RULE_WIDTH = 80  # rules in a pipe without COLUMNS


def _flag_lines(rows: list[tuple[str, str, str]], st: _Style, width: int | None) -> list[str]:
    """flag | value | source, each column folded to fit `width` (unfolded in a pipe)."""
    w_flag = max((len(f) for f, _, _ in rows), default=0)
    w_val = min(max((len(v) for _, v, _ in rows), default=0), 60)
    if width is None:
        return [f"  {st(f.ljust(w_flag), '32')}  {v.ljust(w_val)}  {st(src, '2')}" for f, v, src in rows]
    room = width - 2 - w_flag - 2
    if room < 36:  # too narrow for three columns: the flag, then its value and source under it
        out = []
        for f, v, src in rows:
            out += _styled_head(fold(f, width, "  "), "  " + f, st, "32")
            out += fold(v, width, "      ") if v else []
            out += [st(ln, "2") for ln in fold(f"({src})", width, "      ")] if src else []
        return out
    w_src = max((len(src) for _, _, src in rows), default=0)
    w_val = max(min(w_val, max(room - w_src - 2, room * 2 // 5)), 8)
    w_src = room - w_val - 2
    out = []
    for f, v, src in rows:
        vals, srcs = fold(v, w_val, "", "") if v else [""], fold(src, w_src, "", "  ") if src else [""]
        for i in range(max(len(vals), len(srcs))):
            flag = (f if i == 0 else "").ljust(w_flag)
            val = (vals[i] if i < len(vals) else "").ljust(w_val)
            line = f"  {st(flag, '32')}  {val}  {st(srcs[i], '2') if i < len(srcs) else ''}"
            out.append(line.rstrip())
    return out


def print_dry_run(run: ResolvedRun, cmd: SlimeCommand, file=None, report: "Report | None" = None,
                  short: bool = False) -> None:
    """Everything a launch would do, nothing done: first the verdict and a summary (dry_head.py; all that
    `short` prints), then the config tree, argv by group with sources, env, what the launch would do with
    the run dir, the checks deferred to a remote host, the command and the verdict again. Folded to the
    terminal's width (COLUMNS); whole lines in a pipe."""
    from trainstack.preflight.dry_head import HINT, VERDICT, head_lines, verdict_line
    from trainstack.terminal.tables import fold_shell, output_width

    out = file or sys.stdout
    st = _Style(out)
    width = output_width(out)
    lines: list[str] = []
    for label, block in head_lines(run, cmd, report, width, short):
        if label in (VERDICT, HINT):
            lines += [st(ln, "32" if label == VERDICT else "2") for ln in block]
        else:
            lines += _styled_head(block, "  " + label, st, "36")
    if short:
        out.write("\n".join(lines) + "\n")
        out.flush()
        return
    lines.append(_rule(f"resolved config: {run.run_id}", st, width))
    lines += fold(f"run dir {run.run_dir}", width, "# ", "#   ")
    unset: list[str] = []
    tree = _tree_lines(redact(run.config), st, width, unset=unset)
    if unset:
        lines += fold(f"unset (null or empty): {', '.join(unset)}", width, "# ", "#   ")
    lines += tree
    for group in ("megatron", "sglang", "slime"):
        rows = _flag_rows(cmd, run, group)
        lines.append(_rule(f"{group} arguments ({len(rows)})", st, width))
        lines += _flag_lines(rows, st, width)
    lines.append(_rule("runtime env", st, width))
    for k, v in sorted(cmd.redacted_env().items()):
        lines += _styled_head(fold(f"{k}={v}", width, "  ", "      "), "  " + k, st, "32")
    for w in run.warnings:
        lines += _styled_head(fold(f"warning: {w}", width, "", "  "), "warning:", st, "33")
    from trainstack import hooks

    env_notes = [n for notes in hooks.get(hooks.DRY_RUN_NOTES) for n in notes(run)]  # e.g. the env server a launch uses
    if report is not None:
        where = "this machine" if report.runs_here else f"a {run.cluster.launcher} host"
        lines.append(_rule(f"launch (the trainer runs on {where})", st, width))
        if run.cluster.settings:  # the launcher's settings, defaults included (cluster.<launcher>)
            lines += fold(f"cluster.{run.cluster.launcher}  " + " ".join(
                f"{k}={v}" for k, v in run.cluster.settings.items() if v not in (None, {}, [])), width, "  ", "    ")
        for n in [*report.notes, *env_notes]:
            lines += _styled_head(fold(f"note: {n}", width, "  ", "    "), "  note:", st, "33")
        if report.deferred:
            lines += fold("deferred to the host that runs it (checked by `trainstack exec` before the trainer "
                          "starts):", width, "  ", "  ")
            for d in report.deferred:
                lines += fold(f"- {d}", width, "    ", "      ")
    else:
        for n in env_notes:
            lines += _styled_head(fold(f"note: {n}", width, "", "  "), "note:", st, "33")
    lines.append(_rule("command", st, width))
    lines += fold_shell(cmd.shell_line(), width)  # folded with backslash-newlines: still copy-pastable
    lines += [st(ln, "32") for ln in fold(verdict_line(run.run_id, run.cluster.launcher), width, "", "  ")]
    out.write("\n".join(lines) + "\n")
    out.flush()


def print_sweep_line(run: ResolvedRun, cmd: SlimeCommand, file=None) -> None:
    """One line per sweep point; the overrides fold under it to the terminal's width."""
    print_folded_line(sweep_line(run, cmd), file)


def sweep_line(run: ResolvedRun, cmd: SlimeCommand) -> str:
    """A sweep point's line, unfolded: all a dry sweep keeps of a point until every point is checked."""
    varying = [o.lstrip("+") for o in run.origin.overrides if not o.startswith(("dry_run", "hydra"))]
    return f"ok  {run.run_id}  {len(cmd.argv)} tokens  {' '.join(varying)}".rstrip()


def print_folded_line(text: str, file=None) -> None:
    from trainstack.terminal.tables import output_width

    out = file or sys.stdout
    print("\n".join(fold(text, output_width(out), "", "      ")), file=out, flush=True)


def write_command_json(cmd: SlimeCommand, run: ResolvedRun, path: str) -> None:
    from trainstack.terminal.output_files import write_text

    write_text(path, command_json(cmd, run))


def command_json(cmd: SlimeCommand, run: ResolvedRun) -> str:
    return json.dumps({"run_id": run.run_id, "name": run.name, **cmd.to_json()}, indent=2, sort_keys=True) + "\n"


def pasteable(override: str) -> str:
    """An override as `run.py` takes it again. The spec stores overrides without their `+`; a key the
    presets do not have (a free-form `meta` entry: `+env.meta.http_env.url=...`) needs one to be added,
    and `++` adds it or overrides it, whichever the config needs."""
    from trainstack.config.schema import DEST_NAMESPACES

    key = override.split("=", 1)[0]
    head, _, rest = key.partition(".")
    if head in DEST_NAMESPACES and rest.startswith("meta.") and not override.startswith(("+", "~")):
        return "++" + override
    return override


def print_summary(run: "RunSpec", code: int, file=None) -> None:
    """After a launch: where the run is, how it learned, and the commands that continue it."""
    import shlex

    from trainstack.run.rundir import RunDir
    from trainstack.storage.checkpoints import inspect

    out = file or sys.stderr
    rd = RunDir(run.run_dir)
    status = rd.status()
    _, rewards = rd.last_metrics()
    ckpt = inspect(run.args.get("save") or str(rd.checkpoints))
    overrides = [pasteable(o) for o in run.overrides]
    from trainstack.config.userconfig import launch_words, runs_root_flag

    rerun = shlex.join([*launch_words(), *overrides])
    more = shlex.join([*launch_words(), *[o for o in overrides if not o.startswith("env.num_rollout=")]])
    from trainstack.terminal.tables import output_width

    width = output_width(out)
    lines = [""]
    state = status.get("state", "unknown")
    if state == "running":  # the launch is over: its final state could not be written (a full disk)
        state = f"{ended_state(code)}, not recorded in status.json"
    lines += fold(f"run      {run.run_id}  ({state}, exit code {code})", width, "", " " * 9)
    if status.get("state") == "failed" and status.get("error"):  # what failed, not only the exit code
        lines += fold(f"failed   {status['error']}", width, "", " " * 9)
    lines += fold(f"run dir  {run.run_dir}", width, "", " " * 9)
    if rewards:
        lines += fold(f"reward   rollout/raw_reward {rewards[0]:.3f} -> {rewards[-1]:.3f} over {len(rewards)} rollouts",
                      width, "", " " * 9)
    lines += fold(f"ckpt     {ckpt.save_dir}/iter_{ckpt.latest_complete:07d}" if ckpt.resumable else "ckpt     none yet",
                  width, "", " " * 9)
    roots = runs_root_flag(run.run_dir)
    if status.get("state") != "finished":  # a finished run has nothing to resume: `more` continues it
        lines += _command_line("resume", rerun, "           # same config -> same run_id -> resumes", width)
    lines += _command_line("exec", f"trainstack exec {run.run_id}{roots}", "  # the stored run as it was submitted",
                           width)
    lines += _command_line("more", f"{more} env.num_rollout=<N>", "  # continue the same run for more rollouts", width)
    lines += _command_line("compare", f"trainstack compare {run.run_id}{roots}", "", width)
    lines += _command_line("diff", f"trainstack diff {run.run_id} --against-defaults{roots}", "", width)
    print("\n".join(lines), file=out, flush=True)


def ended_state(code: int) -> str:
    """The state a launch that ended with `code` left (docs/resume.md, exit codes)."""
    if code == 0:
        return "finished"
    if code == 75:
        return "fenced"
    return "interrupted" if code > 128 else "failed"


def _command_line(label: str, command: str, comment: str, width: int | None) -> list[str]:
    """`label    command   # comment` on one line when it fits; else the command folded (backslash-newlines,
    still pasteable) under the label, and the comment on its own line."""
    from trainstack.terminal.tables import fold_shell

    one = f"{label:8} {command} {comment}".rstrip()
    if width is None or len(one) <= width:
        return [one]
    pad = " " * 9
    folded = fold_shell(command, max(width - len(pad), 20))
    lines = [f"{label:8} {folded[0]}"]
    for prev, line in zip(folded, folded[1:]):  # a word cut mid-way continues at column 0
        lines.append(pad + line.lstrip() if prev.endswith(" \\") else line)
    if comment.strip():
        lines += fold(comment.strip(), width, pad, pad + "  ")
    return lines
