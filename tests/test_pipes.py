"""A reader that leaves early (`| head`) ends every command quietly (trainstack/terminal/pipes.py): no
traceback, no "Exception ignored" at exit, the command's own exit code (0 when only the reader left)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from trainstack.terminal.pipes import quietly


def closed_pipe_run(argv: list[str], cwd) -> subprocess.CompletedProcess:
    """`argv` with its stdout a pipe whose reader has already gone: its first write that reaches the
    pipe fails (`| head -0`, the earliest a reader can leave)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(argv, stdout=w, stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        os.close(w)


@pytest.mark.parametrize("argv", [
    ["run.py", "--help"],
    ["run.py", "dry_run=true"],
    ["run.py", "-m", "dry_run=true", "algo.lr=1e-3,2e-3"],  # the sweep's point lines
    ["-m", "trainstack.cli.main", "args", "--search", "lr"],
])
def test_a_reader_that_leaves_ends_the_command_quietly(argv, tmp_path):
    cmd = [sys.executable, *(str(ROOT / a) if a == "run.py" else a for a in argv)]
    if "-m" in argv[1:]:
        cmd.append(f"hydra.sweep.dir={tmp_path}/sweep")
    res = closed_pipe_run(cmd, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr and "Exception ignored" not in res.stderr, \
        res.stderr


def _broken_stream(buffering: int):
    r, w = os.pipe()
    os.close(r)
    return open(w, "w", buffering=buffering)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(out_gone=st.booleans(), err_gone=st.booleans(), line_buffered=st.booleans(),
       writes=st.lists(st.tuples(st.sampled_from(["out", "err"]), st.integers(0, 20_000)), max_size=5),
       ending=st.tuples(st.sampled_from(["return", "exit"]), st.integers(0, 3)))
def test_quietly_never_lets_a_broken_pipe_out(out_gone, err_gone, line_buffered, writes, ending, monkeypatch, tmp_path):
    """Whatever a command writes to which stream, whichever readers left and however it ends: no
    BrokenPipeError escapes, the exit code is the command's own (0 when a write found the reader
    gone), and the final flush finds nothing to fail on."""
    buffering = 1 if line_buffered else -1
    out = _broken_stream(buffering) if out_gone else open(tmp_path / "out", "w", buffering=buffering)
    err = _broken_stream(buffering) if err_gone else open(tmp_path / "err", "w", buffering=buffering)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    raised: list[bool] = []

    def command():
        try:
            for stream, size in writes:
                print("x" * size, file=out if stream == "out" else err)
        except BrokenPipeError:
            raised.append(True)
            raise
        if ending[0] == "exit":
            sys.exit(ending[1])
        return ending[1]

    try:
        code = quietly(command)
    except SystemExit as ex:
        code = ex.code
    assert code == (0 if raised else ending[1])
    out.flush()  # what the interpreter's exit does
    err.flush()
    out.close()
    err.close()


_SCRIPT = '''
import atexit, sys, threading, time
from trainstack.terminal.pipes import run_script

mode, out = sys.argv[1], sys.argv[2]
atexit.register(lambda: open(out + ".atexit", "w").write("ran"))


class Teardown:  # freed by the interpreter's teardown only: the fast exit leaves without it
    def __init__(self, path):
        self.path, self.write = path, open

    def __del__(self):
        self.write(self.path, "w").write("ran")


kept = Teardown(out + ".teardown")

def main():
    print("buffered, no newline", end="")  # still in the buffer when the process leaves
    if mode == "thread":  # a non-daemon thread still working: the normal exit waits for it
        threading.Thread(target=lambda: (time.sleep(0.3), open(out + ".thread", "w").write("done"))).start()
    if mode == "exit3":
        sys.exit(3)
    if mode == "message":
        sys.exit("a message for the user")
    if mode == "raise":
        raise RuntimeError("boom")
    return 7  # run.py ignores what its task returns; the `trainstack` command returns its code

run_script(main, returns_code=len(sys.argv) > 3)
'''


@pytest.mark.parametrize("mode, code_returned, rc", [("plain", False, 0), ("plain", True, 7), ("exit3", False, 3),
                                                     ("thread", False, 0), ("message", False, 1), ("raise", False, 1)])
def test_a_finished_command_leaves_at_once_with_its_code_its_output_and_its_exit_handlers(tmp_path, mode,
                                                                                         code_returned, rc):
    """run.py and `trainstack` end through `exit_now` (no interpreter teardown, ~40 ms of a launch): the same
    exit code as `sys.exit`, buffered output written, atexit handlers run, a non-daemon thread waited for, a
    message or an exception reported as Python reports it."""
    script = tmp_path / "s.py"
    script.write_text(_SCRIPT)
    out = str(tmp_path / "o")
    res = subprocess.run([sys.executable, str(script), mode, out, *(["code"] if code_returned else [])],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == rc, res.stderr
    assert res.stdout == "buffered, no newline"
    assert open(out + ".atexit").read() == "ran"
    assert os.path.exists(out + ".teardown") == (mode in ("thread", "message", "raise"))  # the normal exit's cases
    if mode == "thread":
        assert open(out + ".thread").read() == "done"
    if mode == "message":
        assert res.stderr.strip() == "a message for the user"
    if mode == "raise":
        assert "RuntimeError: boom" in res.stderr
