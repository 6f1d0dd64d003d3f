"""`trainstack args`: look a slime flag up in either spelling; never a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT


def trainstack(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "trainstack.cli.main", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("name", ["rollout_batch_size", "--rollout-batch-size"])
def test_either_spelling_prints_help_type_default_and_source(name):
    res = trainstack("args", name)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("--rollout-batch-size  (dest rollout_batch_size; slime")
    assert "number of prompts in each rollout step" in res.stdout
    assert "type    : int" in res.stdout and "default : None" in res.stdout


def test_json_lists_every_flag_of_a_two_action_dest():
    res = trainstack("args", "--enable-chunked-prefill", "--json")
    info = json.loads(res.stdout)
    assert info["dest"] == "disable_chunked_prefill" and info["kind"] == "store_true"
    assert "--enable-chunked-prefill" in trainstack("args", "disable_chunked_prefill").stdout


def test_unknown_flag_is_one_line_with_a_suggestion():
    res = trainstack("args", "--rollout-batchsize")
    assert res.returncode == 2 and "did you mean 'rollout_batch_size'" in res.stderr
    assert "Traceback" not in res.stderr


def test_closed_pipe_is_not_a_traceback():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "trainstack.cli.main", "args", "--search", "s"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err
