"""Dry-run output: resolved config tree, the three argument groups with their sources, the env,
and a copy-pastable command. Secrets are redacted in everything printed."""
from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from trainstack.render import SlimeCommand
from trainstack.resolve import ResolvedRun

if TYPE_CHECKING:
    from trainstack.preflight import Report
    from trainstack.runspec import RunSpec
from trainstack.secrets import redact


def _flag_rows(cmd: SlimeCommand, run: ResolvedRun, group: str) -> list[tuple[str, str, str]]:
    from trainstack.argtable import load_table
    from trainstack.render import flag_spans

    flags = load_table().flag_to_dest
    return [(flag, " ".join(vals), run.source(flags.get(flag, ""))) for flag, vals in flag_spans(cmd.groups.get(group, []))]


class _Style:
    """ANSI styling on a terminal, plain text in pipes and logs."""

    def __init__(self, stream):
        self.on = bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("NO_COLOR")

    def __call__(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.on else text


def _tree_lines(value: Any, style: _Style, indent: str = "") -> list[str]:
    lines = []
    for k, v in value.items():
        if isinstance(v, dict) and v:
            lines.append(f"{indent}{style(str(k), '36')}:")
            lines += _tree_lines(v, style, indent + "  ")
        else:
            shown = v if isinstance(v, str) else json.dumps(v)
            lines.append(f"{indent}{style(str(k), '36')}: {shown}")
    return lines


def _rule(title: str, style: _Style, width: int = 100) -> str:
    return style(f"── {title} " + "─" * max(width - len(title) - 4, 0), "1")


def print_dry_run(run: ResolvedRun, cmd: SlimeCommand, file=None, report: "Report | None" = None) -> None:
    """Everything a launch would do, nothing done: config tree, argv by group with sources, env, what
    the launch would do with the run dir, the checks deferred to a remote host, the command."""
    out = file or sys.stdout
    st = _Style(out)
    lines = [_rule(f"resolved config: {run.run_id}  (run dir {run.run_dir})", st)]
    lines += _tree_lines(redact(run.config), st)
    for group in ("megatron", "sglang", "slime"):
        rows = _flag_rows(cmd, run, group)
        lines.append(_rule(f"{group} arguments ({len(rows)})", st))
        w_flag = max((len(f) for f, _, _ in rows), default=0)
        w_val = min(max((len(v) for _, v, _ in rows), default=0), 60)
        for flag, value, src in rows:
            lines.append(f"  {st(flag.ljust(w_flag), '32')}  {value.ljust(w_val)}  {st(src, '2')}")
    lines.append(_rule("runtime env", st))
    lines += [f"  {st(k, '32')}={v}" for k, v in sorted(cmd.redacted_env().items())]
    lines += [st("warning: ", "33") + w for w in run.warnings]
    from trainstack import hooks

    env_notes = [n for notes in hooks.get(hooks.DRY_RUN_NOTES) for n in notes(run)]  # e.g. the env server a launch uses
    if report is not None:
        where = "this machine" if report.runs_here else f"a {run.cluster.launcher} host"
        lines.append(_rule(f"launch (the trainer runs on {where})", st))
        if report.plan:
            lines.append(f"  run dir  {run.run_dir}: {report.plan}")
        lines += [st("  note: ", "33") + n for n in [*report.notes, *env_notes]]
        if report.deferred:
            lines.append("  deferred to the host that runs it (checked by `trainstack exec` before the trainer starts):")
            lines += [f"    - {d}" for d in report.deferred]
    else:
        lines += [st("note: ", "33") + n for n in env_notes]
    lines.append(_rule("command", st))
    lines.append(cmd.shell_line())  # one line, never wrapped: copy-pastable
    out.write("\n".join(lines) + "\n")
    out.flush()


def print_sweep_line(run: ResolvedRun, cmd: SlimeCommand, file=None) -> None:
    varying = [o.lstrip("+") for o in run.origin.overrides if not o.startswith(("dry_run", "hydra"))]
    print(f"ok  {run.run_id}  {len(cmd.argv)} tokens  {' '.join(varying)}", file=file or sys.stdout, flush=True)


def write_command_json(cmd: SlimeCommand, run: ResolvedRun, path: str) -> None:
    from trainstack.outputs import write_text

    data = {"run_id": run.run_id, "name": run.name, **cmd.to_json()}
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def print_summary(run: "RunSpec", code: int, file=None) -> None:
    """After a launch: where the run is, how it learned, and the commands that continue it."""
    import shlex

    from trainstack.checkpoints import inspect
    from trainstack.rundir import RunDir

    out = file or sys.stderr
    rd = RunDir(run.run_dir)
    status = rd.status()
    _, rewards = rd.last_metrics()
    ckpt = inspect(run.args.get("save") or str(rd.checkpoints))
    overrides = list(run.overrides)
    rerun = shlex.join(["python", "run.py", *overrides])
    more = shlex.join(["python", "run.py", *[o for o in overrides if not o.startswith("env.num_rollout=")]])
    lines = [
        "",
        f"run      {run.run_id}  ({status.get('state', 'unknown')}, exit code {code})",
        f"run dir  {run.run_dir}",
    ]
    if rewards:
        lines.append(f"reward   rollout/raw_reward {rewards[0]:.3f} -> {rewards[-1]:.3f} over {len(rewards)} rollouts")
    lines.append(f"ckpt     {ckpt.save_dir}/iter_{ckpt.latest_complete:07d}" if ckpt.resumable else "ckpt     none yet")
    import os

    runs_root = os.path.dirname(run.run_dir)
    roots = "" if os.path.abspath("runs") == runs_root else f" --runs-root {shlex.quote(runs_root)}"
    lines += [
        f"resume   {rerun}            # same config -> same run_id -> resumes",
        f"exec     trainstack exec {run.run_id}{roots}   # the stored run as it was submitted",
        f"more     {more} env.num_rollout=<N>   # continue the same run for more rollouts",
        f"compare  trainstack compare {run.run_id}{roots}",
        f"diff     trainstack diff {run.run_id} --against-defaults{roots}",
    ]
    print("\n".join(lines), file=out, flush=True)
