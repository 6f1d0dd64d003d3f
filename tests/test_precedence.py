"""A dest's value comes from who said it: command line > experiment file > group files
(model < algo < env) > cluster derivation, whichever namespace it is written under."""
from __future__ import annotations

import collections

import pytest
import yaml

from conftest import ROOT, run_py
from trainstack_dev.oracle import judge

GROUPS = ("model", "algo", "env")


def group_files_by_dest() -> dict[str, dict[str, list[str]]]:
    """dest -> group -> options whose file sets it (plain values only)."""
    out: dict[str, dict[str, list[str]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for g in GROUPS:
        for path in sorted((ROOT / "conf" / g).glob("*.yaml")):
            for dest, value in (yaml.safe_load(path.read_text()) or {}).items():
                if dest != "meta" and not (isinstance(value, str) and "${" in value):
                    out[dest][g].append(path.stem)
    return {d: dict(v) for d, v in out.items() if len(v) >= 2}


MULTI = group_files_by_dest()


def new_value(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value + 0.125, 6)
    if isinstance(value, list):
        return value
    return f"{value}x" if isinstance(value, str) else value


def test_there_are_multi_group_dests():
    assert {"entropy_coef", "rollout_num_gpus_per_engine"} <= set(MULTI)


@pytest.mark.parametrize("override", ["algo.num_rollout=10", "model.num_rollout=10", "args.num_rollout=10"])
def test_any_namespace_on_the_command_line_beats_the_env_preset(override):
    assert judge([override]).intended["num_rollout"] == 10  # conf/env/arithmetic.yaml says 300


@pytest.mark.parametrize("dest", sorted(MULTI))
def test_command_line_override_lands_under_every_group(dest):
    choice = {g: opts[0] for g, opts in MULTI[dest].items()}
    base = [f"{g}={o}" for g, o in choice.items()]
    cluster = ["cluster=local_8xh100"] if choice.get("model", "tiny") != "tiny" else []
    setter = next(iter(choice))
    current = yaml.safe_load((ROOT / "conf" / setter / f"{choice[setter]}.yaml").read_text())[dest]
    if isinstance(current, list):
        pytest.skip("list values are covered by the oracle")
    want = new_value(current)
    text = str(want).lower() if isinstance(want, bool) else str(want)
    for g in GROUPS:
        j = judge([*base, *cluster, f"{g}.{dest}={text}"])
        assert j.argv is not None, (g, j.error_keys)
        got = j.intended.get(dest)
        assert str(got).lower() == str(want).lower() if isinstance(want, bool) else str(got) == str(want), (g, got)


def test_issue_entropy_sweep_gives_three_runs():
    res = run_py("-m", "algo.entropy_coef=0.0,0.05,0.2", "dry_run=true", "hydra.sweep.dir=/tmp/ts-precedence")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("ok  ")]
    assert len({ln.split()[1] for ln in lines}) == 3


def test_dry_run_names_what_an_override_replaced():
    res = run_py("algo.entropy_coef=0.05", "dry_run=true")
    line = next(ln for ln in res.stdout.splitlines() if "--entropy-coef" in ln and "command line" in ln)
    assert "0.05" in line and "over 0.1 from conf/env/arithmetic.yaml" in line


def test_experiment_beats_group_files_and_command_line_beats_experiment():
    j = judge(["experiment=qwen3-4B-base-sft"])
    assert j.intended["lr"] == 1e-05  # the experiment's algo.lr over conf/algo/sft.yaml's
    j = judge(["experiment=qwen3-4B-base-sft", "model.lr=2e-05"])
    assert j.intended["lr"] == 2e-05
