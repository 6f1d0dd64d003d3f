"""Megatron's, SGLang's and sglang-router's argument definitions, replayed from a recorded table.

slime builds its parsers by calling three libraries it does not own: Megatron-LM's
``add_megatron_arguments``, SGLang's ``ServerArgs.add_cli_args`` and sglang-router's
``RouterArgs.add_cli_args``. Those are a 6 GB GPU stack, and none of them changes when slime does
(they are pinned by slime's docker image, not by slime's source). So slime's own code (its flags, its
prefixing of SGLang's, the defaults it resets) can run on any machine against these stand-ins: each
adds exactly the actions the real library added when the table was recorded (same option strings,
dest, action class name, type name, default, choices, nargs, group), with the library's own default
(``megatron_default`` where slime overrode Megatron's; ``ROUTER_OWN_DEFAULTS`` for the router).

Used by ``trainstack.upstream.build`` (the table of any slime checkout) and by the tests that run
slime's own ``parse_args`` (``trainstack.upstream.realparse``) without the GPU stack.
"""
from __future__ import annotations

import argparse
import json
import sys
import types
from typing import Any, Callable

MEGATRON, SGLANG, ROUTER = "megatron", "sglang", "sglang_router"
PREFIX = "--sglang-"

# sglang-router 0.3.2's own defaults of the dests slime re-defaults with `parser.set_defaults` at the pin
# (sglang_router/router_args.py: `balance_abs_threshold: int = 64`, `balance_rel_threshold: float = 1.5`,
# `log_level: Optional[str] = None`); the recorded table holds slime's values.
ROUTER_OWN_DEFAULTS: dict[str, Any] = {"router_balance_abs_threshold": 64, "router_balance_rel_threshold": 1.5,
                                       "router_log_level": None}

# argparse's own classes by the name the table records; any other name (SGLang's DeprecatedAliasStoreAction,
# LoRAPathAction, ...) becomes a subclass of the closest one, with that name.
_BASE_ACTIONS: dict[str, type[argparse.Action]] = {
    "_StoreAction": argparse._StoreAction, "_StoreTrueAction": argparse._StoreTrueAction,
    "_StoreFalseAction": argparse._StoreFalseAction, "_StoreConstAction": argparse._StoreConstAction,
    "_AppendAction": argparse._AppendAction, "_CountAction": argparse._CountAction,
    "BooleanOptionalAction": argparse.BooleanOptionalAction,
}
_CLASSES: dict[str, type[argparse.Action]] = {}


def action_class(name: str, nargs: Any) -> type[argparse.Action]:
    if name in _BASE_ACTIONS:
        return _BASE_ACTIONS[name]
    if name not in _CLASSES:
        if nargs == 0:
            base: type[argparse.Action] = argparse._StoreConstAction if "Const" in name else argparse._StoreTrueAction
        else:
            base = argparse._StoreAction
        _CLASSES[name] = type(name, (base,), {"__module__": "trainstack.upstream.replay"})
    return _CLASSES[name]


def type_callable(name: str | None) -> Callable[[str], Any] | None:
    """A converter whose recorded name (`_type_name` in sync_slime) is ``name``: builtins and json.loads
    themselves; a library's own converter (``megatron.training.arguments.moe_freq_type``) as a function of
    that name that keeps the string (the library's conversion is not reproduced)."""
    if name is None:
        return None
    builtins: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "str": str, "bool": bool,
                                                "json.loads": json.loads}
    builtin = builtins.get(name)
    if builtin is not None:
        return builtin
    head, _, rest = name.partition(".")

    def convert(value: str) -> str:
        return value

    convert.__module__, convert.__qualname__, convert.__name__ = head, rest, rest.rpartition(".")[2]
    return convert


def _action(rec: dict, default: Any, **given: Any) -> argparse.Action:
    """The action ``rec`` records, with ``default``; ``given`` (argparse's option_strings / dest) wins."""
    cls = action_class(rec["action"], rec.get("nargs"))
    act = cls.__new__(cls)
    argparse.Action.__init__(act, option_strings=given.get("option_strings", rec["option_strings"]),
                             dest=given.get("dest", rec["dest"]), nargs=rec.get("nargs"), const=rec.get("const"),
                             default=default, type=type_callable(rec.get("type")), choices=rec.get("choices"),
                             required=bool(rec.get("required")), help=None, metavar=rec.get("metavar"))
    return act


def _add(container: Any, rec: dict, default: Any) -> None:
    container._add_action(_action(rec, default))


