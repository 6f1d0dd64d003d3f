"""pytest plugin (`-p slime_contract_args`) that runs slime's own plugin-contract tests
(slime/tests/plugin_contracts) against trainstack's plugins, as tests/test_slime_plugin_contracts.py
does: slime imports on CPU as the tiny backend imports it (its SGLang stand-ins), and every `args`
object the contract tests make falls back to the args a trainstack run passes
(`$TRAINSTACK_CONTRACT_ARGS`: a JSON file of contract file stem -> args) for the attributes their own
Args class does not set: the contract's values and the test's overrides win, the plugin finds the rest
as in a run."""
from __future__ import annotations

import json
import os
from typing import Any


def pytest_configure(config: Any) -> None:
    from trainstack.tiny import slime_upstream

    slime_upstream.load()


def _with_run_args(obj: Any, run_args: dict[str, Any]) -> Any:
    def __getattr__(self: Any, name: str) -> Any:  # only reached for what the contract's Args lacks
        try:
            return run_args[name]
        except KeyError:
            raise AttributeError(name) from None

    type(obj).__getattr__ = __getattr__
    return obj


def pytest_collection_modifyitems(session: Any, config: Any, items: list) -> None:
    path = os.environ.get("TRAINSTACK_CONTRACT_ARGS")
    with open(path, encoding="utf-8") if path else open(os.devnull) as f:
        by_file = json.loads(f.read() or "{}")
    for module in {getattr(item, "module", None) for item in items} - {None}:
        make = getattr(module, "make_args", None)
        if make is None or getattr(make, "trainstack_run_args", False):
            continue
        run_args = by_file.get(module.__name__.rpartition(".")[2], {})

        def make_args(*args: Any, _make: Any = make, _run: dict = run_args, **overrides: Any) -> Any:
            return _with_run_args(_make(*args, **overrides), _run)

        make_args.trainstack_run_args = True  # type: ignore[attr-defined]
        module.make_args = make_args
