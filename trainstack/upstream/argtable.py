"""slime's argument table: every argparse action slime accepts, keyed by dest.

The table (``data/slime_args.json``) was read from slime's real parsers at the commit in
``SLIME_COMMIT``; ``python -m trainstack.upstream.sync_slime`` regenerates it from a checkout.
Rendering, validation and the tiny trainer's parser all come from this one table, so a flag
slime accepts is accepted everywhere and nothing else is.
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
TABLE_PATH = DATA_DIR / "slime_args.json"

# Action kinds, normalised from argparse class names.
STORE = "store"
STORE_TRUE = "store_true"
STORE_FALSE = "store_false"
BOOL_OPTIONAL = "bool_optional"  # --x / --no-x, tri-state with default None
APPEND = "append"

# Value kinds, normalised from the recorded ``type``.
INT, FLOAT, STR, BOOL, JSON, ANY = "int", "float", "str", "bool", "json", "any"

SUPPRESS = "==SUPPRESS=="

# Which argv group a source belongs to.
GROUP_OF_SOURCE = {
    "megatron": "megatron",
    "sglang": "sglang",
    "sglang_router": "sglang",
    "slime(sglang-parser)": "sglang",
    "slime": "slime",
    "slime(pre-parse)": "slime",
}
GROUPS = ("megatron", "sglang", "slime")

_ACTION_KIND = {
    "_StoreAction": STORE,
    "DeprecatedAliasStoreAction": STORE,
    "LoRAPathAction": STORE,
    "_StoreTrueAction": STORE_TRUE,
    "DeprecatedStoreTrueAction": STORE_TRUE,
    "_StoreFalseAction": STORE_FALSE,
    "BooleanOptionalAction": BOOL_OPTIONAL,
    "_AppendAction": APPEND,
}
_DEPRECATED_ACTIONS = {
    "DeprecatedAliasStoreAction",
    "DeprecatedStoreTrueAction",
    "DeprecatedStoreConstAction",
    "DeprecatedAction",
}


def _value_kind(type_name: str | None, kind: str) -> str:
    if kind in (STORE_TRUE, STORE_FALSE, BOOL_OPTIONAL):
        return BOOL
    if type_name in ("int", "float", "str", "bool"):
        return type_name
    if type_name == "json.loads":
        return JSON
    if type_name and type_name.endswith("json_list_type"):
        return JSON
    if type_name is None:
        return STR
    return ANY  # Megatron/SGLang converters (moe_freq_type, human_readable_int, enums...)


@dataclass(frozen=True)
class ArgSpec:
    """One slime dest and the single action trainstack emits for it."""

    dest: str
    flag: str  # the flag we emit (for store_false: the flag that sets False)
    option_strings: tuple[str, ...]
    kind: str
    value_kind: str
    nargs: str | None  # None, "+", "*", "?", or a count
    choices: tuple[Any, ...] | None
    default: Any
    source: str
    group: str  # megatron | sglang | slime
    deprecated: bool = False
    # For switch dests: the option that sets True / False, whichever action of the dest has it
    # (`disable_chunked_prefill`: --disable-chunked-prefill / --enable-chunked-prefill).
    true_flag: str | None = None
    false_flag: str | None = None

    @property
    def is_list(self) -> bool:
        return self.nargs in ("+", "*") or (self.nargs is not None and self.nargs.isdigit() and int(self.nargs) > 1) or self.kind == APPEND

    @property
    def is_switch(self) -> bool:
        """Takes no value: the flag (or its negative) sets True/False."""
        return self.kind in (STORE_TRUE, STORE_FALSE, BOOL_OPTIONAL)

    @property
    def has_default(self) -> bool:
        return self.default != SUPPRESS

    @property
    def no_flag(self) -> str | None:
        """For --[no-]x actions, the negative flag."""
        if self.kind != BOOL_OPTIONAL:
            return None
        return next((o for o in self.option_strings if o.startswith("--no-")), None)

    def choice_values(self) -> tuple[Any, ...] | None:
        """Choices as users write them (``AttnBackend.flash`` -> ``flash``)."""
        if self.choices is None:
            return None
        out = []
        for c in self.choices:
            if isinstance(c, str) and "." in c and c.split(".", 1)[0][:1].isupper():
                c = c.split(".", 1)[1]
            out.append(c)
        return tuple(out)


def _pick_action(actions: list[dict]) -> dict:
    """A dest with several actions: prefer the non-deprecated plain store/flag action."""
    ranked = sorted(
        actions,
        key=lambda a: (
            a["action"] in _DEPRECATED_ACTIONS,
            a["action"] not in _ACTION_KIND,
            # --disable-chunked-prefill (store_true) over --enable-chunked-prefill (store_false)
            a["action"] != "_StoreTrueAction" and a["action"] != "_StoreAction",
        ),
    )
    return ranked[0]


def _switch_flags(actions: list[dict]) -> tuple[str | None, str | None]:
    """(flag that sets the dest True, flag that sets it False) over all of a dest's actions,
    preferring non-deprecated ones."""
    true_flag = false_flag = None
    for a in sorted(actions, key=lambda a: a["action"] in _DEPRECATED_ACTIONS, reverse=True):
        kind = _ACTION_KIND.get(a["action"])
        longs = [o for o in a["option_strings"] if o.startswith("--")]
        if kind == STORE_TRUE and longs:
            true_flag = longs[0]
        elif kind == STORE_FALSE and longs:
            false_flag = longs[0]
        elif kind == BOOL_OPTIONAL:
            true_flag = next((o for o in longs if not o.startswith("--no-")), true_flag)
            false_flag = next((o for o in longs if o.startswith("--no-")), false_flag)
    return true_flag, false_flag


class _Specs(Mapping[str, ArgSpec]):
    """dest -> ArgSpec in table order, each spec built the first time it is asked for: a dry run
    reads ~140 of the table's ~1,400 dests, and building all of them up front was two thirds of the
    table's load time."""

    def __init__(self, by_dest: dict[str, list[dict]]):
        self._actions = by_dest
        self._built: dict[str, ArgSpec] = {}

    def __getitem__(self, dest: str) -> ArgSpec:
        spec = self._built.get(dest)
        if spec is None:
            spec = self._built[dest] = _spec(dest, self._actions[dest])  # KeyError: not a dest
        return spec

    def __contains__(self, dest: object) -> bool:
        return dest in self._actions

    def __iter__(self) -> Iterator[str]:
        return iter(self._actions)

    def __len__(self) -> int:
        return len(self._actions)


