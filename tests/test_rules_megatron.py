"""Issue #24's cases: flags slime's parser accepts that die in Megatron's validate_args or
TransformerConfig on the GPU nodes (trainstack/rules/megatron_rules.py), `false`/`null` values that could
not land as written (trainstack/rules/switch_rules.py, render.runtime_env), and configs trainstack
refused that slime accepts (resolve.derive_cluster_args, argtable aliases)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainstack.upstream.argtable import load_table
from trainstack.errors import ConfigErrors
from trainstack.rules.megatron_rules import REMOVED_OPTIONS
from trainstack.render.pipeline import build_from_overrides

RL = ["experiment=qwen3-4B-grpo-dapo"]
MOE = [*RL, "model=qwen3-30B-A3B"]
DSV3_16 = [*RL, "model=deepseek-v3", "cluster=slurm_8xh100", "cluster.num_nodes=16"]
Q32_PP4 = [*RL, "model=qwen3-32B", "cluster=slurm_8xh100", "cluster.num_nodes=2", "model.tensor_model_parallel_size=4",
           "model.pipeline_model_parallel_size=4"]
NO_RECOMPUTE = ["args.recompute_granularity=null", "args.recompute_method=null", "args.recompute_num_layers=null"]

CASES = [
    # (name, bad overrides, key the error names, fixed overrides)
    ("optimizer offload without the precision-aware optimizer", [*RL, "args.optimizer_cpu_offload=true"],
     "args.optimizer_cpu_offload", [*RL, "args.optimizer_cpu_offload=true", "args.use_precision_aware_optimizer=true"]),
    ("precision-aware optimizer off on a MoE preset", [*MOE, "args.use_precision_aware_optimizer=false"],
     "model.optimizer_cpu_offload", MOE),
    ("muon", [*RL, "algo.optimizer=muon"], "algo.optimizer", [*RL, "algo.optimizer=sgd"]),
    ("dist_muon", [*RL, "algo.optimizer=dist_muon"], "algo.optimizer", RL),
    ("cosine weight decay without start/end", [*RL, "args.weight_decay_incr_style=cosine"], "args.start_weight_decay",
     [*RL, "args.weight_decay_incr_style=cosine", "args.start_weight_decay=0.0", "args.end_weight_decay=0.1"]),
    ("start weight decay with a constant schedule", [*RL, "args.start_weight_decay=0.0"], "args.start_weight_decay",
     RL),
    ("VPP by layers with uneven stages", [*DSV3_16, "args.num_layers_per_virtual_pipeline_stage=2"],
     "args.num_layers_per_virtual_pipeline_stage", DSV3_16),
    ("VPP given two ways", [*Q32_PP4, "args.num_layers_per_virtual_pipeline_stage=4",
                            "args.num_virtual_stages_per_pipeline_rank=4"],
     "args.num_layers_per_virtual_pipeline_stage", [*Q32_PP4, "args.num_layers_per_virtual_pipeline_stage=4"]),
    ("VPP layers not dividing a stage", [*Q32_PP4, "args.num_layers_per_virtual_pipeline_stage=5"],
     "args.num_layers_per_virtual_pipeline_stage", [*Q32_PP4, "args.num_layers_per_virtual_pipeline_stage=8"]),
    ("uneven last stage leaves middle stages uneven", [*Q32_PP4, "args.decoder_last_pipeline_num_layers=14"],
     "args.decoder_last_pipeline_num_layers", [*Q32_PP4, "args.decoder_last_pipeline_num_layers=16"]),
    ("first stage takes more layers than the model has", [*RL, "model.pipeline_model_parallel_size=2",
                                                          "args.decoder_first_pipeline_num_layers=40"],
     "args.decoder_first_pipeline_num_layers", [*RL, "model.pipeline_model_parallel_size=2",
                                                "args.decoder_first_pipeline_num_layers=20"]),
    ("uneven stage not divisible by VPP", [*Q32_PP4, "args.decoder_last_pipeline_num_layers=13",
                                           "args.decoder_first_pipeline_num_layers=15",
                                           "args.num_virtual_stages_per_pipeline_rank=2"],
     "args.decoder_last_pipeline_num_layers", [*Q32_PP4, "args.decoder_last_pipeline_num_layers=14",
                                               "args.decoder_first_pipeline_num_layers=14",
                                               "args.num_virtual_stages_per_pipeline_rank=2"]),
    ("MoE A2A overlap with full recompute", [*MOE, "args.overlap_moe_expert_parallel_comm=true"],
     "args.overlap_moe_expert_parallel_comm", [*MOE, "args.overlap_moe_expert_parallel_comm=true", *NO_RECOMPUTE]),
    ("sglang multimodal false", [*RL, "args.sglang_enable_multimodal=false"], "args.sglang_enable_multimodal",
     [*RL, "args.sglang_enable_multimodal=true"]),
    ("sglang LoRA false", [*RL, "args.sglang_enable_lora=false"], "args.sglang_enable_lora", RL),
    ("removed sglang option", [*RL, "args.sglang_collect_tokens_histogram=true"],
     "args.sglang_collect_tokens_histogram", RL),
    ("CUDA_DEVICE_MAX_CONNECTIONS removed with TP", [*RL, "runtime_env.env_vars.CUDA_DEVICE_MAX_CONNECTIONS=null"],
     "runtime_env.env_vars.CUDA_DEVICE_MAX_CONNECTIONS",
     [*RL, "model.tensor_model_parallel_size=1", "runtime_env.env_vars.CUDA_DEVICE_MAX_CONNECTIONS=null"]),
    # the per-dest oracle: Megatron counts the embedding (and the loss) as a layer of the PP split (arguments.py:564-570)
    ("embedding counted in the PP split", [*Q32_PP4, "args.account_for_embedding_in_pipeline_split=true"],
     "model.pipeline_model_parallel_size", [*Q32_PP4, "args.account_for_embedding_in_pipeline_split=true",
                                            "model.pipeline_model_parallel_size=2", "cluster.num_nodes=1",
                                            "args.account_for_loss_in_pipeline_split=true"]),
]


@pytest.mark.parametrize("name,bad,key,good", CASES, ids=[c[0] for c in CASES])
def test_megatron_check_refuses_and_neighbour_passes(name, bad, key, good):
    with pytest.raises(ConfigErrors) as err:
        build_from_overrides(bad)
    keys = [e.key for e in err.value.errors]
    assert key in keys, (name, keys)
    e = next(e for e in err.value.errors if e.key == key)
    assert e.fix and e.problem and "Traceback" not in err.value.render()
    build_from_overrides(good)


def _argv(overrides: list[str]) -> list[str]:
    return build_from_overrides(overrides)[1].argv


def _value(argv: list[str], flag: str, n: int = 1) -> list[str]:
    i = argv.index(flag)
    return argv[i + 1:i + 1 + n]


def test_env_var_null_removes_the_variable():
    """`runtime_env.env_vars.X=null` rendered the string 'None' (torch aborts on PYTORCH_CUDA_ALLOC_CONF=None)."""
    _, cmd = build_from_overrides([*RL, "runtime_env.env_vars.PYTORCH_CUDA_ALLOC_CONF=null"])
    assert "PYTORCH_CUDA_ALLOC_CONF" not in cmd.env
    assert "None" not in cmd.env.values()
    _, cmd = build_from_overrides([*RL, "model.tensor_model_parallel_size=1",
                                   "runtime_env.env_vars.CUDA_DEVICE_MAX_CONNECTIONS=null"])
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in cmd.env  # trainstack's own default, removed as asked


def test_megatron_false_lands_as_megatrons_none():
    """Megatron reads `if args.no_load_optim:`; an explicit false renders nothing and means false."""
    argv = _argv([*RL, "args.no_load_optim=false", "args.use_cpu_initialization=false"])
    assert "--no-load-optim" not in argv and "--use-cpu-initialization" not in argv


def test_non_colocated_rollout_on_part_of_a_node_is_accepted():
    """slime places actor + rollout one-GPU bundles sorted by node: 4 training + 12 rollout on 2x8."""
    argv = _argv([*RL, "cluster=slurm_8xh100", "cluster.num_nodes=2", "cluster.colocate=false",
                  "cluster.rollout_num_gpus=12"])
    assert _value(argv, "--actor-num-nodes") == ["1"] and _value(argv, "--actor-num-gpus-per-node") == ["4"]
    assert _value(argv, "--rollout-num-gpus") == ["12"]


def test_rollout_gpus_under_args_are_accepted_like_cluster():
    argv = _argv([*RL, "cluster.colocate=false", "args.rollout_num_gpus=4"])
    assert _value(argv, "--rollout-num-gpus") == ["4"] and _value(argv, "--actor-num-gpus-per-node") == ["4"]


def test_sglang_option_alias_is_accepted():
    """`--sglang-cuda-graph-bs` is sglang's alias of --sglang-cuda-graph-bs-decode (slime's run-qwen3-32B.sh)."""
    argv = _argv([*RL, "args.sglang_cuda_graph_bs=[1,2,4,8]"])
    assert _value(argv, "--sglang-cuda-graph-bs-decode", 4) == ["1", "2", "4", "8"]


def test_every_alias_names_an_option_that_stores_its_value():
    table = load_table()
    assert table.aliases["sglang_cuda_graph_bs"] == "sglang_cuda_graph_bs_decode"
    for name, dest in table.aliases.items():
        assert name not in table.specs and dest in table.specs
        assert "--" + name.replace("_", "-") in table.flag_to_dest
        assert not name.startswith("no_")  # `--no-x` means the opposite of x


# ---- property tests over classes of input ----------------------------------------------------------

def _fake_ctx(args: dict, cluster_backend: str = "slime") -> SimpleNamespace:
    """The part of validate.Ctx the switch rules read, without composing a config."""
    from trainstack.errors import ConfigError

    table = load_table()
    run = SimpleNamespace(args=args, cluster=SimpleNamespace(backend=cluster_backend),
                          runtime_env=SimpleNamespace(env_vars={}))
    ctx = SimpleNamespace(run=run, table=table, key=lambda d: f"args.{d}")
    ctx.get = lambda d: args.get(d)
    ctx.err = lambda d, problem, fix, *others: ConfigError(f"args.{d}", problem, fix, value=args.get(d))
    return ctx


SWITCHES = sorted(d for d, s in load_table().specs.items() if s.is_switch)


@settings(max_examples=300, deadline=None)
@given(dest=st.sampled_from(SWITCHES), value=st.booleans())
def test_every_switch_value_lands_or_is_refused(dest, value):
    """For every store_true/store_false/--[no-] dest: the value renders to a flag, or equals what
    slime's namespace holds without one (Megatron's None read as false, a removed option left
    unset), or resolve or a rule refuses it."""
    from trainstack.rules import switch_rules
    from trainstack.render.command import render_dest
    from trainstack.config.resolve import check_dest_value

    spec = load_table()[dest]
    tokens = render_dest(spec, value)
    refused = check_dest_value(spec, value, f"args.{dest}", "test") + switch_rules.unrenderable_false(
        _fake_ctx({dest: value}))  # type: ignore[arg-type]
    lands = bool(tokens) or spec.default is value or (
        value is False and (dest in switch_rules.NONE_READ_AS_FALSE or spec.true_flag is None))
    assert lands != bool(refused), (dest, value, tokens, spec.default)
    if tokens:
        assert load_table().flag_to_dest[tokens[0]] == dest


def _stages_ok(layers: int, pp: int, first: int | None, last: int | None) -> bool:
    """Every pipeline stage gets >= 1 layer and the middle stages the same number."""
    ends = [n for n in (first, last) if n is not None]
    if any(n <= 0 for n in ends):
        return False
    middle, rest = pp - len(ends), layers - sum(ends)
    if middle == 0:
        return rest == 0
    return rest > 0 and rest % middle == 0


@settings(max_examples=300, deadline=None)
@given(layers=st.integers(1, 96), pp=st.integers(2, 8), first=st.none() | st.integers(-1, 40),
       last=st.none() | st.integers(-1, 40))
def test_uneven_stages_accepted_exactly_when_every_stage_has_layers(layers, pp, first, last):
    from trainstack.rules import megatron_rules

    args = {"num_layers": layers, "pipeline_model_parallel_size": pp, "decoder_first_pipeline_num_layers": first,
            "decoder_last_pipeline_num_layers": last}
    ctx = _fake_ctx(args)
    ctx.is_set = lambda d: args.get(d) is not None
    refused = megatron_rules.uneven_pipeline_stages(ctx)  # type: ignore[arg-type]
    if first is None and last is None:
        assert not refused
    else:
        assert (not refused) == _stages_ok(layers, pp, first, last), refused


@settings(max_examples=200, deadline=None)
@given(nodes=st.integers(1, 8), per_node=st.sampled_from([1, 2, 4, 8]), data=st.data())
def test_non_colocated_split_uses_every_gpu_or_is_refused(nodes, per_node, data):
    """A non-colocated split is accepted whenever both sides get GPUs: slime's node-sorted one-GPU bundles
    give the trainer the first ones, whole nodes or not (issue #33: 12 of 2 x 8); training + rollout GPUs
    are the cluster's."""
    from trainstack.config.resolve import derive_cluster_args
    from trainstack.config.schema import ClusterSpec

    total = nodes * per_node
    rollout = data.draw(st.integers(-1, total + 1))
    cluster = ClusterSpec(name="prop", num_nodes=nodes, gpus_per_node=per_node, colocate=False, rollout_num_gpus=rollout)
    out, errors = derive_cluster_args(cluster, {})
    fits = 0 < rollout < total
    assert (not errors) == fits, (nodes, per_node, rollout, errors)
    if fits:
        assert out["actor_num_nodes"] * out["actor_num_gpus_per_node"] + out["rollout_num_gpus"] == total
        assert out["actor_num_gpus_per_node"] <= per_node or out["actor_num_nodes"] == 1


# ---- ranges the parser does not check (issue #25 / #22) ---------------------------------------------

@pytest.mark.parametrize("bad,key", [
    ("args.sglang_mem_fraction_static=1.5", "args.sglang_mem_fraction_static"),
    ("args.sglang_mem_fraction_static=0", "args.sglang_mem_fraction_static"),
    ("args.rollout_top_p=0.0", "args.rollout_top_p"),
    ("args.rollout_top_k=0", "args.rollout_top_k"),
    ("args.rollout_max_response_len=0", "args.rollout_max_response_len"),
    ("cluster.gpus_per_node=0", "cluster.gpus_per_node"),
    ("cluster.num_nodes=0", "cluster.num_nodes"),
])
def test_out_of_range_values_are_refused(bad, key):
    """`cluster.gpus_per_node=0` was a ZeroDivisionError traceback; the others were accepted."""
    with pytest.raises(ConfigErrors) as err:
        build_from_overrides([*RL, bad])
    assert key in [e.key for e in err.value.errors]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_ranges_refuse_exactly_the_values_outside(data):
    """Every dest of range_rules.RANGES: a value inside its range passes, one outside is refused."""
    from trainstack.rules import range_rules

    dest = data.draw(st.sampled_from(sorted(range_rules.RANGES)))
    r = range_rules.RANGES[dest]
    if load_table()[dest].value_kind == "int":
        value: float = data.draw(st.integers(-5, 10 ** 6))
    else:
        value = data.draw(st.floats(-2, 2, allow_nan=False) | st.sampled_from([r.low, r.high]).filter(math.isfinite))
    inside = (value > r.low if r.low_open else value >= r.low) and (value < r.high if r.high_open else value <= r.high)
    refused = range_rules.value_ranges(_fake_ctx({dest: value}))  # type: ignore[arg-type]
    assert bool(refused) != inside, (dest, value)


# ---- which trainer can train which model (issue #25) --------------------------------------------------

GPU_CLUSTERS = ("local_1xh100", "local_8xh100", "slurm_8xh100", "lium_8xh100")


@settings(max_examples=12, deadline=None)
@given(cluster=st.sampled_from(GPU_CLUSTERS), recipe=st.sampled_from(["cpu-agentic", "cpu-smoke"]))
def test_the_tiny_model_on_any_gpu_cluster_is_refused_naming_the_model(cluster, recipe):
    """`experiment=cpu-agentic cluster=lium_8xh100` validated and would have rented 8 GPUs for a model slime
    cannot load (no Hugging Face weights). Every CPU recipe on every GPU cluster is refused at `model`."""
    with pytest.raises(ConfigErrors) as err:
        build_from_overrides([f"experiment={recipe}", f"cluster={cluster}", "cluster.lium.pod.image=me/ts:1"])
    mine = [e for e in err.value.errors if e.key == "model"]
    assert mine and "tiny CPU trainer" in mine[0].problem and "cluster=local_cpu" in mine[0].fix


def test_a_gpu_model_on_the_cpu_backend_and_the_tiny_model_on_it_are_judged_apart():
    with pytest.raises(ConfigErrors) as err:
        build_from_overrides(["model=qwen3-4B", "cluster=local_cpu"])
    assert [e for e in err.value.errors if e.key == "model" and "cannot train a 4" in e.problem]
    assert build_from_overrides(["experiment=cpu-agentic"])  # the tiny model on its own backend stays valid


PARTNER_VALUES = [None, False, True, 2, "flex", "alltoall", "torch", "torch_dist", "inference_optimized", "e4m3"]


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_option_pairs_refuse_exactly_a_missing_or_clashing_partner(data):
    """The per-dest oracle's Megatron asserts between two options (megatron_rules.NEEDS/EXCLUDES): an
    option that is on is refused exactly when its partner is not what it needs (or, for an exclusion,
    is on too); an option that is off never is."""
    from trainstack.rules import megatron_rules as mr

    pairs = [(d, o, ok) for d, o, ok, _, _ in mr.NEEDS] + [(d, o, None) for d, o, _ in mr.EXCLUDES]
    dest, other, ok = data.draw(st.sampled_from(pairs))
    on, partner = data.draw(st.booleans()), data.draw(st.sampled_from(PARTNER_VALUES))
    args = {dest: (4 if load_table()[dest].value_kind == "int" else True) if on else None, other: partner}
    ctx = _fake_ctx(args)
    ctx.is_set = lambda d: args.get(d) is not None
    errs = mr.option_pairs(ctx)  # type: ignore[arg-type]
    clash = (not ok(partner)) if ok else partner not in (None, False, 0, "")
    assert bool(errs) == (on and clash), (dest, other, partner)
    assert all(e.key == f"args.{dest}" and other in e.fix for e in errs)


@pytest.mark.parametrize("dest", sorted(REMOVED_OPTIONS))
def test_removed_megatron_options_are_refused_when_set(dest):
    """Megatron's validate_args refuses these whenever they are set (encoder_num_layers: next to num_layers)."""
    from trainstack.rules import megatron_rules as mr

    use, only_with = mr.REMOVED_OPTIONS[dest]
    for value, partner, refused in [(None, 32, False), (8, 32, True), (8, None, only_with is None)]:
        args = {dest: True if load_table()[dest].is_switch and value else value, "num_layers": partner}
        ctx = _fake_ctx(args)
        ctx.is_set = lambda d, args=args: args.get(d) is not None
        errs = mr.removed_options(ctx)  # type: ignore[arg-type]
        assert bool(errs) == refused, (dest, value, partner)
        assert all(use in e.fix for e in errs)
