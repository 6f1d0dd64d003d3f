"""Finding the features: the `trainstack.features` entry-point group.

Each entry point names a `register(registry)` function (pyproject.toml lists trainstack's own:
upstream rules, Hub sync, HTTP envs, the tiny trainer); a third party's package adds its own
the same way and trainstack finds it once that package is installed. Discovery reads the
installed metadata once per process (`hooks.registry()` calls `discover` once), and feature modules
import nothing heavy at import time, so a dry run pays a few milliseconds for it.

A checkout whose installed metadata predates a feature (an editable install made before
pyproject.toml gained the group) would silently lose that feature's checks and hooks; then the
group is read from the checkout's own pyproject.toml instead.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Callable

GROUP = "trainstack.features"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def declared() -> dict[str, str]:
    """name -> "module:function" for every installed feature (trainstack's own included)."""
    from importlib.metadata import PackageNotFoundError, distribution, entry_points

    found = {ep.name: ep.value for ep in entry_points(group=GROUP)}
    try:
        ours = [ep for ep in distribution("trainstack").entry_points if ep.group == GROUP]
    except PackageNotFoundError:
        ours = []
    if not ours:  # not installed, or installed from an older pyproject: the checkout says
        for name, value in _from_pyproject().items():
            found.setdefault(name, value)
    return found


def _from_pyproject() -> dict[str, str]:
    if not PYPROJECT.is_file() or sys.version_info < (3, 11):
        return {}
    import tomllib

    with open(PYPROJECT, "rb") as f:
        data = tomllib.load(f)
    return dict(data.get("project", {}).get("entry-points", {}).get(GROUP, {}))


def resolve(value: str) -> Callable[[Any], None]:
    module, _, attr = value.partition(":")
    obj = importlib.import_module(module.strip())
    for part in (attr.strip() or "register").split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def discover() -> list[tuple[str, Callable[[Any], None]]]:
    """(name, register function) of every feature, in name order (hooks.Registry orders the hooks)."""
    return [(name, resolve(value)) for name, value in sorted(declared().items())]
