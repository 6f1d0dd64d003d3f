"""The list the built-in upstream rules add themselves to (``@rule``), apart from the modules that
hold them: upstream_rules registers the list as one feature and imports the rule modules, which
import only this (no import circle between upstream_rules and megatron/range/switch rules)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from trainstack.errors import ConfigError

if TYPE_CHECKING:
    from trainstack.validate import Ctx

Rule = Callable[["Ctx"], list[ConfigError]]
UPSTREAM: list[Rule] = []


def rule(fn: Rule) -> Rule:
    UPSTREAM.append(fn)
    return fn
