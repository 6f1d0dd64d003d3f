"""A trainer that exits non-zero is told plainly (trainstack/run/failure_cause.py): the run summary and
status.json name the plugin at fault and the first line of its error, the traceback stays in the log.
The tracebacks parsed here are made by slime's own code calling bad plugins."""
from __future__ import annotations

import asyncio
import json
import sys
import traceback
import types

import pytest

from conftest import SMALL_BATCH, run_py
from trainstack.run.failure_cause import cause, key_from_source


@pytest.fixture(scope="module")
def slime_rm():
    from trainstack.tiny import slime_upstream

    slime_upstream.load()
    from slime.rollout import rm_hub
    from slime.utils.types import Sample

    return rm_hub, Sample


def _traceback_of(rm_hub, Sample, path: str) -> str:
    args = types.SimpleNamespace(custom_rm_path=path, group_rm=False, rm_type=None, reward_key=None)
    try:
        asyncio.run(rm_hub.async_rm(args, Sample(prompt="p", response="r", label="l")))
    except BaseException:  # noqa: BLE001
        return "[tiny] rollout 1/1 ...\n" + traceback.format_exc()
    raise AssertionError("slime called the plugin without failing")


def _key(dest: str) -> str:
    return f"env.{dest}"


def test_a_missing_module_is_named_with_its_key(slime_rm):
    text = _traceback_of(*slime_rm, "no_such_plugin_module.reward")
    found = cause(text, {"custom_rm_path": "no_such_plugin_module.reward"}, _key)
    assert found is not None and found.key == "env.custom_rm_path"
    assert found.error == "ModuleNotFoundError: No module named 'no_such_plugin_module'"


def test_a_plain_function_slime_awaits_is_named_at_slimes_call_site(slime_rm):
    mod = types.ModuleType("trainstack_sync_reward")
    exec("def reward(args, sample, **kw):\n    return 1.0\n", mod.__dict__)
    sys.modules[mod.__name__] = mod
    text = _traceback_of(*slime_rm, "trainstack_sync_reward.reward")
    found = cause(text, {"custom_rm_path": "trainstack_sync_reward.reward", "rollout_function_path":
                         "slime.rollout.sglang_rollout.generate_rollout"}, _key)
    assert found is not None and found.key == "env.custom_rm_path"
    assert found.error == "TypeError: object float can't be used in 'await' expression"
    assert found.where.endswith("slime/rollout/rm_hub/__init__.py:63")


def test_an_error_in_the_plugins_own_code_is_named(slime_rm, tmp_path, monkeypatch):
    (tmp_path / "raising_rm.py").write_text("async def reward(args, sample, **kw):\n    raise KeyError('label')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    text = _traceback_of(*slime_rm, "raising_rm.reward")
    found = cause(text, {"custom_rm_path": "raising_rm.reward"}, _key)
    assert found is not None and (found.key, found.error) == ("env.custom_rm_path", "KeyError: 'label'")
    assert found.describe("LOG") == "env.custom_rm_path (raising_rm.reward): KeyError: 'label' (full traceback: LOG)"


def test_without_a_plugin_the_innermost_own_frame_is_named():
    text = ('Traceback (most recent call last):\n  File "/venv/lib/python3.11/site-packages/x.py", line 3, in f\n'
            '  File "/work/trainer.py", line 9, in main\n    boom()\nValueError: bad shape\n')
    found = cause(text, {}, _key)
    assert found is not None and (found.key, found.error, found.where) == ("", "ValueError: bad shape",
                                                                           "/work/trainer.py:9")
    assert cause("no traceback here\n", {}, _key) is None


@pytest.mark.parametrize("source, key", [("command line `env.custom_rm_path=x.y`", "env.custom_rm_path"),
                                         ("conf/env/arithmetic.yaml", "env.custom_rm_path"),
                                         ("slime default", "args.custom_rm_path")])
def test_the_key_is_the_one_the_user_wrote(source, key):
    assert key_from_source("custom_rm_path", source) == key


@pytest.mark.slow
def test_a_failed_run_names_the_plugin_in_its_summary(tmp_path):
    """A reward that raises passes the dry run (it imports and fits slime's call) and fails in rollout 0."""
    plug = tmp_path / "plug"
    plug.mkdir()
    (plug / "bad_rm.py").write_text("async def reward(args, sample, **kwargs):\n"
                                    "    raise RuntimeError('reward server refused the connection')\n")
    res = run_py(f"paths.runs_root={tmp_path}/runs", "args.custom_rm_path=bad_rm.reward",
                 f"runtime_env.pythonpath=[{plug}]", "env.num_rollout=1", "env.eval_interval=null", *SMALL_BATCH,
                 cwd=tmp_path)
    assert res.returncode == 1, res.stderr[-2000:]
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("failed   ")]
    assert line and "args.custom_rm_path (bad_rm.reward): RuntimeError: reward server refused the connection" in line[0]
    status = json.loads(next((tmp_path / "runs").glob("*/status.json")).read_text())
    assert status["state"] == "failed" and status["error"].startswith("args.custom_rm_path (bad_rm.reward)")
    assert "logs/trainer.log" in status["error"]
