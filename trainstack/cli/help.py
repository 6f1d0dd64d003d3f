"""`trainstack --help`: the commands grouped by what a user is doing (launching, following, comparing,
looking up), then examples, each of which runs as printed (tests/test_help_page.py runs them).

Why not argparse's page: it lists the commands in registration order under a `{run,render,...}` line
wider than a terminal, with no examples. A command a feature adds that no group names is listed
under "more"."""
from __future__ import annotations

import argparse

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("launch", ("run", "render", "exec", "prepare")),
    ("follow", ("status", "logs", "cancel", "resume")),
    ("compare", ("compare", "diff", "sync")),
    ("look up", ("args", "env", "hub")),
    ("services", ("commander",)),
)

# (command, what it shows): each runs as printed in an empty directory (exit 0, or 1 for a diff that differs)
EXAMPLES: tuple[tuple[str, str], ...] = (
    ("trainstack run dry_run=short", "the CPU smoke run, checked: the verdict and its summary"),
    ("trainstack run -m algo.lr=1e-3,2e-3 dry_run=true", "a sweep, checked: one line per point"),
    ("trainstack status", "every run under ./runs ($TRAINSTACK_RUNS_ROOT)"),
    ("trainstack diff default algo.lr=2e-3", "what an override changes in the config and argv"),
    ("trainstack args --search mem_fraction", "slime's flags containing a word"),
    ("trainstack render experiment=qwen3-4B-base-sft --format shell", "slime's command for a recipe"),
)


def top_help(parser: argparse.ArgumentParser, width: int) -> str:
    """The page: usage, description, the commands by group, examples, options."""
    from trainstack.terminal.tables import fold

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    named = [c for _, cmds in GROUPS for c in cmds]
    groups = [(title, [c for c in cmds if c in helps]) for title, cmds in GROUPS]
    groups.append(("more", [c for c in helps if c not in named]))
    w_cmd = max(len(c) for c in helps) + 2
    lines = [f"usage: {parser.prog} [-h] [--version] COMMAND ...", ""]
    lines += fold(parser.description or "", width, "", "")
    for title, cmds in groups:
        if not cmds:
            continue
        lines += ["", f"{title}:"]
        for c in cmds:
            lines += fold(f"{c.ljust(w_cmd)}{helps[c]}", width, "  ", " " * (w_cmd + 2))
    lines += ["", "examples:"]
    w_ex = max(len(cmd) for cmd, _ in EXAMPLES) + 2
    for cmd, what in EXAMPLES:
        one = f"  {cmd.ljust(w_ex)}# {what}"
        lines += [one] if len(one) <= width else [f"  {cmd}", *fold(f"# {what}", width, "    ", "      ")]
    options = [(", ".join(a.option_strings), a.help or "") for a in parser._actions if a.option_strings]
    w_opt = max(len(o) for o, _ in options) + 2
    lines += ["", "options:"]
    for opt, text in options:
        lines += fold(f"{opt.ljust(w_opt)}{text}", width, "  ", " " * (w_opt + 2))
    return "\n".join(lines) + "\n"
