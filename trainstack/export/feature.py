"""The export feature joins the core with its `trainstack export` command only."""
from __future__ import annotations

from typing import Any

from trainstack import hooks


def _cli(sub: Any) -> None:
    from trainstack.export.cli import add_export

    add_export(sub)


def register(registry: hooks.Registry) -> None:
    registry.add(hooks.CLI, _cli)
