"""Dry-run output: resolved config tree, the three argument groups with their sources, the env,
and a copy-pastable command. Secrets are redacted in everything printed."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from trainstack.render import REDACTED, SlimeCommand
from trainstack.resolve import ResolvedRun, is_secret_name


def redact(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: (REDACTED if is_secret_name(str(k)) and v not in (None, "", {}) and not isinstance(v, (dict, bool))
                    else redact(v)) for k, v in tree.items()}
    if isinstance(tree, list):
        return [redact(v) for v in tree]
    return tree


def _flag_rows(cmd: SlimeCommand, run: ResolvedRun, group: str) -> list[tuple[str, str, str]]:
    from trainstack.argtable import load_table

    table = load_table()
    rows, toks = [], cmd.groups.get(group, [])
    i = 0
    while i < len(toks):
        flag = toks[i]
        j = i + 1
        while j < len(toks) and not (toks[j].startswith("--") and toks[j] in table.flag_to_dest):
            j += 1
        dest = table.flag_to_dest.get(flag, "")
        rows.append((flag, " ".join(toks[i + 1:j]), run.source(dest)))
        i = j
    return rows


def print_dry_run(run: ResolvedRun, cmd: SlimeCommand, file=None) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.tree import Tree

    out = file or sys.stdout
    console = Console(file=out, soft_wrap=False, highlight=False,
                      width=None if getattr(out, "isatty", lambda: False)() else 160)
    tree = Tree(f"[bold]{run.run_id}[/]  (run dir {run.run_dir})")

    def add(node: Tree, value: Any) -> None:
        for k, v in value.items():
            if isinstance(v, dict):
                add(node.add(f"[cyan]{k}[/]"), v) if v else node.add(f"[cyan]{k}[/]: {{}}")
            else:
                node.add(f"[cyan]{k}[/]: {json.dumps(v) if not isinstance(v, str) else v}")

    add(tree, redact(run.config))
    console.rule("resolved config")
    console.print(tree)
    for group in ("megatron", "sglang", "slime"):
        rows = _flag_rows(cmd, run, group)
        t = Table(title=f"{group} arguments ({len(rows)})", title_justify="left", show_edge=False, expand=False)
        t.add_column("flag", style="green", no_wrap=True)
        t.add_column("value", overflow="fold")
        t.add_column("from", style="dim", no_wrap=True)
        for flag, value, src in rows:
            t.add_row(flag, value, src)
        console.print(t)
    env = Table(title="runtime env", title_justify="left", show_edge=False)
    env.add_column("var", style="green")
    env.add_column("value", overflow="fold")
    for k, v in sorted(cmd.redacted_env().items()):
        env.add_row(k, v)
    console.print(env)
    for w in run.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    console.rule("command")
    # Plain print: rich would wrap the line and break copy-paste.
    print(cmd.shell_line(), file=file or sys.stdout, flush=True)


def print_sweep_line(run: ResolvedRun, cmd: SlimeCommand, file=None) -> None:
    varying = [o.lstrip("+") for o in run.origin.overrides if not o.startswith(("dry_run", "hydra"))]
    print(f"ok  {run.run_id}  {len(cmd.argv)} tokens  {' '.join(varying)}", file=file or sys.stdout, flush=True)


def write_command_json(cmd: SlimeCommand, run: ResolvedRun, path: str) -> None:
    data = {"run_id": run.run_id, "name": run.name, **cmd.to_json()}
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def print_summary(run: ResolvedRun, code: int, file=None) -> None:
    """After a launch: where the run is, how it learned, and the commands that continue it."""
    import shlex

    from trainstack.checkpoints import inspect
    from trainstack.rundir import RunDir

    out = file or sys.stderr
    rd = RunDir(run.run_dir)
    status = rd.status()
    _, rewards = rd.last_metrics()
    ckpt = inspect(run.args.get("save") or str(rd.checkpoints))
    overrides = [o.lstrip("+") for o in run.origin.overrides]
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

    roots = "" if os.path.abspath("runs") == run.paths.runs_root else f" --runs-root {shlex.quote(run.paths.runs_root)}"
    lines += [
        f"resume   {rerun}            # same config -> same run_id -> resumes",
        f"more     {more} env.num_rollout=<N>   # continue the same run for more rollouts",
        f"compare  trainstack compare {run.run_id}{roots}",
        f"diff     trainstack diff {run.run_id} --against-defaults{roots}",
    ]
    print("\n".join(lines), file=out, flush=True)
