"""A transcript in the README or docs (a ```text block starting with `$ python run.py ...` or
`$ trainstack ...`) is what the program prints, character for character: the README's example error
once showed a `value :` line the program no longer printed."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def transcripts() -> list[tuple[str, str, str]]:
    out = []
    for doc in DOCS:
        for block in re.findall(r"```text\n(.*?)```", doc.read_text(), re.S):
            first, _, rest = block.partition("\n")
            if first.startswith("$ python run.py ") or first.startswith("$ trainstack "):
                out.append((doc.name, first[2:], rest.rstrip("\n")))
    return out


CASES = transcripts()


def test_the_readme_has_its_example_error():
    assert any(doc == "README.md" and "args.rollout_batchsize" in cmd for doc, cmd, _ in CASES)


@pytest.mark.parametrize("doc,cmd,shown", CASES, ids=[f"{d}:{c[:50]}" for d, c, _ in CASES])
def test_a_transcript_is_what_the_program_prints(doc, cmd, shown, tmp_path):
    words = shlex.split(cmd)
    argv = ([sys.executable, str(ROOT / "run.py"), *words[2:]] if words[:2] == ["python", "run.py"]
            else [sys.executable, "-m", "trainstack.cli.main", *words[1:]])
    res = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    assert (res.stdout + res.stderr).rstrip("\n") == shown, f"{doc}: `{cmd}` prints\n{res.stdout + res.stderr}"
