"""What each ported rule cites in slime's source, the words the cited lines say, and the slime versions the rule
holds for.

Every `slime <file>.py:<lines>` citation in the rule modules (upstream_rules, megatron_rules, range_rules,
switch_rules, validate) has an entry here; tests/test_citations.py parses the modules' source for citations,
fails on one without an entry, and checks in CI that the cited lines of the pin's checkout contain the
entry's ``says`` and that each version of the window has it in that file exactly when it is in ``holds``.
A rule whose entry does not hold for the slime a run uses (its table's ``slime_version``) is not applied
(``trainstack.rules.rulebook.rule``); a slime outside the window (a table built by ``trainstack slime sync``) gets
every rule. Megatron-LM and SGLang citations are not checked: their source is not in CI.
"""
from __future__ import annotations

from dataclasses import dataclass

from trainstack.upstream.versions import pin as _pin

PIN, V031, V030 = _pin().name, "v0.3.1", "v0.3.0"  # the pin's name: its table's (the one home of the commit)
WINDOW = (PIN, V031, V030)
ALL = WINDOW


@dataclass(frozen=True)
class Cite:
    file: str  # relative to the slime checkout
    lines: str  # as cited: "2008", "2041-2075"
    says: str  # words the cited lines contain (whitespace-normalised)
    holds: tuple[str, ...] = ALL  # the versions of the window whose file has `says` (the rule holds there)


# (rule module, the rule or name the citation sits in) -> what it cites
CITED: dict[tuple[str, str], tuple[Cite, ...]] = {
    ("upstream_rules", "custom_generate_replay"): (
        Cite("slime/ray/rollout.py", "718-738", "assert sample.rollout_top_p_token_ids is not None", (PIN, V031)),
        Cite("slime/rollout/sglang_rollout.py", "106-107", '{"return_top_p_token_ids": True}', (PIN, V031)),
        Cite("slime/rollout/sglang_rollout.py", "181-182", 'payload["return_routed_experts"] = True'),
    ),
    ("upstream_rules", "pipeline_stage_layers"): (
        Cite("slime/backends/megatron_utils/arguments.py", "90",
             "assert args.decoder_first_pipeline_num_layers is None and args.decoder_last_pipeline_num_layers is None"),
    ),
    ("upstream_rules", "mtp_training"): (
        Cite("slime/utils/arguments.py", "2008", "assert args.mtp_num_layers"),),
    ("upstream_rules", "param_selection"): (
        Cite("slime/utils/arguments.py", "2038", "You can only specify ONE of: --only-train-params-name-list"),),
    ("upstream_rules", "prompt_length"): (
        Cite("slime/utils/arguments.py", "2033", "args.rollout_max_prompt_len"),),
    ("upstream_rules", "allgather_cp"): (
        Cite("slime/backends/megatron_utils/arguments.py", "32", "def _validate_allgather_cp_supported"),),
    ("upstream_rules", "sglang_engine_split"): (
        Cite("slime/backends/sglang_utils/arguments.py", "174",
             "assert args.rollout_num_gpus_per_engine % args.sglang_pp_size == 0"),),
    ("upstream_rules", "SLIME_DEFAULT_SEQ_LENGTH"): (
        Cite("slime/backends/megatron_utils/arguments.py", "165", "args.seq_length = 4096"),),
    ("upstream_rules", "weight_sync_settings"): (
        Cite("slime/utils/arguments.py", "2041-2075", "update_weight_disk_dir", (PIN, V031)),),
    ("validate", "colocate_offload"): (
        Cite("slime/utils/arguments.py", "1909", 'args.use_critic = args.advantage_estimator == "ppo"'),
        Cite("slime/utils/arguments.py", "1961-1962", "if args.use_critic: args.offload_train = True"),
    ),
    ("megatron_rules", "muon_optimizer"): (
        Cite("slime/backends/megatron_utils/arguments.py", "153", "args.use_distributed_optimizer = True"),),
}


def holds(rule_name: str, version: str | None) -> bool:
    """Does the rule ``rule_name`` hold for the slime named ``version`` (a table's ``slime_version``)?"""
    if version not in WINDOW:
        return True
    return all(version in c.holds for (_, name), cites in CITED.items() if name == rule_name for c in cites)
