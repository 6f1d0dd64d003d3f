"""Tab completion: Hydra's bash script (`python run.py -sc install=bash`), driven as bash drives it
(COMP_LINE/COMP_POINT/COMP_CWORD, then COMPREPLY): config groups, their options, keys of the config,
and slime dests under args./model./algo./env. (docs/config.md "Tab completion")."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def complete(line: str, install: str = "python run.py") -> list[str]:
    """COMPREPLY for `line` with the cursor at its end, in a bash that installed trainstack's completion
    with `install -sc install=bash`."""
    script = (f'eval "$({install} -sc install=bash)"\n'
              'read -ra COMP_WORDS <<< "$LINE"\n'
              'COMP_LINE="$LINE"; COMP_POINT=${#LINE}\n'
              'if [[ "$LINE" == *" " ]]; then COMP_CWORD=${#COMP_WORDS[@]}; else COMP_CWORD=$((${#COMP_WORDS[@]}-1)); fi\n'
              'hydra_bash_completion\n'
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}", "LINE": line,
           "PYTHONPATH": str(ROOT)}
    res = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    return [ln for ln in res.stdout.splitlines() if ln]


def test_groups():
    assert set(complete("python run.py mod")) == {"model=", "model."}
    assert "experiment=" in complete("python run.py exp")


def test_options_of_a_group():
    got = complete("python run.py model=qwen3-4")
    assert {"model=qwen3-4B", "model=qwen3-4B-Instruct-2507"} <= set(got) and all(g.startswith("model=qwen3-4") for g in got)
    assert "experiment=qwen3-4B-grpo-dapo" in complete("python run.py experiment=qw")


def test_keys_of_the_config():
    assert complete("python run.py cluster.num") == ["cluster.num_nodes="]
    assert "env.rollout_batch_size=" in complete("python run.py env.rollout_b")


def test_slime_dests_not_in_the_config():
    assert complete("python run.py args.sglang_mem") == ["args.sglang_mem_fraction_static="]
    assert "algo.lr=" in complete("python run.py algo.l")  # the algo file has no lr: slime's table does
    assert "+args.rollout_batch_size=" in complete("python run.py +args.rollout_batch")


def test_after_other_overrides():
    assert complete("python run.py model=qwen3-4B args.kl_loss_c") == ["args.kl_loss_coef="]


def test_zsh_install_uses_the_bash_script():
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), "-sc", "install=zsh"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0 and "hydra_bash_completion" in res.stdout, res.stderr


def test_trainstack_run_installs_and_completes_like_run_py():
    """`trainstack run -sc install=bash` (a pip install has no run.py): the script completes after
    `trainstack run`; Hydra's own query (`trainstack -sc query=bash`) used to fail with
    `invalid choice: 'query=bash'`. Other subcommands get no override candidates."""
    run = "trainstack run"
    assert set(complete("trainstack run mod", install=run)) == {"model=", "model."}
    assert complete("trainstack run model=qwen3-4B args.sglang_mem", install=run) == [
        "args.sglang_mem_fraction_static="]
    assert complete("trainstack status mod", install=run) == []
