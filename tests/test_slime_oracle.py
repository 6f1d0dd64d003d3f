"""trainstack's validator against slime's REAL parser, through the recorded oracle.

`make oracle` ran every corpus argv through slime's real `parse_args` (slime + Megatron-LM +
SGLang at the pinned commits) and recorded the verdicts in tests/oracle/slime_parse_oracle.json.
Here, without slime: every entry still renders to the recorded argv (drift is caught), and
trainstack accepts exactly what slime accepted, refusing the rest before launch.
"""
from __future__ import annotations

import collections

import pytest

from trainstack_dev.oracle import Judgement, judge, load_oracle

ORACLE = load_oracle()
ENTRIES = ORACLE["entries"]

# Rules that refuse configs slime's parser accepts, because they fail later (at run time, on the
# GPU node) or never fail but do the wrong thing. Each is in docs/validation.md.
BEYOND_PARSER = {
    "batch_arithmetic": "a global batch that does not divide (or exceeds) the samples per rollout parses; it "
                        "trains 0 steps or fails at run time (slime#2366)",
    "expert_layout": "EP x ETP x PP not dividing the training GPUs parses; Megatron raises when it builds the "
                     "expert process groups on the GPU nodes",
    "micro_batches": "a global batch not divisible by micro_batch_size x DP parses; Megatron fails at the first "
                     "step (DP is only known once Ray placed the actors)",
    "gpu_budget": "slime does not know the cluster: more GPUs than it has wait forever in Ray placement; "
                  "engines that do not split the rollout GPUs fail at engine start",
    "required_and_positive": "zero or negative counts and learning rates parse and fail (or train nothing) at run time",
    "wandb": "--use-wandb without --wandb-group parses and raises when the W&B run is created",
    "model_paths": "a missing --hf-checkpoint or --prompt-data parses and fails when SGLang or the data source starts",
    "lease_settings": "trainstack's own lease (resume.lease_ttl_s): slime never sees it; a short TTL lets a second "
                      "launch take over a live run",
    "renamed_plugin_paths": "a dotted path parses as a string; the import fails in the rollout workers",
    "uneven_pipeline_stages": "a first/last stage taking more layers than the model has leaves a negative middle count, "
                              "which TransformerConfig accepts and the model build does not",
    "custom_generate_replay": "a custom generate function with rollout top-p != 1 (or routing replay) parses; slime's "
                              "sample-to-train-data conversion asserts the top-p ids SGLang gives its own generate "
                              "only, so every rollout fails (slime ray/rollout.py, issue #20)",
    "model_backend": "the tiny model's flags parse on slime; it has no Hugging Face weights, so SGLang and the "
                     "torch_dist load fail on the GPU nodes (conf/model/tiny.yaml meta.backends, issue #25)",
    "value_ranges": "argparse checks types only: a memory fraction above 1, top-p 0 or a length <= 0 parses and "
                    "fails when SGLang starts or samples (trainstack/rules/range_rules.py)",
    "dest_domains": "argparse checks types only: a port above 65535, a JSON mapping with non-string values "
                    "spread into Ray's env_vars or a dataset's keys parse and fail once the run starts "
                    "(trainstack/rules/dest_domains.py; witnesses: the per-dest probes dense/0121, 0123, 0124)",
}
# Argvs slime's parser refuses that trainstack cannot refuse before launch: id -> why.
UNCHECKABLE: dict[str, str] = {}


def test_oracle_provenance_is_recorded():
    meta = ORACLE["meta"]
    assert meta["slime_commit"].startswith("624b824a")
    assert meta["megatron_commit"].startswith("1dcf0daf")
    assert meta["sglang"] == "0.5.15.post1"


def test_corpus_covers_every_preset_action_kind_and_enough_invalid_configs():
    from trainstack.config.resolve import CONF_DIR

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


def upstream_refuses(entry: dict) -> str | None:
    """slime's parser (with Megatron's validate_args) or Megatron's TransformerConfig, built from the
    parsed namespace as slime's model provider builds it, refused the argv: why; None if both accept."""
    slime = entry["slime"]
    if not slime["pass"]:
        return str(slime.get("error") or slime.get("problems") or slime.get("not_as_intended"))
    tc = slime.get("transformer_config") or {"ok": True}
    return None if tc["ok"] else f"TransformerConfig: {tc['error']}"