def _kind_of(chosen: dict) -> str:
    kind = _ACTION_KIND.get(chosen["action"])
    if kind is None:  # only deprecated no-op actions: keep them parseable, never emitted
        kind = STORE_TRUE if chosen.get("nargs") == 0 else STORE
    return kind


def _spec(dest: str, actions: list[dict]) -> ArgSpec:
    """The one action trainstack emits for a dest with these recorded actions."""
    chosen = _pick_action(actions)
    kind = _kind_of(chosen)
    true_flag, false_flag = _switch_flags(actions)
    opts = tuple(chosen["option_strings"])
    flag = next((o for o in opts if o.startswith("--") and not o.startswith("--no-")), opts[0])
    choices = chosen.get("choices")
    return ArgSpec(
        dest=dest,
        flag=flag,
        option_strings=opts,
        kind=kind,
        value_kind=_value_kind(chosen.get("type"), kind),
        nargs=None if chosen.get("nargs") in (None, 0) else str(chosen["nargs"]),
        choices=tuple(choices) if choices else None,
        default=chosen.get("default"),
        source=chosen["source"],
        group=GROUP_OF_SOURCE.get(chosen["source"], "slime"),
        deprecated=chosen["action"] in _DEPRECATED_ACTIONS,
        true_flag=true_flag,
        false_flag=false_flag,
    )


