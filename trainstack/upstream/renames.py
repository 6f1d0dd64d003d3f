"""Did-you-mean across slime versions: a flag (or dest) the run's slime lacks but another known slime has.

`--update-weight-encoding` is slime v0.3.0's; the pin calls it `--update-weight-delta-encoding`. The
new name is the active table's closest dest among those the other version lacks (what was added when
the old one went), so a rename is named as such and nothing is guessed from unrelated flags.
"""
from __future__ import annotations

import difflib
from functools import lru_cache
from typing import TYPE_CHECKING

from trainstack.upstream import versions

if TYPE_CHECKING:
    from trainstack.upstream.argtable import ArgTable


@lru_cache(maxsize=8)
def _dests(path: str) -> tuple[dict[str, dict], dict[str, str]]:
    """({dest: its first record}, {option string: dest}) of a table."""
    doc = versions.read_table(path)
    flags = {o: a["dest"] for a in doc["arguments"] for o in a["option_strings"]}
    records: dict[str, dict] = {}
    for a in doc["arguments"]:
        records.setdefault(a["dest"], a)
    return records, flags


def _shape(rec: dict) -> tuple:
    return tuple(str(rec.get(k)) for k in ("action", "type", "nargs", "choices", "default"))


def _closest(rec: dict, candidates: dict[str, dict]) -> str | None:
    """The candidate most like ``rec`` by name, and by shape (action, type, nargs, choices, default)."""
    best, score = None, 0.0
    for dest, other in candidates.items():
        ratio = difflib.SequenceMatcher(None, rec["dest"], dest).ratio()
        total = ratio + (0.5 if _shape(other) == _shape(rec) else 0.0) if ratio >= 0.6 else 0.0
        if total > score and total >= 0.7:
            best, score = dest, total
    return best


def _renamed_to(rec: dict, table: ArgTable, other: dict[str, dict]) -> str | None:
    """The active table's dest that ``rec`` (a dest of the other version, ``other``) became: among the dests
    one version has and the other lacks, each the closest of the other (a rename pairs one old with one new)."""
    mine: dict[str, dict] = {}
    for a in table.raw_arguments:
        mine.setdefault(a["dest"], a)
    added = {d: a for d, a in mine.items() if d not in other}
    gone = {d: a for d, a in other.items() if d not in mine}
    new = _closest(rec, added)
    return new if new is not None and _closest(added[new], gone) == rec["dest"] else None


def _this(table: ArgTable) -> str:
    name = table.meta.get("slime_version") or str(table.meta.get("slime_commit", "unknown"))[:8]
    return f"slime {name}"


def history(dest: str, table: ArgTable) -> tuple[versions.Known, str | None] | None:
    """(a known slime that has ``dest``, the active table's name for it or None) when the active table
    lacks it."""
    if dest in table:
        return None
    for known in versions.known_tables():
        records, _ = _dests(str(known.path))
        if dest in records:
            return known, _renamed_to(records[dest], table, records)
    return None


def hint_for_dest(dest: str, table: ArgTable, prefix: str = "") -> str | None:
    """`args.update_weight_encoding` -> "slime v0.3.0's name; this slime (...) calls it 'args.update_weight_delta_encoding'"."""
    found = history(dest, table)
    if found is None:
        return None
    known, new = found
    if new is None:
        return f"'{prefix}{dest}' is a flag of {known.label}; {_this(table)}, which this run uses, removed it"
    return (f"'{prefix}{dest}' is {known.label}'s name for it; {_this(table)}, which this run uses, renamed it: "
            f"did you mean '{prefix}{new}'?")


def hint_for_flag(flag: str, table: ArgTable, known: versions.Known | None = None) -> str | None:
    """The same for a flag of a rendered argv (`--update-weight-encoding`)."""
    for other in versions.known_tables():
        _, flags = _dests(str(other.path))
        if flag in flags:
            dest = flags[flag]
            if dest in table:
                return None
            found = history(dest, table)
            new = found[1] if found else None
            where = f"{known.label} " if known else ""
            if new is None:
                return f"{flag} is a flag of {other.label}; {where}removed it"
            return f"{flag} is {other.label}'s name; {where}renamed it to {table[new].flag}"
    return None
