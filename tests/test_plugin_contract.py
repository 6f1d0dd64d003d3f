"""slime's plugin contract (trainstack/upstream/plugin_contract.py) against slime's own code in the submodule:
every cited line makes the call it is cited for, every plugin dest of the argument table has a
contract, and for generated plugins (sync/async, arity, keywords, *args/**kwargs) the contract's
verdict is what slime's real call path does with them (rm_hub.async_rm / batched_async_rm,
base_types.call_rollout_fn, filter_hub call_dynamic_filter, sample_hooks)."""
from __future__ import annotations

import asyncio
import inspect
import itertools
import sys
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainstack.upstream.plugin_contract import CONTRACTS, GROUP_RM, NO_GPU_SOURCE, contract_for, contract_problems

ROOT = Path(__file__).resolve().parents[1]
SLIME = ROOT / "slime"
needs_slime = pytest.mark.skipif(not (SLIME / "slime" / "__init__.py").is_file(), reason="slime/ submodule not filled")


def _lines(source: str) -> list[str]:
    path, _, span = source.rpartition(":")
    first, _, last = span.partition("-")
    text = (SLIME / path).read_text(encoding="utf-8").splitlines()
    return text[int(first) - 1:int(last or first)]


@needs_slime
@pytest.mark.parametrize("dest", [*CONTRACTS, "group_rm"])
def test_each_cited_slime_line_makes_the_call(dest):
    c = GROUP_RM if dest == "group_rm" else CONTRACTS[dest]
    assert any(c.marker in line for line in _lines(c.source)), f"{c.source} no longer reads {c.marker!r}"


@needs_slime
def test_the_rollout_manager_holds_no_gpu():
    assert any('"num_gpus": 0' in line for line in _lines(NO_GPU_SOURCE))


def test_every_plugin_dest_of_the_argument_table_has_a_contract():
    from trainstack.upstream.argtable import load_table
    from trainstack.preflight.host_checks import NOT_PLUGINS

    table = load_table()
    dests = {d for d, s in table.specs.items() if s.source == "slime" and d.endswith("_path") and d not in NOT_PLUGINS}
    assert dests == set(CONTRACTS), dests ^ set(CONTRACTS)
    assert len(CONTRACTS) == 24


# ----------------------------------------------------------------------------------------------
# generated plugins: the verdict agrees with slime's own call path
# ----------------------------------------------------------------------------------------------
NAMES = ("args", "x", "y", "z", "evaluation", "rollout_id", "data_source")


@st.composite
def plugins(draw):
    """Source of a plugin function: async or not, or a plain function handing back an async helper's
    coroutine (slime awaits that fine); up to 5 parameters of any kind."""
    kind = draw(st.sampled_from(["async", "plain", "plain-returning-a-coroutine"]))
    names = draw(st.lists(st.sampled_from(NAMES), max_size=5, unique=True))
    params, kw_only, seen_default = [], False, False
    for name in names:
        kind = draw(st.sampled_from(["plain", "default", "kwonly"]))
        if kind == "kwonly" and not kw_only:
            params.append("*")
            kw_only = True
        if kind == "default" or (seen_default and not kw_only) or (kind == "kwonly" and draw(st.booleans())):
            params.append(f"{name}=None")
            seen_default = seen_default or not kw_only
        else:
            params.append(name)
    if draw(st.booleans()) and not kw_only:
        params.append("*rest")
    if draw(st.booleans()):
        params.append("**kw")
    body = "return _helper()" if kind == "plain-returning-a-coroutine" else "return RESULT"
    return f"{'async ' if kind == 'async' else ''}def plugin({', '.join(params)}):\n    {body}\n"


_COUNT = itertools.count()
HELPER = "\n\nasync def _helper():\n    return RESULT\n"


def _module(source: str, result) -> str:
    """A fresh module per plugin: slime's load_function is cached by path (slime/utils/misc.py:38, `@cache`). Its
    source is in linecache, as a file's is (the contract reads a plain function's returns), RESULT a literal."""
    import linecache

    name = f"trainstack_generated_plugin_{next(_COUNT)}"
    filename = f"<{name}>"
    text = (source + HELPER).replace("RESULT", repr(result))
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    mod = types.ModuleType(name)
    exec(compile(text, filename, "exec"), mod.__dict__)
    sys.modules[name] = mod
    return f"{name}.plugin"


