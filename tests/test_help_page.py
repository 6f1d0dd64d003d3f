"""`python run.py --help` is rendered without composing the config, and reads exactly like the
page Hydra renders from conf/hydra/help/trainstack.yaml."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT, run_py

from trainstack.config.help_page import config_groups, render
from trainstack.config.resolve import CONF_DIR


def test_fast_help_is_hydras_page():
    fast = run_py("--help")
    hydra = run_py("--help", "dry_run=true")  # anything next to --help: Hydra renders the page
    assert fast.returncode == 0 and hydra.returncode == 0, hydra.stderr
    assert fast.stdout == hydra.stdout
    assert fast.stdout.startswith("trainstack: compose a slime")


def test_groups_follow_the_conf_tree(tmp_path):
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "model" / "zz-mine.yaml").write_text("hidden_size: 8\n")
    (conf / "newgroup").mkdir()
    (conf / "newgroup" / "a.yaml").write_text("{}\n")
    groups = config_groups(conf)
    assert "hydra" not in groups and groups["model"][-1] == "zz-mine" and groups["newgroup"] == ["a"]
    page = render(conf)
    assert "newgroup: a\n" in page and "zz-mine" in page and "$APP_CONFIG_GROUPS" not in page
    assert 'eval "$(python run.py -sc install=bash)"' in page  # `$$` in the template is a literal $


def test_trainstack_run_help_names_trainstack_run():
    """`trainstack run --help` once printed `python run.py` examples; the fast page and Hydra's agree."""
    fast = subprocess.run([sys.executable, "-m", "trainstack.cli.main", "run", "--help"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    hydra = subprocess.run([sys.executable, "-m", "trainstack.cli.main", "run", "--help", "dry_run=true"],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert fast.returncode == hydra.returncode == 0, hydra.stderr
    assert fast.stdout == hydra.stdout and "python run.py" not in fast.stdout
    assert "\n  trainstack run dry_run=short " in fast.stdout


COMMAND = re.compile(r"(?:python run\.py|trainstack [a-z]+)(?: (?!#)[^\s()`\"]+)*")


def _argv(cmd: str) -> list[str]:
    words = shlex.split(cmd)
    if words[:2] == ["python", "run.py"]:
        return [sys.executable, str(ROOT / "run.py"), *words[2:]]
    return [sys.executable, "-m", "trainstack.cli.main", *words[1:]]


@pytest.mark.slow
def test_every_example_the_help_pages_print_runs(tmp_path):
    """Each command `python run.py --help` and `trainstack --help` print runs as printed, in an empty directory
    (`python run.py --help` once showed a Lium dry run without the pod image it needs: refused). A training
    example runs 2 rollouts (the run id ignores the run length: the same run, shorter)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    pages = {prog: subprocess.run(_argv(f"{prog} --help"), capture_output=True, text=True, env=env).stdout
             for prog in ("python run.py", "trainstack")}
    cmds = list(dict.fromkeys(COMMAND.findall(pages["python run.py"])))
    more = COMMAND.findall(pages["trainstack"].split("\nexamples:")[1])
    # `trainstack run X` is `python run.py X` (test_trainstack_run_help_names_trainstack_run runs that path): once
    cmds += [c for c in more if c not in cmds and c.replace("trainstack run", "python run.py", 1) not in cmds]
    assert len(cmds) >= 12 and "python run.py" in cmds and "trainstack status" in cmds, cmds
    failed = []
    for cmd in cmds:
        trains = not re.search(r"dry_run=|(^| )-|--help|^trainstack (?!run)", cmd)
        argv = _argv(cmd) + (["env.num_rollout=2"] if trains else [])
        res = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
        if res.returncode != (1 if cmd.startswith("trainstack diff ") else 0) or "Traceback" in res.stderr:
            failed.append(f"{cmd}: exit {res.returncode}\n{(res.stdout + res.stderr)[-1500:]}")
    assert not failed, "\n".join(failed)
