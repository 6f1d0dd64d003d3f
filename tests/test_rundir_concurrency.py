"""status.json and events.jsonl under concurrent writers: threads of one process (the lifecycle and
the Hub sync thread) and separate processes. No error, no lost update, no interleaved line."""
from __future__ import annotations

import json
import multiprocessing
import threading
from pathlib import Path

import pytest

from trainstack.run.rundir import RunDir, atomic_write, temp_name

N_THREAD = 2000
N_PROC = 200
LONG = "x" * 20000  # longer than any stdio buffer: a buffered append would take several write()s


def _status_writer(run_dir: str, name: str, n: int, errors: list) -> None:
    rd = RunDir(run_dir)
    for i in range(n):
        try:
            rd.update_status(**{f"{name}_{i}": i, name: i})
        except Exception as ex:  # noqa: BLE001 - counted, the assertion names them
            errors.append(repr(ex))


def _proc_writer(run_dir: str, name: str, n: int) -> None:
    errors: list = []
    _status_writer(run_dir, name, n, errors)
    rd = RunDir(run_dir)
    for i in range(n // 3):
        rd.event("tick", writer=name, i=i, pad=LONG)
    assert not errors, errors[:3]


@pytest.mark.parametrize("n", [300, pytest.param(N_THREAD, marks=pytest.mark.slow)])
def test_status_updates_from_two_threads_lose_nothing(tmp_path: Path, n: int) -> None:
    errors: list = []
    threads = [threading.Thread(target=_status_writer, args=(str(tmp_path), name, n, errors))
               for name in ("lifecycle", "hub")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    status = RunDir(tmp_path).status()
    for name in ("lifecycle", "hub"):
        assert status[name] == n - 1
        assert all(status.get(f"{name}_{i}") == i for i in range(n))
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_status_and_events_from_two_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_proc_writer, args=(str(tmp_path), name, N_PROC)) for name in ("a", "b")]
    for p in procs:
        p.start()
    errors: list = []
    _status_writer(str(tmp_path), "parent", N_PROC, errors)
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert errors == []
    status = RunDir(tmp_path).status()
    for name in ("a", "b", "parent"):
        assert all(status.get(f"{name}_{i}") == i for i in range(N_PROC)), name
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    recs = [json.loads(ln) for ln in lines]  # an interleaved line would not parse
    for name in ("a", "b"):
        assert [r["i"] for r in recs if r["writer"] == name] == list(range(N_PROC // 3))
    assert all(r["pad"] == LONG for r in recs)


def test_temp_names_are_private_to_each_write(tmp_path: Path) -> None:
    target = tmp_path / "status.json"
    names = {temp_name(target) for _ in range(100)}
    seen: set[Path] = set()
    lock = threading.Lock()

    def grab() -> None:
        for _ in range(100):
            n = temp_name(target)
            with lock:
                seen.add(n)

    ts = [threading.Thread(target=grab) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(names) == 100 and len(seen) == 400 and not names & seen
    atomic_write(target, "{}\n")
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_locks_nest_and_a_failed_write_leaves_no_temp_file(tmp_path: Path, monkeypatch) -> None:
    from trainstack.run.rundir import locked

    with locked(tmp_path / ".a.lock"), locked(tmp_path / ".b.lock"):  # two files: no deadlock
        RunDir(tmp_path).update_status(state="running")
    assert RunDir(tmp_path).status()["state"] == "running"

    def no_space(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("trainstack.run.rundir.os.replace", no_space)
    try:
        RunDir(tmp_path).update_status(state="failed")
    except OSError:
        pass
    else:
        raise AssertionError("the write error must reach the caller")
    assert not list(tmp_path.glob(".*.tmp")) and RunDir(tmp_path).status()["state"] == "running"
