"""A phase of a launch that takes a while says so (trainstack/terminal/phase.py): nothing for one over within the
quiet time, a line once it has taken that long and one with its duration at its end (`failed after` when it
raised); `announce` says the first line at once. A Ray head's start was once 36 s of silence."""
from __future__ import annotations

import re
import time

import pytest

from trainstack.terminal.phase import phase



@pytest.mark.parametrize("sleep,announce,expected", [
    (0.0, False, []),
    (0.6, False, ["trainstack: starting x ...", "trainstack: starting x: done in N s"]),
    (0.0, True, ["trainstack: starting x ..."]),
])
def test_a_phase_speaks_only_when_it_takes_a_while(sleep, announce, expected):
    lines: list[str] = []
    with phase("starting x", lines.append, announce=announce, quiet_s=0.05 if sleep else 5):
        time.sleep(sleep)
    assert [re.sub(r"\d+\.\d s$", "N s", ln) for ln in lines] == expected


def test_a_failed_phase_says_so():
    lines: list[str] = []
    with pytest.raises(RuntimeError), phase("converting m", lines.append, prefix="", quiet_s=0.05):
        time.sleep(0.2)
        raise RuntimeError("boom")
    assert lines[0] == "converting m ..." and re.fullmatch(r"converting m: failed after \d\.\d s", lines[1])