class Layers:
    """The three libraries' actions, split out of a recorded table (``slime_args.json``)."""

    def __init__(self, table: dict):
        args = table["arguments"]
        self.megatron = [a for a in args if a["source"] == MEGATRON]
        self.sglang = [a for a in args if a["source"] == SGLANG]
        self.router = [a for a in args if a["source"] == ROUTER]
        self.meta = {k: table["meta"].get(k) for k in ("megatron_lm_commit", "megatron_patch", "sglang_version",
                                                      "sglang_patch", "sglang_router_version")}

    # --- megatron.training.arguments.add_megatron_arguments ------------------------------------------
    def add_megatron_arguments(self, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        groups: dict[str, Any] = {}
        for rec in self.megatron:
            title = rec.get("argparse_group") or ""
            if title not in groups:
                groups[title] = parser.add_argument_group(title=title)
            _add(groups[title], rec, rec["megatron_default"] if rec.get("slime_overrides_default") else rec["default"])
        return parser

    # --- sglang.srt.server_args.ServerArgs.add_cli_args ---------------------------------------------
    def add_server_args(self, parser: Any) -> None:
        """Through ``parser.add_argument`` (slime wraps it to prefix `--sglang-` and skip some), with the
        flags and dests as SGLang itself names them."""
        for rec in self.sglang:
            flags = ["--" + o[len(PREFIX):] if o.startswith(PREFIX) else o for o in rec["option_strings"]
                     if not (rec["action"] == "BooleanOptionalAction" and o.startswith("--no-"))]
            dest = rec["dest"][len("sglang_"):] if rec["dest"].startswith("sglang_") else rec["dest"]

            def make(*, _rec: dict = rec, **kw: Any) -> argparse.Action:
                opts = list(kw["option_strings"])
                if _rec["action"] == "BooleanOptionalAction":  # argparse adds --no-X for each --X, as for SGLang's
                    opts += ["--no-" + o[2:] for o in kw["option_strings"] if o.startswith("--")]
                return _action(_rec, kw.get("default", _rec["default"]), option_strings=opts, dest=kw["dest"])

            parser.add_argument(*flags, dest=dest, action=make, default=rec["default"])

    # --- sglang_router.launch_router.RouterArgs.add_cli_args ----------------------------------------
    def add_router_args(self, parser: Any, use_router_prefix: bool = False, exclude_host_port: bool = False) -> None:
        if not (use_router_prefix and exclude_host_port):
            raise NotImplementedError("the replayed sglang-router args were recorded with use_router_prefix=True, "
                                      "exclude_host_port=True (how slime calls RouterArgs.add_cli_args)")
        groups: dict[str, Any] = {}
        for rec in self.router:
            title = rec.get("argparse_group") or ""
            if title not in groups:
                groups[title] = parser.add_argument_group(title=title)
            _add(groups[title], rec, ROUTER_OWN_DEFAULTS.get(rec["dest"], rec["default"]))


def _module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name, f"trainstack replay of {name} (trainstack/upstream/replay.py)")
    mod.__path__ = []  # a package: submodules can be registered under it
    mod.__trainstack_standin__ = True  # type: ignore[attr-defined]
    for k, v in attrs.items():
        setattr(mod, k, v)
    return mod


def _not_here(qualname: str) -> Callable[..., Any]:
    def standin(*args: object, **kwargs: object) -> Any:
        raise RuntimeError(f"{qualname} belongs to the GPU stack; trainstack's replay only defines its arguments")
    return standin


def install(table: dict, extra: dict[str, dict[str, Any]] | None = None) -> Layers:
    """Register the stand-in modules in ``sys.modules`` (a fresh process: nothing of the real stack imported).
    ``extra``: more names for a module (`{"megatron.training.arguments": {"parse_args": fn}}`)."""
    layers = Layers(table)
    server_args = type("ServerArgs", (), {"__module__": "sglang.srt.server_args",
                                          "add_cli_args": staticmethod(layers.add_server_args)})
    router_args = type("RouterArgs", (), {"__module__": "sglang_router.router_args",
                                          "add_cli_args": staticmethod(layers.add_router_args)})
    mods: dict[str, dict[str, Any]] = {
        "megatron": {}, "megatron.training": {},
        "megatron.training.arguments": {"add_megatron_arguments": layers.add_megatron_arguments},
        "sglang": {}, "sglang.srt": {},
        "sglang.srt.server_args": {"ServerArgs": server_args},
        "sglang.srt.constants": {n: n.lower() for n in ("GPU_MEMORY_TYPE_CUDA_GRAPH", "GPU_MEMORY_TYPE_KV_CACHE",
                                                         "GPU_MEMORY_TYPE_WEIGHTS")},
        "sglang.srt.utils": {"kill_process_tree": _not_here("sglang.srt.utils.kill_process_tree")},
        "sglang_router": {}, "sglang_router.launch_router": {"RouterArgs": router_args},
        "sglang_router.router_args": {"RouterArgs": router_args},
    }
    for name, attrs in (extra or {}).items():
        mods.setdefault(name, {}).update(attrs)
    for name, attrs in mods.items():
        if name in sys.modules and not getattr(sys.modules[name], "__trainstack_standin__", False):
            raise RuntimeError(f"the real {name} is imported in this process; the replay needs a fresh one")
        sys.modules[name] = _module(name, **attrs)
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, sys.modules[name])
    return layers
