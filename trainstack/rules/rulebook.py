"""The list the built-in upstream rules add themselves to (``@rule``), apart from the modules that
hold them: upstream_rules registers the list as one feature and imports the rule modules, which
import only this (no import circle between upstream_rules and megatron/range/switch rules).

A rule applies to the slimes it holds for (trainstack/upstream/cited.py: the versions of the window
whose source says what it ports); another version's run skips it."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

from trainstack.errors import ConfigError

if TYPE_CHECKING:
    from trainstack.rules.validate import Ctx

Rule = Callable[["Ctx"], list[ConfigError]]
UPSTREAM: list[Rule] = []


def rule(fn: Rule) -> Rule:
    @functools.wraps(fn)
    def at_this_slime(ctx: "Ctx") -> list[ConfigError]:
        from trainstack.upstream.argtable import load_table
        from trainstack.upstream.cited import holds

        return fn(ctx) if holds(fn.__name__, load_table().meta.get("slime_version")) else []

    UPSTREAM.append(at_this_slime)
    return at_this_slime
