"""A local launch's console (trainstack/terminal/console.py): on a terminal the trainer's rollout lines become one
live line with the reward, rate and ETA; elsewhere (a pipe, a log, CI) about ten plain lines a run, the first
and the last among them, with the same figures; every other line passes through whole. `make run` once
printed 300 rollout lines with no ETA."""
from __future__ import annotations

import io
import re

from hypothesis import given, settings, strategies as st

from trainstack.terminal.console import PLAIN_LINES, Console, duration


def rollout(i: int, n: int, reward: float = 0.5) -> bytes:
    return f"[tiny] rollout {i}/{n}  reward {reward:.3f}  resp_len 2.00  step 0.12s\n".encode()


def feed(out: io.BytesIO, lines: list[bytes], seconds_per_line: float, **kw) -> str:
    """The lines through a Console whose clock advances `seconds_per_line` a line; what it printed."""
    ticks = iter(range(len(lines)))
    console = Console(out, clock=lambda: seconds_per_line * next(ticks), **kw)
    for line in lines:
        console.line(line)
    console.close()
    return out.getvalue().decode()


def test_a_terminal_sees_one_live_line_with_rate_and_eta():
    lines = [b"[tiny] eval before training: arithmetic=0.109\n", *(rollout(i, 300, 0.1 + i / 1000) for i in range(1, 31))]
    text = feed(io.BytesIO(), lines, 2.0, live=True, width=80)
    assert text.startswith("[tiny] eval before training: arithmetic=0.109\n")
    assert text.count("\n") == 2  # the eval line, and the one that ends the live line
    last = text.rstrip("\n").split("\r\033[K")[-1]
    assert last == "rollout 30/300  10%  reward 0.130  2.0 s/rollout  ETA 9m00s", last


def test_a_line_in_the_middle_goes_above_the_live_line():
    text = feed(io.BytesIO(), [rollout(1, 10), b"a warning\n", rollout(2, 10)], 1.0, live=True)
    assert "\r\033[Ka warning\nrollout 1/10  10%  reward 0.500" in text and text.endswith("ETA 8s\n")


@settings(max_examples=60, deadline=None)
@given(total=st.integers(1, 2000), start=st.integers(0, 50), others=st.lists(st.text("abc ", max_size=8), max_size=5))
def test_a_pipe_sees_about_ten_lines_a_run_the_first_and_last_among_them(total, start, others):
    start = min(start, total - 1)
    lines = [*(o.encode() + b"\n" for o in others), *(rollout(i, total) for i in range(start + 1, total + 1))]
    printed = feed(io.BytesIO(), lines, 0.25, live=False).splitlines()
    shown = [ln for ln in printed if " rollout " in ln]
    assert printed[:len(others)] == others  # everything else passes through whole
    assert len(shown) <= PLAIN_LINES + 2
    assert shown[0].startswith(f"[tiny] rollout {start + 1}/{total} ") and shown[-1].startswith(
        f"[tiny] rollout {total}/{total} ")
    assert all(re.search(r"  \[\d+%  reward 0\.500", ln) for ln in shown)
    if total - start >= 2:
        assert shown[-1].endswith("4.00 rollouts/s  done]")


def test_durations_read_short():
    assert [duration(s) for s in (0, 45, 125, 3720)] == ["0s", "45s", "2m05s", "1h02m"]
