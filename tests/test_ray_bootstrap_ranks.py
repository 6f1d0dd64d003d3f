"""A worker rank's `ray start` that dies before the run is done is started again; one that keeps dying
leaves its log tail, and rank 0's error names it (instead of waiting out its timeout and saying only
"missing node"). The SLURM test (tests/test_slurm.py::test_multinode_ray_bootstrap_two_tasks) runs the
real thing; this one the ranks' protocol, with nodes that exit at once."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainstack.launch import slurm_job
from trainstack.launch.slurm_job import RayNode, TaskEnv, bootstrap_ray


def _dying_node(calls: list[int], log_line: str = "Failed to bind port 41234: address in use"):
    def start(task, rendezvous, num_cpus, num_gpus, head_address):
        calls.append(task.rank)
        argv = [sys.executable, "-c", f"print({log_line!r}); raise SystemExit(1)"]
        node = RayNode(argv, rendezvous / f"ray-rank{task.rank}.log", {})
        node.proc.wait()
        return node
    return start


def _worker(tmp_path: Path, job: str = "7") -> tuple[TaskEnv, Path]:
    rendezvous = tmp_path / "ray" / job
    rendezvous.mkdir(parents=True)
    (rendezvous / "head.json").write_text(json.dumps({"address": "127.0.0.2:1", "job_id": job, "host": "h"}))
    return TaskEnv(job_id=job, rank=1, ntasks=2, hostnames=["h"], hostname="h"), rendezvous


def test_a_worker_node_that_keeps_dying_is_started_again_then_named(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(slurm_job, "start_node", _dying_node(calls))
    task, rendezvous = _worker(tmp_path)
    t0 = time.monotonic()
    assert bootstrap_ray(task, rendezvous, 1, 0, timeout_s=60) is None
    assert time.monotonic() - t0 < 30  # gave up after its tries, not at rank 0's deadline
    assert calls == [1] * slurm_job.NODE_STARTS
    why = slurm_job._rank_failure(rendezvous, 1)
    assert "rank 1's Ray node exited (exit code 1) 3 times" in why and "address in use" in why


def test_a_worker_stops_restarting_once_the_run_is_done(tmp_path, monkeypatch):
    calls: list[int] = []
    task, rendezvous = _worker(tmp_path)
    start = _dying_node(calls)

    def start_then_finish(*a):
        node = start(*a)
        (rendezvous / "done").write_text("1")  # rank 0 finished while this node was up
        return node
    monkeypatch.setattr(slurm_job, "start_node", start_then_finish)
    bootstrap_ray(task, rendezvous, 1, 0, timeout_s=60)
    assert calls == [1] and not (rendezvous / "rank1.failed").exists()


@settings(max_examples=40, deadline=None)
@given(failed=st.sets(st.integers(0, 5)), missing=st.sets(st.integers(0, 5)))
def test_rank_zero_names_exactly_the_missing_ranks_that_gave_up(tmp_path_factory, failed, missing):
    rendezvous = tmp_path_factory.mktemp("rv")
    for r in failed:
        (rendezvous / f"rank{r}.failed").write_text(f"exit code 1\nlog of rank {r}")
    named = "".join(slurm_job._rank_failure(rendezvous, r) for r in sorted(missing))
    for r in range(6):
        assert (f"log of rank {r}" in named) == (r in failed and r in missing)


@pytest.mark.parametrize("code", [1, None])
def test_the_failure_record_round_trips(tmp_path, code):
    (tmp_path / "ray-rank2.log").write_text("\n".join(f"line {i}" for i in range(20)))
    slurm_job._write_failure(tmp_path, 2, code)
    why = slurm_job._rank_failure(tmp_path, 2)
    assert f"(exit code {code})" in why and "line 19" in why and "line 11" not in why  # the last 8 lines
