"""Loading and calling slime plugins by dotted path, with slime's calling conventions."""
from __future__ import annotations

import asyncio
import importlib
import inspect
from typing import Any, Callable

from trainstack.errors import ConfigError, ConfigErrors


def load_function(path: str, flag: str) -> Callable:
    """``pkg.module.fn`` -> the callable (slime uses import_module + getattr; no ``file.py:fn``)."""
    mod_name, _, attr = path.rpartition(".")
    try:
        if not mod_name:
            raise ImportError("not a dotted path")
        return getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigErrors([ConfigError(flag, f"cannot import {path!r}: {e}", value=path, source="command line",
                                        fix="use a dotted path module.function importable on PYTHONPATH")]) from None


def accepts(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


async def maybe_await(x: Any) -> Any:
    return await x if inspect.isawaitable(x) else x


def run(coro) -> Any:
    return asyncio.run(coro)