@pytest.fixture(scope="module")
def slime_code():
    from trainstack.tiny import slime_upstream

    slime_upstream.load()
    from slime.rollout import rm_hub, sample_hooks
    from slime.rollout.base_types import RolloutFnTrainOutput, call_rollout_fn
    from slime.rollout.filter_hub.base_types import call_dynamic_filter
    from slime.utils.types import Sample

    return types.SimpleNamespace(rm=rm_hub, hooks=sample_hooks, call_rollout_fn=call_rollout_fn,
                                 call_dynamic_filter=call_dynamic_filter, Sample=Sample, Out=RolloutFnTrainOutput)


def _args(**kw):
    base = dict(custom_rm_path=None, group_rm=False, rm_type=None, reward_key=None, rollout_sample_hook_path=[])
    return types.SimpleNamespace(**{**base, **kw})


def _slime_calls(dest: str, path: str, s) -> bool:
    """Does slime's own code call the plugin at `path` successfully (and get a value of the right kind)?"""
    fn = sys.modules[path.rpartition(".")[0]].plugin
    sample = s.Sample(index=0, prompt="p", response="r", label="l")
    try:
        if dest == "custom_rm_path":
            return isinstance(asyncio.run(s.rm.async_rm(_args(custom_rm_path=path), sample)), float)
        if dest == "group_rm":
            out = asyncio.run(s.rm.batched_async_rm(_args(custom_rm_path=path, group_rm=True), [sample, sample]))
            return isinstance(out, list)
        if dest == "rollout_function_path":
            out = s.call_rollout_fn(fn, _args(), 0, object(), evaluation=False)
            ok = isinstance(out.samples, list)
            if inspect.iscoroutine(out.samples):
                out.samples.close()
            return ok
        if dest == "dynamic_sampling_filter_path":
            out = s.call_dynamic_filter(fn, _args(), [sample, sample])
            ok = isinstance(out.keep, bool)
            if inspect.iscoroutine(out.keep):
                out.keep.close()
            return ok
        if dest == "rollout_sample_hook_path":
            out = asyncio.run(s.hooks.apply_rollout_sample_hooks(_args(rollout_sample_hook_path=[path]), sample,
                                                                  evaluation=False))
            return out is sample
    except TypeError:
        return False
    raise AssertionError(dest)


AWAITED = ("custom_rm_path", "group_rm", "rollout_sample_hook_path")
RESULTS = {"custom_rm_path": 1.0, "group_rm": [1.0, 1.0], "rollout_function_path": [[]],
           "dynamic_sampling_filter_path": True, "rollout_sample_hook_path": None}


@needs_slime
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=plugins(), dest=st.sampled_from(sorted(RESULTS)))
def test_the_verdict_is_what_slimes_call_does(slime_code, source, dest):
    if dest not in AWAITED:  # a plain function handing back a coroutine where slime does not await: not decidable
        source = source.replace("return _helper()", "return RESULT")  # without running it; the contract trusts it
    path = _module(source, RESULTS[dest])
    fn = sys.modules[path.rpartition(".")[0]].plugin
    contract = contract_for("custom_rm_path", True) if dest == "group_rm" else contract_for(dest, False)
    assert contract is not None
    refused = contract_problems(fn, contract)
    assert (not refused) == _slime_calls(dest, path, slime_code), (source, dest, refused)


@pytest.mark.parametrize("group_rm, second, refused", [(True, "sample", True), (False, "samples", True),
                                                       (True, "samples", False), (False, "sample", False)])
def test_a_reward_of_the_other_shape_is_refused_by_its_parameter_name(group_rm, second, refused):
    """slime calls both shapes with two positionals, so only the name tells (slime's own contract test reads it)."""
    ns: dict = {}
    exec(f"async def reward(args, {second}, **kwargs):\n    return 1.0\n", ns)
    problems = contract_problems(ns["reward"], contract_for("custom_rm_path", group_rm))
    assert bool(problems) == refused
    if refused:
        assert f"names its second parameter {second!r}" in problems[0]
