"""The packaged copy of slime's argument table and how trainstack reads it."""
import pytest

from trainstack.upstream import argtable as at


def test_table_is_slimes_full_table():
    t = at.load_table()
    assert t.meta["counts"]["total"] == 1390
    assert t.slime_commit.startswith("624b824a")
    assert len(t.specs) > 1300  # one entry per dest (a few dests have several actions)


def test_dests_without_matching_flag_map_by_dest():
    t = at.load_table()
    assert t["rollout_global_dataset"].flag == "--disable-rollout-global-dataset"
    assert t["rollout_global_dataset"].kind == at.STORE_FALSE
    assert t["add_bias_linear"].flag == "--disable-bias-linear"
    assert t["layernorm_epsilon"].flag == "--norm-epsilon"
    assert t["wandb_random_suffix"].flag == "--disable-wandb-random-suffix"
    assert t.flag_to_dest["--norm-epsilon"] == "layernorm_epsilon"


def test_multi_action_dest_prefers_non_deprecated_store():
    t = at.load_table()
    assert t["sglang_cuda_graph_max_bs_decode"].flag == "--sglang-cuda-graph-max-bs-decode"
    assert not t["sglang_cuda_graph_max_bs_decode"].deprecated
    assert t.flag_to_dest["--sglang-cuda-graph-max-bs"] == "sglang_cuda_graph_max_bs_decode"


def test_groups_follow_source():
    t = at.load_table()
    assert t["tensor_model_parallel_size"].group == "megatron"
    assert t["sglang_mem_fraction_static"].group == "sglang"
    assert t["router_log_level"].group == "sglang"
    assert t["rollout_batch_size"].group == "slime"
    assert t["debug_train_only"].group == "slime"


def test_kinds():
    t = at.load_table()
    assert t["offload_train"].kind == at.BOOL_OPTIONAL and t["offload_train"].no_flag == "--no-offload-train"
    assert t["rollout_sample_hook_path"].kind == at.APPEND
    assert t["train_env_vars"].value_kind == at.JSON
    assert t["eval_prompt_data"].nargs == "+"
    assert t["attention_backend"].choice_values() == ("flash", "fused", "unfused", "local", "auto")


def test_suggest_understands_typos_and_flag_spelling():
    t = at.load_table()
    assert t.suggest("rollout_batchsize")[0] == "rollout_batch_size"
    assert t.suggest("--rollout-batch-size") == ["rollout_batch_size"]
    assert t.suggest("norm-epsilon") == ["layernorm_epsilon"]


def test_abbreviation_suggests_the_flag_it_abbreviates():
    from trainstack.upstream.argtable import load_table

    table = load_table()
    assert table.suggest("sglang_mem_frac") == ["sglang_mem_fraction_static"]
    assert table.suggest("--sglang-mem-frac") == ["sglang_mem_fraction_static"]
    assert table.suggest("rollout_batchsize") == ["rollout_batch_size"]


def test_every_slime_derived_data_file_is_from_the_tables_commit():
    """The table, its help texts, the model scripts and the run-identity review are facts about one slime
    commit (the one the launch compares the checkout with: trainstack/upstream/slime_version.py)."""
    import json

    from trainstack.upstream.argtable import DATA_DIR

    commit = at.load_table().slime_commit
    assert len(commit) == 40
    for name in ("slime_help.json", "slime_models.json", "run_identity.json"):
        meta = json.loads((DATA_DIR / name).read_text(encoding="utf-8"))["meta"]
        assert meta["slime_commit"] == commit, name


@pytest.mark.parametrize("version", ["pin", "v0.3.0", "v0.3.1"])
def test_a_spec_is_built_when_read_and_says_what_the_whole_table_says(version):
    """Specs are built on first read (a dry run reads ~140 of ~1,400): every one, once built, agrees with the
    table's flag map, its aliases and its defaults (which the tiny trainer reads without building specs)."""
    import json

    from trainstack.upstream import versions

    raw = json.loads(at.TABLE_PATH.read_text()) if version == "pin" else versions.read_table(
        str(at.DATA_DIR / "slime_tables" / f"{version}.json"))
    table = at.ArgTable(raw)
    assert table.specs._built == {}  # type: ignore[attr-defined]
    assert list(table.specs) == list(dict.fromkeys(a["dest"] for a in raw["arguments"]))
    defaults = {d: (v, k) for d, v, k in table.defaults()}
    for dest in table.specs:
        spec = table.specs[dest]
        assert table.specs[dest] is spec  # built once
        assert spec.dest == dest and table.flag_to_dest[spec.flag] == dest
        assert all(table.flag_to_dest[o] == dest for o in spec.option_strings)
        assert defaults[dest] == (spec.default, spec.value_kind)
    assert all(table.canonical(alias) == dest for alias, dest in table.aliases.items())
    assert "no_such_dest" not in table.specs and table.get("no_such_dest") is None