def disagreement(entry: dict, now: Judgement) -> str | None:
    """Why trainstack's verdict now differs from upstream's recorded one (None: they agree). Both
    ways: upstream refused -> trainstack refuses; upstream accepted -> trainstack accepts or only
    beyond-parser rules refuse; a config meant to be invalid accepted by both is a gap, not agreement."""
    if now.argv != entry["argv"]:
        return "rendered argv drifted from the oracle: rerun `make oracle` and review"
    if now.env != entry["env"]:
        return "the trainer's environment drifted from the oracle: rerun `make oracle` and review"
    why = upstream_refuses(entry)
    if why:
        if now.accepted and entry["id"] not in UNCHECKABLE:
            return f"upstream refuses this argv ({why[:300]}) but trainstack accepts it"
        return None
    unexplained = set(now.rules) - set(BEYOND_PARSER)
    if unexplained:
        return f"slime accepts this argv but trainstack refuses it ({unexplained})"
    if entry["kind"] == "invalid" and now.accepted:
        return "an invalid/* case is accepted by slime, Megatron's TransformerConfig and trainstack alike"
    return None


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_entry_agrees_with_slime(entry):
    now = judge(entry["overrides"])
    assert disagreement(entry, now) is None, disagreement(entry, now)
    # The recorded verdict holds rule by rule: a rule that stops (or starts) refusing an entry fails
    # here even where the accept/refuse verdict would not change (`corpus.py retrack` re-records it).
    assert now.rules == entry["trainstack"]["rules"], (now.rules, entry["trainstack"]["rules"])


def test_invalid_cases_are_refused_by_someone():
    gaps = [e["id"] for e in ENTRIES if e["kind"] == "invalid" and not upstream_refuses(e)
            and e["trainstack"]["accepted"]]
    assert gaps == []


# Rules that refuse nothing by design (they only warn), and features' rule blocks, which their own
# tests cover (tests/test_http_env_run.py, tests/test_prepare.py) with configs the corpus has no base for.
NEVER_REFUSE = {"checkpointing": "warns about no_save_optim only",
                "colocate_offload": "warns only: slime turns training offload back on for PPO (issue #33)"}
FEATURE_RULES = {"_rules"}


def _runtime_rules() -> set[str]:
    """slime's run-time paths (trainstack/rules/runtime_rules.py): slime's parser accepts every config they refuse, so
    the parse oracle cannot hold them; tests/test_runtime_rules.py does, case by case, with the same mutation test."""
    from trainstack.rules import runtime_rules
    from trainstack.rules.rulebook import UPSTREAM

    return {r.__name__ for r in UPSTREAM if r.__module__ == runtime_rules.__name__}


def _rule_names() -> list[str]:
    from trainstack.rules.validate import RULES

    return sorted({r.__name__ for r in RULES} - set(NEVER_REFUSE) - FEATURE_RULES - _runtime_rules())


@pytest.mark.parametrize("rule", _rule_names())
def test_disabling_a_rule_fails_the_oracle(rule):
    """Mutation test: with the rule left out (in-process), the verdict check above reports a
    disagreement on a corpus entry that this rule alone refuses (upstream refuses it, or it is an
    invalid/* case), so a rule cannot regress with the oracle staying green."""
    sole = [e for e in ENTRIES if e["trainstack"]["rules"] == [rule] and (upstream_refuses(e) or e["kind"] == "invalid")]
    if not sole:  # the per-dest oracle's single probes (tests/test_per_dest_oracle.py) count too
        from test_per_dest_oracle import ENTRIES as PER_DEST
        from test_per_dest_oracle import disagreement as per_dest_disagreement

        # a beyond-parser rule's witness is a probe slime accepts and this rule alone refuses (as an invalid/* case)
        per_dest = [e for e in PER_DEST if e["trainstack"]["rules"] == [rule]
                    and (upstream_refuses(e) or rule in BEYOND_PARSER)]
        assert per_dest, (f"no corpus entry is refused by {rule} alone: add an invalid/* case to "
                          "scripts/oracle/corpus.py")
        assert per_dest_disagreement(per_dest[0]) is None, per_dest[0]["id"]
        if upstream_refuses(per_dest[0]):
            assert per_dest_disagreement(per_dest[0], skip=frozenset({rule})) is not None, per_dest[0]["id"]
        else:  # left out, the recorded refusal is gone: the per-dest verdict check ("verdict changed") fails
            from trainstack_dev.per_dest import rejudge

            assert rejudge(per_dest[0], frozenset({rule})).accepted, per_dest[0]["id"]
        return
    mutant = judge(sole[0]["overrides"], skip=frozenset({rule}))
    assert disagreement(sole[0], mutant) is not None, sole[0]["id"]


def test_every_beyond_parser_rule_is_needed():
    """The list stays honest: each rule in it refuses at least one argv slime's parser accepted."""
    from test_per_dest_oracle import ENTRIES as PER_DEST

    used = {r for e in [*ENTRIES, *PER_DEST] if not upstream_refuses(e) for r in e["trainstack"]["rules"]}
    assert set(BEYOND_PARSER) == used - _runtime_rules()  # slime's run-time paths: tests/test_runtime_rules.py


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
