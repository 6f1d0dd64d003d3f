"""Benchmark: read 50 runs x 500 steps of TensorBoard event files into the `trainstack compare` table.

Generates the runs (4 metrics each, real event files via tensorboard's EventFileWriter) in a
temp dir, then times collect + metric reading + table building (what `trainstack compare
<sweep>` does before printing). Target: <= 5 s on a 2-core machine.
Writes benchmarks/results/compare_read.json. Short mode (--quick): 5 runs x 50 steps, no target.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import benchlib  # noqa: E402

RUNS, STEPS = benchlib.pick((50, 500), (5, 50))
METRICS = ("rollout/raw_reward", "rollout/response_lengths", "train/loss", "eval/arithmetic")


def generate(root: Path) -> Path:
    import yaml
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    runs = []
    for i in range(RUNS):
        d = root / "runs" / f"bench-{i:03d}"
        (d / "tensorboard").mkdir(parents=True)
        (d / "config.yaml").write_text(yaml.safe_dump({"name": "bench", "algo": {"lr": 1e-4 * (1 + i % 5)},
                                                       "args": {"seed": i}}))
        (d / "command.json").write_text(json.dumps({"run_id": d.name, "argv": []}))
        (d / "status.json").write_text(json.dumps({"run_id": d.name, "state": "finished", "num_rollout": STEPS}))
        w = EventFileWriter(str(d / "tensorboard"))
        for step in range(STEPS):  # one event per scalar, as torch's SummaryWriter.add_scalar writes them
            for k, m in enumerate(METRICS):
                w.add_event(Event(step=step, wall_time=1.0 + step, summary=Summary(value=[
                    Summary.Value(tag=m, simple_value=(i + 1) * step / STEPS + k)])))
        w.close()
        runs.append({"run_id": d.name, "run_dir": str(d), "overrides": [], "job_num": i, "job_id": str(i)})
    sweep = root / "multirun" / "bench"
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"sweep_dir": str(sweep), "runs": runs}))
    return sweep


def main() -> int:
    from trainstack.reports.compare import attach_metrics, build_table, collect, select_metrics

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        sweep = generate(Path(tmp))
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        records = attach_metrics(collect([str(sweep)], None, Path(tmp) / "runs"), "tensorboard")
        table = build_table(records, select_metrics(["rollout/*", "train/loss", "eval/*"], records),
                            sort="rollout/raw_reward", desc=True)
        read_s = time.perf_counter() - t0
    assert len(table["rows"]) == RUNS and table["rows"][0]["metrics"]["rollout/raw_reward"]["final"] is not None
    result = {"runs": RUNS, "steps": STEPS, "metrics_per_run": len(METRICS), "scalars": RUNS * STEPS * len(METRICS),
              "read_seconds": round(read_s, 3), "generate_seconds": round(gen_s, 3), "target_seconds": 5.0,
              "within_target": read_s <= 5.0, "cpus": os.cpu_count(), "python": platform.python_version(),
              "reader": "TFRecord framing and scalar events as arrays (trainstack/metrics/tensorboard.py)"}
    benchlib.write("compare_read.json", result)
    return 0 if result["within_target"] or benchlib.quick() else 1


if __name__ == "__main__":
    sys.exit(main())
