"""slime's own plugin-contract tests (slime/tests/plugin_contracts, from the filled submodule) run
against trainstack's plugins: the tiny arithmetic reward (path loading: `custom_rm_path`), the HTTP-env
generate function (generate: `custom_generate_function_path`, against a real env server and a
scripted SGLang /generate) and the HTTP-env reward post-processor (runtime hooks:
`custom_reward_post_process_path`). Each file runs under pytest in its own process, with slime's
`SLIME_CONTRACT_*` variables naming our plugin and the args a trainstack run passes behind the
contract's own (tests/slime_contract_args.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from tests.fakes.http_env import env_server
from tests.fakes.http_faults import ScriptedSGLang
from trainstack.http_env.envs import Started, Stepped

SLIME = ROOT / "slime"
CONTRACTS = SLIME / "tests" / "plugin_contracts"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CONTRACTS.is_dir() and os.environ.get("CI") != "true",
                                                   reason="slime/ submodule not filled")]


def run_args(overrides: list[str]) -> dict:
    """The args the tiny trainer parses from the argv trainstack renders for these overrides (every slime
    dest, slime's defaults included), plus the keys of the --custom-config-path file the launch writes."""
    from trainstack import hooks
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.tiny.cli import parse_argv

    run, cmd = build_from_overrides(overrides)
    args = {k: v for k, v in vars(parse_argv(cmd.argv).args).items()
            if isinstance(v, (str, int, float, bool, list, dict, type(None)))}
    for make in hooks.get(hooks.LAUNCH_FILES):
        for _path, text in make(run.config, run.args).items():
            args.update(yaml.safe_load(text) or {})
    return args


def run_contracts(plugins: dict[str, str], args: dict[str, dict], tmp: Path) -> dict[str, dict[str, int]]:
    """slime's plugin_contracts directory under pytest, our plugins named by slime's variables; per file,
    {passed, failed, skipped}."""
    import xml.etree.ElementTree as ET

    report, args_file = tmp / "contracts.xml", tmp / "run-args.json"
    args_file.write_text(json.dumps(args))
    env = {**os.environ, **plugins, "TRAINSTACK_CONTRACT_ARGS": str(args_file), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "tests")])}
    res = subprocess.run([sys.executable, "-m", "pytest", str(CONTRACTS), "-p", "slime_contract_args",
                          "-p", "no:cacheprovider", "-q", "-o", "addopts=", f"--junitxml={report}"], cwd=SLIME,
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    out: dict[str, dict[str, int]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        stem = case.get("classname", "").rpartition(".")[2]
        kind = "failed" if case.find("failure") is not None or case.find("error") is not None else \
            "skipped" if case.find("skipped") is not None else "passed"
        out.setdefault(stem, {"passed": 0, "failed": 0, "skipped": 0})[kind] += 1
    return out


class OneStepEnv:
    """An episode of one turn in the tiny tokenizer's alphabet: `1+1=`, then any answer ends it."""

    name = "one_step"
    default_terminal_hook = None
    starts = 0

    async def start(self, task):
        OneStepEnv.starts += 1
        return Started({}, "1+1=")

    async def step(self, handle, action):
        return Stepped(None, reward=1.0 if action.strip() == "2" else 0.0, done=True)

    async def close(self, handle):
        return None


def test_trainstacks_plugins_meet_slimes_plugin_contracts(tmp_path):
    from trainstack.tiny import hf_tokenizer
    from trainstack.tiny.tokenizer import CharTokenizer

    smoke = run_args([])  # the CPU default: custom_rm_path=trainstack.tiny.arithmetic.reward
    agentic = run_args(["experiment=cpu-agentic"])  # the HTTP-env generate function on CPU
    liveweb = run_args(["experiment=qwen3-4B-grpo-dapo", "env=liveweb", "cluster=lium_8xh100",
                        "cluster.lium.pod.image=you/trainstack-slime:0.1"])  # the reward post-process, a GPU run's
    plugins = {"SLIME_CONTRACT_CUSTOM_RM_PATH": smoke["custom_rm_path"],
               "SLIME_CONTRACT_CUSTOM_GENERATE_FUNCTION_PATH": agentic["custom_generate_function_path"],
               "SLIME_CONTRACT_CUSTOM_REWARD_POST_PROCESS_PATH": liveweb["custom_reward_post_process_path"]}
    assert plugins == {"SLIME_CONTRACT_CUSTOM_RM_PATH": "trainstack.tiny.arithmetic.reward",
                       "SLIME_CONTRACT_CUSTOM_GENERATE_FUNCTION_PATH": "trainstack_plugins.http_env.generate.generate",
                       "SLIME_CONTRACT_CUSTOM_REWARD_POST_PROCESS_PATH":
                           "trainstack_plugins.http_env.rewards.normalize_by_group"}
    two = CharTokenizer().encode("2")
    with env_server(OneStepEnv()) as (url, _), ScriptedSGLang(lambda _req: (two, [-0.5], "2", "length")) as llm:
        agentic["http_env"] = {**agentic["http_env"], "url": url}
        agentic.update(hf_checkpoint=str(hf_tokenizer.write(tmp_path / "tokenizer")), sglang_router_ip="127.0.0.1",
                       sglang_router_port=llm.port)
        results = run_contracts(plugins, {"test_plugin_path_loading_contracts": smoke,
                                          "test_plugin_generate_contracts": agentic,
                                          "test_plugin_runtime_hook_contracts": liveweb}, tmp_path)
    assert OneStepEnv.starts >= 1, "slime's generate_and_rm never reached our generate function's episode"
    assert results == {"test_plugin_path_loading_contracts": {"passed": 16, "failed": 0, "skipped": 0},
                       "test_plugin_generate_contracts": {"passed": 4, "failed": 0, "skipped": 0},
                       "test_plugin_runtime_hook_contracts": {"passed": 10, "failed": 0, "skipped": 0},
                       "test_plugin_rollout_contracts": {"passed": 6, "failed": 0, "skipped": 0}}, results
