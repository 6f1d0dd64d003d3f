"""The per-dest oracle (issue #24): every slime dest a user can set, judged by slime's real parser.

`make oracle` (scripts/oracle/per_dest.py) set every dest of slime's argument table to values of its
kind on a base where it matters, batched, and recorded slime's verdict (parser, Megatron's
validate_args and TransformerConfig), the env and trainstack's verdict in
tests/oracle/per_dest_oracle.json. Here, without slime: each recorded argv re-renders unchanged,
trainstack accepts exactly what slime accepted (or refuses it by a documented beyond-parser rule),
every probed dest landed, env values are as intended, and every dest is covered or excluded with
its reason.
"""
from __future__ import annotations

import json
import re

import pytest

from test_slime_oracle import BEYOND_PARSER
from trainstack_dev.per_dest import BASES, ENV_PROBES, PER_DEST_PATH, excluded, probes, rejudge

ORACLE = json.loads(PER_DEST_PATH.read_text(encoding="utf-8"))
ENTRIES = ORACLE["entries"]

# Probes upstream refuses that trainstack accepts, not (yet) checkable before launch or not worth a
# rule: probe key (dest/case) -> why. Each is listed in docs/slime_oracle.md.
UPSTREAM_ONLY: dict[str, str] = {}
# Probes slime's parser accepts that trainstack refuses by a rule that is not a BEYOND_PARSER one:
# probe key -> why the refusal is right.
TRAINSTACK_ONLY: dict[str, str] = {}


def upstream_refuses(e: dict) -> str | None:
    s = e["slime"]
    if not s.get("pass"):
        return str(s.get("error") or s.get("problems") or s.get("not_as_intended"))
    tc = s.get("transformer_config") or {"ok": True}
    return None if tc["ok"] else f"TransformerConfig: {tc['error']}"


def keys(e: dict) -> list[str]:
    return [f"{d}/{c}" for d, c, _ in e["probes"]]


def disagreement(e: dict, skip: frozenset[str] = frozenset()) -> str | None:
    """Why trainstack's verdict now differs from slime's recorded one (None: they agree); `skip`
    leaves rules out (test_slime_oracle's mutation test)."""
    now = rejudge(e, skip)
    if now.argv != e["argv"] or now.env != e["env"]:
        return "the argv or env drifted from the per-dest oracle: rerun `make oracle` and review"
    if not skip and [now.accepted, now.rules] != [e["trainstack"]["accepted"], e["trainstack"]["rules"]]:
        return (f"trainstack's verdict changed ({now.rules} vs {e['trainstack']['rules']}): rerun `make oracle` "
                "(or scripts/oracle/per_dest.py record) and review")
    if {d: now.intended.get(d) for d, _, _ in e["probes"]} != e["intended"]:
        return f"a probed dest's intended value changed: {e['intended']}"
    why = upstream_refuses(e)
    if why:
        if now.accepted and not any(k in UPSTREAM_ONLY for k in keys(e)):
            return f"upstream refuses {keys(e)} ({why[:300]}) but trainstack accepts it"
        return None
    unexplained = set(now.rules) - set(BEYOND_PARSER)
    if unexplained and not any(k in TRAINSTACK_ONLY for k in keys(e)):
        return f"slime accepts {keys(e)} but trainstack refuses it ({sorted(unexplained)}: {now.error_keys})"
    return None


@pytest.mark.parametrize("base", sorted({e["base"] for e in ENTRIES}))
def test_trainstack_agrees_with_slime_per_dest(base):
    """Every recorded argv of the base re-renders unchanged, and trainstack's verdict agrees with slime's."""
    problems = {e["id"]: why for e in ENTRIES if e["base"] == base if (why := disagreement(e))}
    assert problems == {}


def test_every_dest_is_covered_or_excluded_with_a_reason():
    from trainstack.argtable import load_table

    covered = {d for e in ENTRIES for d, _, _ in e["probes"]}
    skip = excluded()
    assert not covered & set(skip)
    assert set(load_table().dests()) - covered - set(skip) == set()
    assert all(len(why) > 20 for why in skip.values())
    # the recording is current: every probe the plan makes has an entry, with the recorded value
    recorded = {f"{d}/{c}": o for e in ENTRIES for d, c, o in e["probes"]}
    planned = {p.key: p.override for p in probes()}
    assert recorded == planned, "the probes changed: rerun `make oracle`"


def test_every_probe_landed_where_slime_accepted():
    for e in ENTRIES:
        s = e["slime"]
        if s.get("pass"):
            assert s["not_as_intended"] == [] and s["unknown_flags"] == [], e["id"]
            assert s["checked"] == s["flags"] > 0, e["id"]
            # a probe whose value renders nothing (false on a switch slime defaults to None) is meant unset,
            # which slime checked too (no flag set it); every other probe's dest holds its value
            assert all(d in e["intended"] for d, _, _ in e["probes"]), e["id"]


def test_env_values_are_as_intended():
    by_base = {e["base"]: e for e in ENTRIES if e["env_overrides"]}
    assert set(by_base) == set(ENV_PROBES)
    for base, e in by_base.items():
        assert e["slime"]["pass"], e["id"]
        for o in e["env_overrides"]:
            k, v = re.fullmatch(r"runtime_env\.env_vars\.(\w+)=(.*)", o).groups()
            if v == "null":
                assert k not in e["env"], (e["id"], k)
            else:
                assert e["env"][k] == v.strip("'"), (e["id"], k)


def test_bases_and_provenance():
    meta = ORACLE["meta"]
    assert meta["slime_commit"].startswith("624b824a") and meta["megatron_commit"].startswith("1dcf0daf")
    assert meta["bases"] == BASES
    assert {e["base"] for e in ENTRIES} >= {"dense", "moe", "pp", "cp", "noncolocated"}
    refused = [e for e in ENTRIES if upstream_refuses(e)]
    assert refused and all(len(e["probes"]) == 1 for e in refused)  # bisected down to the dest responsible
    assert meta["parses"] >= len(ENTRIES) and meta["seconds_per_argv"] > 0


def test_allow_lists_are_used():
    """Each allowed disagreement is still one (the list shrinks when a rule lands)."""
    upstream_refused = {k for e in ENTRIES if upstream_refuses(e) and not e["trainstack"]["accepted"] is False
                        for k in keys(e)}
    assert set(UPSTREAM_ONLY) <= upstream_refused
    slime_ok_ts_refused = {k for e in ENTRIES if not upstream_refuses(e) and not e["trainstack"]["accepted"]
                           for k in keys(e)}
    assert set(TRAINSTACK_ONLY) <= slime_ok_ts_refused
