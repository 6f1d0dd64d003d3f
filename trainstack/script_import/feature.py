"""The script importer joins the CLI here (`trainstack import`); nothing is imported until it runs."""
from __future__ import annotations

from typing import Any

from trainstack import hooks


def _cli(sub: Any) -> None:
    from trainstack.script_import.cli import add_import

    add_import(sub)


def register(registry: hooks.Registry) -> None:
    registry.add(hooks.CLI, _cli)
