"""The one home of stopping process groups (trainstack/procgroup.py), against real process groups:
one that ignores SIGTERM, one that is SIGSTOPped, one whose leader leaves a child behind, and the
parent-death signal."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from trainstack.procgroup import group_members, kill_group, pid_alive, stop_group, with_parent_death

PY = sys.executable


def _group(script: str, ready: Path) -> subprocess.Popen:
    """A python leader in its own session running `script`; it and its children are up once `ready` exists."""
    proc = subprocess.Popen([PY, "-c", textwrap.dedent(script), str(ready)], start_new_session=True)
    end = time.monotonic() + 20
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < end, "the group never came up"
        time.sleep(0.02)
    return proc


IGNORES_TERM = """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
    open(sys.argv[1], "w").write(str(child.pid))
    time.sleep(300)
"""

GRACEFUL = """
    import signal, sys, time
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))  # a final checkpoint, then exit
    open(sys.argv[1], "w").write("up")
    while True:
        time.sleep(0.05)
"""

LEAVES_A_CHILD = """
    import signal, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
    open(sys.argv[1], "w").write(str(child.pid))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    time.sleep(300)
"""


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    proc = _group(IGNORES_TERM, tmp_path / "ready")
    child = int((tmp_path / "ready").read_text())
    t0 = time.monotonic()
    code = stop_group(proc, term_wait_s=1.0)
    took = time.monotonic() - t0
    assert code == -signal.SIGKILL and 1.0 <= took < 8, (code, took)
    assert group_members(proc.pid) == [] and not pid_alive(child)


def test_a_stopped_group_wakes_to_handle_sigterm_and_is_reaped(tmp_path: Path) -> None:
    proc = _group(GRACEFUL, tmp_path / "ready")
    os.killpg(proc.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    code = stop_group(proc, term_wait_s=20.0)
    assert code == 7, "a SIGSTOPped trainer must get to run its SIGTERM handler (SIGCONT), not wait for SIGKILL"
    assert time.monotonic() - t0 < 10 and group_members(proc.pid) == []


def test_a_stopped_group_that_ignores_sigterm_is_still_reaped(tmp_path: Path) -> None:
    proc = _group(IGNORES_TERM, tmp_path / "ready")
    os.killpg(proc.pid, signal.SIGSTOP)
    assert stop_group(proc, term_wait_s=0.5) == -signal.SIGKILL
    assert group_members(proc.pid) == []


def test_what_the_leader_left_in_its_group_goes_with_it(tmp_path: Path) -> None:
    proc = _group(LEAVES_A_CHILD, tmp_path / "ready")
    child = int((tmp_path / "ready").read_text())
    assert stop_group(proc, term_wait_s=10.0) == 0  # the leader exits on SIGTERM, its child ignores it
    assert not pid_alive(child) and group_members(proc.pid) == []
    proc2 = _group(LEAVES_A_CHILD, tmp_path / "ready2")
    child2 = int((tmp_path / "ready2").read_text())
    os.kill(proc2.pid, signal.SIGTERM)  # the leader alone exits first; the group is stopped later
    proc2.wait(timeout=10)
    assert pid_alive(child2)
    assert stop_group(proc2) == 0 and not pid_alive(child2)


def test_kill_group_kills_at_once(tmp_path: Path) -> None:
    proc = _group(GRACEFUL, tmp_path / "ready")
    assert kill_group(proc) == -signal.SIGKILL  # no SIGTERM first: no handler ran
    assert group_members(proc.pid) == []


def test_a_child_dies_with_its_parent(tmp_path: Path) -> None:
    """die_with_parent as a preexec_fn and with_parent_death's setpriv argv: the grandchild dies
    when the middle process is SIGKILLed (it never gets to stop it)."""
    for how in ("preexec", "argv"):
        pidfile = tmp_path / f"{how}.pid"
        middle = subprocess.Popen([PY, "-c", textwrap.dedent(f"""
            import subprocess, sys, time
            from trainstack.procgroup import die_with_parent, with_parent_death
            argv = [sys.executable, "-c", "import time; time.sleep(300)"]
            if {how!r} == "preexec":
                child = subprocess.Popen(argv, preexec_fn=die_with_parent)
            else:
                child = subprocess.Popen(with_parent_death(argv))
            open({str(pidfile)!r}, "w").write(str(child.pid))
            time.sleep(300)
        """)], start_new_session=True)
        end = time.monotonic() + 20
        while not pidfile.exists() or not pidfile.read_text():
            assert time.monotonic() < end
            time.sleep(0.02)
        grandchild = int(pidfile.read_text())
        assert pid_alive(grandchild)
        # Popen returns once setpriv is exec'd, before it has set the death signal: a parent killed in that
        # window leaves the child behind (pdeathsig's own limit). Kill the middle once setpriv has exec'd argv.
        while Path(f"/proc/{grandchild}/cmdline").read_bytes().startswith(b"setpriv\0"):
            assert time.monotonic() < end
            time.sleep(0.02)
        middle.kill()
        middle.wait()
        end = time.monotonic() + 5
        while pid_alive(grandchild) and time.monotonic() < end:
            time.sleep(0.02)
        assert not pid_alive(grandchild), how
        kill_group(middle)
    assert with_parent_death(["x"])[-1] == "x"


def test_wait_exit_returns_when_the_child_exits_not_at_the_end_of_its_period() -> None:
    """The guard and the launcher wait on their child with a period (they check the lease between): the
    child's end wakes them at once (`wait_exit`), where a sleep of the period held every run's end up."""
    from trainstack.procgroup import wait_exit

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    assert not wait_exit(proc, 0.01)  # still running: False after the (short) period
    t0 = time.monotonic()
    assert wait_exit(proc, 30.0)  # a 30 s period: back when the child ends, ~0.2 s
    assert time.monotonic() - t0 < 10 and proc.returncode == 0
    assert wait_exit(proc, 30.0)  # ended: at once, again
