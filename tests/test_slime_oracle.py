"""trainstack's validator against slime's REAL parser, through the recorded oracle.

`make oracle` ran every corpus argv through slime's real `parse_args` (slime + Megatron-LM +
SGLang at the pinned commits) and recorded the verdicts in tests/oracle/slime_parse_oracle.json.
Here, without slime: every entry still renders to the recorded argv (drift is caught), and
trainstack accepts exactly what slime accepted, refusing the rest before launch.
"""
from __future__ import annotations

import collections

import pytest

from trainstack.oracle import load_oracle, judge

ORACLE = load_oracle()
ENTRIES = ORACLE["entries"]

# Rules that refuse configs slime's parser accepts, because they fail later (at run time, on the
# GPU node) or never fail but do the wrong thing. Each is in docs/validation.md.
BEYOND_PARSER = {
    "batch_arithmetic": "slime parses a global batch that does not divide the samples per rollout; it fails or "
                        "trains 0 steps at run time (slime#2366)",
    "gpu_budget": "slime does not know the cluster: asking for more GPUs than it has hangs in Ray placement",
    "model_paths": "a missing --hf-checkpoint / --prompt-data / initial weights fails when SGLang or the data "
                   "source starts, not at parse time",
    "wandb": "--use-wandb without --wandb-group fails when the W&B run is created",
    "tiny_backend": "the CPU backend's own limits (slime has no such backend)",
    "colocate_offload": "PPO forces offload_train: an explicit false parses but is silently overridden",
    "eval_settings": "eval scheduled without eval data parses (eval silently never runs)",
    "modes": "mutually exclusive engine sources parse and fail when the engines start",
    "estimators": "checked by slime only when the feature initialises",
    "over_sampling": "checked when the rollout buffer is created",
    "dynamic_batch": "checked when the first batch is built",
    "micro_batches": "Megatron checks divisibility against the data-parallel size it learns at init",
    "parallel_layout": "world size and divisibility need the cluster's GPU count, which slime learns from Ray",
    "required_and_positive": "zero or negative counts parse and fail at run time",
    "checkpointing": "checkpoint cadence problems show up at the first save",
    "rollout_length": "a run with neither num_rollout nor num_epoch parses and fails when the loop starts",
}
# Argvs slime's parser refuses that trainstack cannot refuse before launch: id -> why.
UNCHECKABLE: dict[str, str] = {}


def test_oracle_provenance_is_recorded():
    meta = ORACLE["meta"]
    assert meta["slime_commit"].startswith("624b824a")
    assert meta["megatron_commit"].startswith("1dcf0daf")
    assert meta["sglang"] == "0.5.15.post1"


def test_corpus_covers_every_preset_action_kind_and_enough_invalid_configs():
    from trainstack.resolve import CONF_DIR

    assert len(ENTRIES) >= 300
    presets = {p.stem for p in (CONF_DIR / "model").glob("*.yaml")} - {"tiny"}
    covered = {e["id"].split("/")[1] for e in ENTRIES if e["kind"] == "preset"}
    assert presets <= covered, presets - covered
    kinds = {e["id"].split("/")[1] for e in ENTRIES if e["kind"] == "action"}
    for kind in ("store_true", "store_false", "tristate", "two_actions", "nargs", "append", "json", "choices",
                 "number", "sglang", "router"):
        assert kind in kinds, kind
    refused = [e for e in ENTRIES if not e["slime"]["pass"] or not e["trainstack"]["accepted"]]
    assert len(refused) >= 50
    assert len([e for e in ENTRIES if not e["slime"]["pass"]]) >= 10


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_entry_agrees_with_slime(entry):
    now = judge(entry["overrides"])
    assert now.argv == entry["argv"], "rendered argv drifted from the oracle: rerun `make oracle` and review"
    slime = entry["slime"]
    if slime["pass"]:
        unexplained = set(now.rules) - set(BEYOND_PARSER)
        assert not unexplained, f"slime accepts this argv but trainstack refuses it ({unexplained})"
    else:
        assert not now.accepted or entry["id"] in UNCHECKABLE, (
            f"slime refuses this argv ({slime.get('error') or slime.get('problems')}) but trainstack accepts it")


def test_every_accepted_argv_landed_every_intended_dest():
    for e in ENTRIES:
        if e["slime"]["pass"]:
            assert e["slime"]["not_as_intended"] == [] and e["slime"]["unknown_flags"] == []
            assert e["slime"]["checked"] == e["slime"]["flags"] > 0
            assert len(e["slime"]["landed"]) == e["slime"]["intended_checked"] > 0


def test_recorded_refusals_name_their_cause():
    causes = collections.Counter()
    for e in ENTRIES:
        if not e["slime"]["pass"]:
            causes[(e["slime"].get("error") or str(e["slime"].get("problems")))[:40]] += 1
            assert e["slime"].get("error") or e["slime"].get("problems") or e["slime"].get("not_as_intended")
    assert causes
