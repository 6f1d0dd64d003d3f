"""trainstack's validator against slime's REAL parser, through the recorded oracle.

`make oracle` ran every corpus argv through slime's real `parse_args` (slime + Megatron-LM +
SGLang at the pinned commits) and recorded the verdicts in tests/oracle/slime_parse_oracle.json.
Here, without slime: every entry still renders to the recorded argv (drift is caught), and
trainstack accepts exactly what slime accepted, refusing the rest before launch.
"""
from __future__ import annotations

import collections

import pytest

from trainstack_dev.oracle import load_oracle, judge

ORACLE = load_oracle()
ENTRIES = ORACLE["entries"]

# Rules that refuse configs slime's parser accepts, because they fail later (at run time, on the
# GPU node) or never fail but do the wrong thing. Each is in docs/validation.md.
BEYOND_PARSER = {
    "batch_arithmetic": "a global batch that does not divide (or exceeds) the samples per rollout parses; it "
                        "trains 0 steps or fails at run time (slime#2366)",
    "expert_layout": "EP x ETP x PP not dividing the training GPUs parses; Megatron raises when it builds the "
                     "expert process groups on the GPU nodes",
    "parallel_layout": "attention heads not divisible by TP parse; Megatron asserts when it builds the model",
    "micro_batches": "a global batch not divisible by micro_batch_size x DP parses; Megatron fails at the first "
                     "step (DP is only known once Ray placed the actors)",
    "gpu_budget": "slime does not know the cluster: more GPUs than it has wait forever in Ray placement; "
                  "engines that do not split the rollout GPUs fail at engine start",
    "required_and_positive": "zero or negative counts and learning rates parse and fail (or train nothing) at run time",
    "colocate_offload": "PPO forces offload_train: an explicit false parses and is silently overridden",
    "wandb": "--use-wandb without --wandb-group parses and raises when the W&B run is created",
    "model_paths": "a missing --hf-checkpoint or --prompt-data parses and fails when SGLang or the data source starts",
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


def test_every_beyond_parser_rule_is_needed():
    """The list stays honest: each rule in it refuses at least one argv slime's parser accepted."""
    used = {r for e in ENTRIES if e["slime"]["pass"] for r in e["trainstack"]["rules"]}
    assert set(BEYOND_PARSER) == used


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
