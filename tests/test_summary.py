"""A run's summary.json (trainstack/run/rundir/summary.py): what status and compare read instead of every
file of every run. Never stale (made anew by the reader whenever a file it was made from changed), never
written by a reader, and compare's configs kept as differences give the columns full configs give."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, files_under
from hubtools import write_checkpoint
from trainstack.run.rundir import RunDir, summary
from trainstack.storage import layout


def _run(tmp: Path) -> RunDir:
    rd = RunDir(tmp / "runs" / "r1")
    rd.path.mkdir(parents=True)
    return rd


def _metrics(rd: RunDir, step: int, reward: float) -> None:
    with open(rd.metrics_file, "a") as f:
        f.write(json.dumps({"step_key": "rollout/step", "step": step, "metrics": {"rollout/raw_reward": reward}}) + "\n")


OPS = st.lists(st.one_of(
    st.tuples(st.just("status"), st.sampled_from(["running", "finished", "failed", "interrupted"])),
    st.tuples(st.just("event"), st.sampled_from(["launch", "resume", "exit"])),
    st.tuples(st.just("metrics"), st.floats(0, 1)),
    st.tuples(st.just("checkpoint"), st.booleans()),
    st.tuples(st.just("hub"), st.integers(0, 9)),
), min_size=1, max_size=8)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_a_summary_is_never_stale(ops, tmp_path_factory):
    """Whatever the writers did (some write through RunDir, which refreshes summary.json; the trainer's
    metrics and checkpoints do not), what a reader gets is what the run's files say now."""
    rd = _run(tmp_path_factory.mktemp("s"))
    step, ckpt = 0, -1
    for op, arg in ops:
        if op == "status":
            rd.update_status(state=arg, num_rollout=5)
        elif op == "event":
            rd.event(arg, from_rollout=max(ckpt, 0))
        elif op == "metrics":  # the trainer: summary.json not refreshed
            _metrics(rd, step, arg)
            step += 1
        elif op == "checkpoint":  # the trainer publishes an iteration (complete or not)
            ckpt += 1
            write_checkpoint(rd.checkpoints, ckpt, complete=arg)
        else:
            rd.update_status(hub={"last_pushed": arg, "commit": "c" * 40})
        assert summary.read(rd.path) == summary.make(rd.path), (op, arg)
    if any(op in ("status", "event", "hub") for op, _ in ops) and ops[-1][0] in ("status", "event", "hub"):
        stored = json.loads((rd.path / layout.SUMMARY).read_text())  # the last writer's refresh is current
        assert stored["made_from"] == summary.stamps(rd.path, None)


def test_a_current_summary_is_all_a_reader_parses(tmp_path, monkeypatch):
    rd = _run(tmp_path)
    (rd.path / layout.ARGS).write_text('{"num_rollout": 1}')  # the target: the spec's (here its args.json view)
    _metrics(rd, 0, 0.5)
    write_checkpoint(rd.checkpoints, 0)
    rd.update_status(state="finished", num_rollout=1)
    summary.forget()
    monkeypatch.setattr(summary, "_make", lambda d: pytest.fail(f"{d}: made again from its files"))
    got = summary.read(rd.path)
    assert (got.state, got.rollouts, got.last_checkpoint, got.reward, got.target) == ("finished", 1, 0, 0.5, 1)
    _metrics(rd, 1, 0.75)  # the trainer wrote on: the stored summary no longer holds
    monkeypatch.undo()
    assert summary.read(rd.path).reward == 0.75 and summary.read(rd.path).rollouts == 2


def test_status_and_compare_leave_run_dirs_as_they_were(tmp_path):
    """A reader makes its own summary of a run whose files changed; it never writes one."""
    rd = _run(tmp_path)
    rd.update_status(state="finished", num_rollout=1)
    _metrics(rd, 0, 0.5)  # summary.json is behind now
    before = {f: (tmp_path / f).read_bytes() for f in files_under(tmp_path) if (tmp_path / f).is_file()}
    for cmd in (["status", str(rd.path)], ["compare", str(rd.path), "--source", "jsonl"]):
        res = subprocess.run([sys.executable, "-m", "trainstack", *cmd], capture_output=True, text=True, cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert res.returncode == 0, res.stderr
    assert {f: (tmp_path / f).read_bytes() for f in files_under(tmp_path) if (tmp_path / f).is_file()} == before


CONFIG_VALUES = st.one_of(st.none(), st.integers(-2, 2), st.sampled_from([0.5, 1.0, "a", "b", True]),
                          st.lists(st.integers(0, 2), max_size=2))


@settings(max_examples=60, deadline=None)
@given(configs=st.lists(st.dictionaries(st.sampled_from(["a", "b", "c", "d.e", "@lr", "run_id"]), CONFIG_VALUES,
                                        max_size=6), min_size=1, max_size=6))
def test_configs_kept_as_differences_give_the_same_columns(configs):
    """compare keeps each run's flattened config as its difference from the first run's (its memory is
    flat in the runs); the columns and cells are those of the full configs."""
    from trainstack.reports.compare import RunRecord, SharedFlat, build_table

    def records(shared: bool) -> list[RunRecord]:
        out = []
        store = SharedFlat()
        for i, flat in enumerate(configs):
            r = RunRecord(run_id=f"r{i}", run_dir=None, config={})
            r.flat = (lambda f=flat: dict(f))  # type: ignore[method-assign]
            if shared:
                r.flat_diff, r.shared = store.diff(r.flat()), store
            out.append(r)
        return out

    full, kept = build_table(records(False), []), build_table(records(True), [])
    assert kept["varying_keys"] == full["varying_keys"] or set(kept["varying_keys"]) == set(full["varying_keys"])
    assert [row["config"] for row in kept["rows"]] == [row["config"] for row in full["rows"]]
