"""Every command in the README and docs code blocks runs as written (docs/compare.md and
docs/slurm.md have their own tests). Lines marked `(not run in tests: ...)` need an environment
CI does not have (slime's own Python environment) and say so."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OWN_TESTS = {"compare.md", "slurm.md", "lium.md"}


def commands(path: Path) -> list[str]:
    out = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip() if "(not run in tests" not in line else ""
            if line.startswith((".venv/bin/python ", "python ", "trainstack ")):
                out.append(line)
    return out


CASES = [(p.name, c) for p in DOCS if p.name not in OWN_TESTS for c in commands(p)]


def to_argv(cmd: str) -> list[str]:
    toks = shlex.split(cmd)
    if toks[0] == "trainstack":
        return [sys.executable, "-m", "trainstack.cli", *toks[1:]]
    toks[0] = sys.executable
    if len(toks) > 1 and toks[1] == "run.py":
        toks[1] = str(ROOT / "run.py")
    return toks


def test_docs_have_examples():
    assert len(CASES) >= 10


@pytest.mark.slow
@pytest.mark.parametrize("doc,cmd", CASES, ids=[f"{d}:{c[:60]}" for d, c in CASES])
def test_doc_command_runs(doc, cmd, tmp_path_factory):
    cwd = tmp_path_factory.getbasetemp() / f"docs-{doc}"  # one dir per doc: its commands build on each other
    cwd.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_API_KEY": ""}
    res = subprocess.run(to_argv(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    allowed = (0, 1) if cmd.startswith("trainstack diff") else (0,)  # diff: 1 = "different", like diff(1)
    assert res.returncode in allowed, f"{cmd}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    assert "Traceback" not in res.stderr