class ArgTable:
    """Lookup by dest, plus the flag -> dest map the tiny trainer and argv parsing need."""

    def __init__(self, raw: dict):
        self.meta: dict = raw["meta"]
        self.raw_arguments: list[dict] = raw["arguments"]  # as recorded, in parser order (the tiny parser)
        by_dest: dict[str, list[dict]] = {}
        for a in raw["arguments"]:
            by_dest.setdefault(a["dest"], []).append(a)
        self._by_dest = by_dest
        self.specs: Mapping[str, ArgSpec] = _Specs(by_dest)

    @cached_property
    def flag_to_dest(self) -> dict[str, str]:
        """Every option string of every action -> its dest."""
        return {opt: dest for dest, actions in self._by_dest.items() for a in actions for opt in a["option_strings"]}

    @cached_property
    def aliases(self) -> dict[str, str]:
        """Another option string's name for a dest, written as a key (`sglang_cuda_graph_bs` for
        `--sglang-cuda-graph-bs`, sglang's alias of sglang_cuda_graph_bs_decode). Only options that
        store the value as given: a store_false or `--no-x` name means the opposite of its dest."""
        out: dict[str, str] = {}
        for dest, actions in self._by_dest.items():
            for a in actions:
                for opt in a["option_strings"]:
                    name = opt.lstrip("-").replace("-", "_")
                    if (opt.startswith("--") and name != dest and name not in self._by_dest and not opt.startswith("--no-")
                            and _ACTION_KIND.get(a["action"]) in (STORE, STORE_TRUE, APPEND)):
                        out[name] = dest
        return out

    def defaults(self) -> Iterator[tuple[str, Any, str]]:
        """(dest, default, value kind) of every dest in table order, as its spec has them, without building
        the specs (the tiny trainer's namespace starts from all ~1,400 of them)."""
        for dest, actions in self._by_dest.items():
            chosen = _pick_action(actions)
            yield dest, chosen.get("default"), _value_kind(chosen.get("type"), _kind_of(chosen))

    @property
    def slime_commit(self) -> str:
        return self.meta.get("slime_commit", "unknown")

    def __contains__(self, dest: str) -> bool:
        return dest in self.specs

    def __getitem__(self, dest: str) -> ArgSpec:
        return self.specs[dest]

    def get(self, dest: str) -> ArgSpec | None:
        return self.specs.get(dest)

    def dests(self) -> Iterable[str]:
        return self.specs.keys()

    def canonical(self, name: str) -> str | None:
        """The dest a key names: itself, or the dest of the option it is an alias of."""
        return name if name in self.specs else self.aliases.get(name)

    def suggest(self, name: str, n: int = 3) -> list[str]:
        """Closest dests for a misspelled key; also understands flag spellings (--foo-bar)."""
        key = name.lstrip("-").replace("-", "_")
        if ("--" + name.lstrip("-")) in self.flag_to_dest:
            return [self.flag_to_dest["--" + name.lstrip("-")]]
        if key in self.specs:
            return [key]
        if key in self.aliases:
            return [self.aliases[key]]
        # SGLang's parser takes abbreviations (`--sglang-mem-frac`), so a user who writes one means
        # the flag it abbreviates, not whatever is closest by edit distance.
        prefixed = [d for d in self.specs if d.startswith(key)]
        if 0 < len(prefixed) <= n:
            return prefixed
        return difflib.get_close_matches(key, list(self.specs), n=n, cutoff=0.75)


_ACTIVE: list[str] = []  # the table of the run's slime checkout (trainstack.upstream.select); empty: the pin's


def use_table(path: str | Path | None) -> None:
    """Make ``path`` the table ``load_table()`` returns in this process (None: the packaged pin's)."""
    _ACTIVE[:] = [str(path)] if path is not None and Path(path) != TABLE_PATH else []


def load_table(path: str | None = None) -> ArgTable:
    """The table at ``path``; by default the active one (the run's slime), else the packaged pin's."""
    return _load_table(str(path or (_ACTIVE[0] if _ACTIVE else TABLE_PATH)))


@lru_cache(maxsize=4)
def _load_table(path: str) -> ArgTable:
    if Path(path) == TABLE_PATH:
        with open(path, encoding="utf-8") as f:
            return ArgTable(json.load(f))
    from trainstack.upstream.versions import read_table  # a packaged delta or a cached table

    return ArgTable(read_table(path))


@lru_cache(maxsize=1)
def load_help() -> dict[str, str]:
    """dest -> help text from slime's parsers (`python -m trainstack.upstream.sync_slime help`)."""
    path = DATA_DIR / "slime_help.json"
    if not path.exists():
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)["help"]


def did_you_mean(candidates: list[str], prefix: str = "") -> str:
    if not candidates:
        return ""
    return "did you mean " + " or ".join(f"'{prefix}{c}'" for c in candidates) + "?"
