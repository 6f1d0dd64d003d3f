"""Use the argument table of the slime checkout a run names, and refuse a checkout trainstack has no table for.

A run's slime checkout (`slime.root`) is identified by content (``versions.identify``); when this
machine has it, its table becomes the process's table (``argtable.use_table``) before any key is
checked, so a run on a v0.3.0 checkout is rendered and validated with v0.3.0's flags. A checkout that
is not here (a remote launcher's host) leaves the packaged pin's table; `trainstack exec` checks the
checkout there (``checkout_problems``): its content must be known and every flag of the rendered
argv must be one of its flags.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

from trainstack.errors import ConfigError
from trainstack.upstream import versions

SYNC_HINT = "trainstack slime sync --slime-root {root}"


def has_checkout(root: str | Path) -> bool:
    return (Path(root) / "slime" / "__init__.py").is_file()


def activate_for_root(root: str | Path | None) -> versions.Known | None:
    """Make the table of the checkout at ``root`` the process's table; the pin's when the checkout is not
    here or is unknown (the host check then says so). Returns the table identified, if any."""
    from trainstack.upstream import argtable

    known = versions.identify(root) if root is not None and has_checkout(root) else None
    argtable.use_table(known.path if known is not None else None)
    return known


def table_label() -> str:
    """`slime v0.3.0 (bf14dc21)`: the slime whose table this process uses."""
    from trainstack.upstream.argtable import load_table

    meta = load_table().meta
    commit = str(meta.get("slime_commit") or "unknown")
    name = str(meta.get("slime_version") or commit[:8])
    return f"slime {name}" + (f" ({commit[:8]})" if not name.startswith(commit[:8]) else "")


def root_from_overrides(overrides: Sequence[str], cwd: str | None = None) -> str:
    """`slime.root` as the command line gives it, resolved by the one rule every backend uses
    (trainstack/upstream/slime_root.py: the value, `$TRAINSTACK_SLIME_ROOT`, `$SLIME_ROOT`, `./slime`, the checkout's
    submodule), absolute."""
    from trainstack.upstream.slime_root import resolve

    root = None
    for tok in overrides:
        key, eq, value = tok.lstrip("+~").partition("=")
        if eq and key == "slime.root" and value and value != "null":
            root = value
    return resolve(root, cwd or os.getcwd())


def checkout_problems(root: str | Path, flags: Iterable[str] = (), key: str = "slime.root") -> list[ConfigError]:
    """The checkout's content must be one trainstack has a table for, and (given the rendered argv's flags)
    each flag must be one of that slime's."""
    known = versions.identify(root)
    if known is None:
        names = ", ".join(k.label for k in versions.known_tables())
        return [ConfigError(key, f"the slime checkout {root} is not a slime version trainstack has an argument "
                            f"table for (its argument files match none of: {names}), so its flags, defaults and "
                            "checks are unknown",
                            f"build its table once: `{SYNC_HINT.format(root=root)}` (a few seconds, written to "
                            f"{versions.cache_dir()}), or use a checkout of a known version "
                            f"(`git submodule update --init slime` for the pin, {versions.pin().commit[:8]})",
                            value=str(root))]
    from trainstack.upstream.argtable import ArgTable
    from trainstack.upstream.renames import hint_for_flag

    table = ArgTable(versions.read_table(known.path))
    errors = []
    for flag in flags:
        if flag.startswith("--") and flag not in table.flag_to_dest:
            errors.append(ConfigError(key, f"the rendered command passes {flag}, which {known.label} at {root} does "
                                      "not have (slime would silently ignore it)",
                                      hint_for_flag(flag, table, known) or "render the run for this slime (run the "
                                      "launch on a machine with this checkout), or use the slime the run was "
                                      "rendered for", value=str(root)))
    return errors
