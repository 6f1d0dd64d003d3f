"""The renderer's tokens mean what the config said, as argparse reads them (issue: slime's real
parser rejected argvs trainstack validated). The parser here is the tiny trainer's, built from
every action of slime's argument table; tests/test_slime_oracle.py checks slime's real one."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainstack.upstream import argtable as at
from trainstack.errors import ConfigErrors
from trainstack.render.pipeline import build_from_overrides
from trainstack.render.command import format_value, render_dest
from trainstack.config.resolve import check_dest_value
from trainstack.tiny.cli import build_parser

RL = ["experiment=qwen3-4B-grpo-dapo"]
SFT = ["experiment=qwen3-4B-base-sft"]


@pytest.fixture(scope="module")
def parser():
    return build_parser()


def parsed(parser, tokens: list[str]) -> dict:
    ns, extras = parser.parse_known_args(tokens)
    assert extras == [], extras
    return vars(ns)


def value_after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# --- numbers ------------------------------------------------------------------------------------

def test_negative_scientific_entropy_coef_is_one_value(parser):
    _, cmd = build_from_overrides([*RL, "args.entropy_coef=-0.00001"])
    assert value_after(cmd.argv, "--entropy-coef") == "-0.00001"
    assert parsed(parser, ["--entropy-coef", "-0.00001"])["entropy_coef"] == -1e-05


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_any_float_round_trips_through_argparse(parser, x):
    tokens = render_dest(at.load_table()["entropy_coef"], x)
    assert parsed(parser, tokens)["entropy_coef"] == x


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(2**62), max_value=2**62))
def test_any_int_round_trips_through_argparse(parser, n):
    tokens = render_dest(at.load_table()["rollout_top_k"], n)
    assert parsed(parser, tokens)["rollout_top_k"] == n


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, max_value=-1e-300), min_size=1, max_size=4))
def test_negative_float_lists_round_trip(parser, xs):
    tokens = render_dest(at.load_table()["moe_aux_loss_coeff"], xs)
    assert parsed(parser, tokens)["moe_aux_loss_coeff"] == xs


def test_negative_numbers_match_argparse_number_pattern():
    for x in (-1e-05, -1e-30, -2.5e-7, -1e20, -0.5, -3.0):
        token = format_value(x)
        assert "e" not in token.lower() or not token.startswith("-"), token
        assert float(token) == x and not math.isnan(float(token))


def test_string_starting_with_dash_uses_inline_form(parser):
    _, cmd = build_from_overrides([*RL, "args.wandb_group=-grp"])
    assert "--wandb-group=-grp" in cmd.argv
    assert parsed(parser, ["--wandb-group=-grp"])["wandb_group"] == "-grp"


def test_dash_strings_in_lists_are_refused_with_the_fix():
    with pytest.raises(ConfigErrors) as err:
        build_from_overrides([*RL, "args.rollout_stop=['-x']"])
    assert "args.rollout_stop" in err.value.render() and "leading '-'" in err.value.render()


# --- switches: every dest, both values --------------------------------------------------------

SWITCHES = [d for d, s in at.load_table().specs.items() if s.kind in (at.STORE_TRUE, at.STORE_FALSE, at.BOOL_OPTIONAL)]


@pytest.mark.parametrize("value", [True, False])
def test_every_switch_lands_or_is_refused(parser, value):
    table = at.load_table()
    wrong = []
    for dest in SWITCHES:
        spec = table[dest]
        if check_dest_value(spec, value, f"args.{dest}", "test"):
            continue  # refused with a message: no flag can set it and it is not the default
        got = parsed(parser, render_dest(spec, value)).get(dest, spec.default)
        if got is None and value is False:
            got = False  # tri-state left unset: slime treats None as off
        if got != value:
            wrong.append(dest)
    assert wrong == []


def test_disable_chunked_prefill_false_emits_enable_flag(parser):
    _, cmd = build_from_overrides([*RL, "args.disable_chunked_prefill=false"])
    assert "--enable-chunked-prefill" in cmd.argv and "--disable-chunked-prefill" not in cmd.argv
    assert parsed(parser, ["--enable-chunked-prefill"])["disable_chunked_prefill"] is False


def test_unreachable_switch_value_is_refused():
    spec = at.ArgSpec(dest="x", flag="--x", option_strings=("--x",), kind=at.STORE_TRUE, value_kind=at.BOOL,
                      nargs=None, choices=None, default=True, source="slime", group="slime", true_flag="--x")
    errs = check_dest_value(spec, False, "args.x", "command line")
    assert errs and "no flag" in errs[0].problem and errs[0].fix == "remove args.x"


# --- save_interval --------------------------------------------------------------------------------

@pytest.mark.parametrize("num_rollout,expected", [(100, 10), (3000, 20), (5, 1), (250, 20), (40, 4)])
def test_save_interval_default_follows_run_length(num_rollout, expected):
    run, cmd = build_from_overrides(["experiment=qwen2.5-0.5B-reproducibility", f"env.num_rollout={num_rollout}"])
    assert value_after(cmd.argv, "--save-interval") == str(expected)
    assert "trainstack default" in run.source("save_interval")


def test_user_save_interval_wins():
    run, cmd = build_from_overrides(["experiment=qwen2.5-0.5B-reproducibility", "args.save_interval=7"])
    assert value_after(cmd.argv, "--save-interval") == "7" and "command line" in run.source("save_interval")


def test_every_experiment_that_saves_has_a_save_interval():
    from trainstack.render.golden import experiments

    for exp in experiments():
        try:
            _, cmd = build_from_overrides([f"experiment={exp}"])
        except ConfigErrors:
            continue
        if "--save" in cmd.argv:
            assert "--save-interval" in cmd.argv, exp


# --- train-only runs skip SGLang ----------------------------------------------------------------

def test_train_only_run_drops_preset_sglang_flags():
    run, cmd = build_from_overrides([*SFT, "model=qwen3-30B-A3B"])
    assert cmd.groups["sglang"] == []
    assert "train-only" in run.source("sglang_mem_fraction_static")


@pytest.mark.parametrize("override", ["args.entropy_coef=nan", "algo.lr=inf", "args.entropy_coef=-inf",
                                      "args.moe_aux_loss_coeff=[0.1,nan]"])
def test_non_finite_numbers_are_refused(override):
    with pytest.raises(ConfigErrors) as err:
        build_from_overrides([*RL, override])
    assert "finite" in err.value.render() and override.split("=")[0] in err.value.render()


@settings(max_examples=25, deadline=None)
@given(count=st.integers(min_value=0, max_value=6))
def test_fixed_count_lists_take_exactly_that_many_values(parser, count):
    """The per-dest oracle (issue #24) found `args.rampup_batch_size=[1,1]` accepted while Megatron's
    argparse (nargs=3) exits: a dest with a fixed value count refuses any other count, and the count it
    takes parses to the list."""
    table = at.load_table()
    fixed = [s for s in table.specs.values() if s.nargs and s.nargs.isdigit() and s.kind != at.APPEND]
    assert fixed  # rampup_batch_size
    for spec in fixed:
        value = [1 if spec.value_kind == at.INT else "a"] * count
        errs = check_dest_value(spec, value, f"args.{spec.dest}", "test")
        assert bool(errs) == (count != int(spec.nargs)), (spec.dest, count)
        if not errs:
            assert parsed(parser, render_dest(spec, value))[spec.dest] == value
