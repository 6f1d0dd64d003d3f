"""Benchmark: does Hub sync slow training down, and does training pause while the Hub is down?

Runs the CPU smoke config (`python run.py`, tiny trainer) against the fake Hub in its own process
(`python -m trainstack_dev.fakes.hub` at nice 19, standing in for a remote service; the real
huggingface_hub client talks to it):

1. sync off vs sync on (`hub.repo_id`) in `--reps` back-to-back pairs (order alternating, so drifts in
   the machine's load hit both): per pair the ratio of the median `perf/rollout_time` (target: on
   within 5% of off; the median over pairs is reported, with every pair), and the CPU seconds of
   the launcher + trainer process tree (os.wait4), whose difference is what the sync itself costs; and,
   in the same runs, the rollouts right after each save (while its push runs) against the others
   (`push_overlap_ratio`, on relative to off: immune to the machine's load drifting between runs);
2. sync on with the Hub down for `--outage-s` seconds mid-run (every connection dropped): rollout
   times while it is down vs sync off, the longest step, how many pushes failed, and whether the
   backlog was pushed afterwards (the Hub's pointer names the run's last checkpoint).

Writes benchmarks/results/hub_sync.json.

    .venv/bin/python benchmarks/hub_sync.py [--num-rollout 200] [--reps 5] [--outage-s 60]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPO = "bench/ckpts"


def start_hub(tmp: Path) -> tuple[subprocess.Popen, str]:
    ready = tmp / "hub.url"
    # nice 19: the fake stands in for a remote service; its CPU is not the trainer machine's cost
    proc = subprocess.Popen(["nice", "-n", "19", sys.executable, "-m", "trainstack_dev.fakes.hub", "--port", "0",
                             "--ready-file", str(ready)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'devtools'}"},  # trainstack_dev: not installed
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:  # with autogroup scheduling (one group per session) nice alone does not lower a session's share
        Path(f"/proc/{proc.pid}/autogroup").write_text("19")
    except OSError:
        pass
    for _ in range(600):  # at nice 19 on a loaded machine the start can take long
        if ready.exists():
            return proc, ready.read_text().strip()
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the fake Hub did not start")


def post(url: str, body: dict | None, method: str = "POST") -> None:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, method=method,
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


def rollout_metrics(run_dir: Path) -> list[dict]:
    out = []
    for ln in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            rec = json.loads(ln)
        except ValueError:
            continue
        if rec.get("step_key") == "rollout/step":
            out.append(rec["metrics"] | {"step": rec["step"]})
    return out


def launch(tmp: Path, run_id: str, num_rollout: int, save_interval: int, hub: str | None, env: dict) -> subprocess.Popen:
    argv = [sys.executable, str(ROOT / "run.py"), f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data",
            f"run_id={run_id}", f"env.num_rollout={num_rollout}", f"args.save_interval={save_interval}",
            "env.eval_interval=null", "env.eval_prompt_data=null"] + ([f"hub.repo_id={REPO}", "hub.retry_max_s=5"]
                                                                      if hub else [])
    return subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def summary(rows: list[dict]) -> dict:
    return {"rollouts": len(rows),
            "rollout_time_median_s": round(statistics.median(r["perf/rollout_time"] for r in rows), 5),
            "step_time_median_s": round(statistics.median(r["perf/step_time"] for r in rows), 5),
            "step_time_max_s": round(max(r["perf/step_time"] for r in rows), 4)}


def phase_split(rows: list[dict], save_interval: int, during: int = 3) -> tuple[float, float]:
    """Median rollout time of the `during` rollouts right after each save (when its push runs) and of
    the others, in the same run: a slowdown caused by the push shows up as a difference between them,
    whatever the rest of the machine does over minutes."""
    near = [r["perf/rollout_time"] for r in rows if r["step"] % save_interval < during and r["step"] >= save_interval]
    rest = [r["perf/rollout_time"] for r in rows if r["step"] % save_interval >= during]
    return statistics.median(near), statistics.median(rest)


def events(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines() if ln.strip()]


def main() -> int:
    import benchlib

    quick = benchlib.quick()  # short mode: one pair of 15-rollout runs, a 2 s outage (benchmarks/benchlib.py)
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-rollout", type=int, default=15 if quick else 200)
    ap.add_argument("--save-interval", type=int, default=5 if quick else 10)
    ap.add_argument("--reps", type=int, default=1 if quick else 5)
    ap.add_argument("--outage-s", type=float, default=2.0 if quick else 60.0)
    ap.add_argument("--out", default=None, help="default: benchmarks/results/hub_sync.json")
    ns = ap.parse_args()
    ns.out = ns.out or str(benchlib.result_path("hub_sync.json"))
    tmp = Path(tempfile.mkdtemp(prefix="hub-bench-"))
    hub_proc, url = start_hub(tmp)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_ENDPOINT": url, "HF_HOME": str(tmp / "hf-home"),
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_TOKEN", None)
    result: dict = {"config": {"num_rollout": ns.num_rollout, "save_interval": ns.save_interval, "reps": ns.reps,
                               "outage_s": ns.outage_s, "backend": "tiny (cpu-smoke, eval off)"}, "cpus": os.cpu_count()}
    try:
        result["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
        per: dict[str, list[dict]] = {"off": [], "on": []}
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        pairs: list[dict] = []
        pushes = 0
        for rep in range(ns.reps):
            pair = {}
            for mode in (("off", "on") if rep % 2 == 0 else ("on", "off")):
                run_id = f"{mode}-{rep}"
                proc = launch(tmp, run_id, ns.num_rollout, ns.save_interval, REPO if mode == "on" else None, env)
                err = proc.stderr.read() if proc.stderr else ""
                _, wstatus, usage = os.wait4(proc.pid, 0)  # CPU of the launcher and everything it waited for
                proc.returncode = os.waitstatus_to_exitcode(wstatus)
                if proc.returncode != 0:
                    raise RuntimeError(f"{run_id} failed:\n{err[-3000:]}")
                rows = rollout_metrics(tmp / "runs" / run_id)
                per[mode] += rows
                cpu[mode].append(usage.ru_utime + usage.ru_stime)
                pair[mode] = summary(rows)["rollout_time_median_s"]
                pushes += sum(e["event"] == "hub_push" for e in events(tmp / "runs" / run_id))
                print(f"{run_id}: {summary(rows)} cpu {cpu[mode][-1]:.1f} s", file=sys.stderr)
            pairs.append({"off": pair["off"], "on": pair["on"], "ratio": round(pair["on"] / pair["off"], 4)})
        off, on = summary(per["off"]), summary(per["on"])
        cpu_off, cpu_on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
        (on_near, on_rest), (off_near, off_rest) = (phase_split(per[m], ns.save_interval) for m in ("on", "off"))
        result["sync"] = {
            "off": off, "on": on, "pushes_on": pushes, "pairs": pairs,
            "rollout_time_ratio_median_of_pairs": round(statistics.median(p["ratio"] for p in pairs), 4),
            "rollout_time_ratio_pooled": round(on["rollout_time_median_s"] / off["rollout_time_median_s"], 4),
            "step_time_ratio_pooled": round(on["step_time_median_s"] / off["step_time_median_s"], 4),
            "target_ratio": 1.05,
            "within_run": {"on": {"after_save_s": round(on_near, 5), "rest_s": round(on_rest, 5)},
                           "off": {"after_save_s": round(off_near, 5), "rest_s": round(off_rest, 5)},
                           "push_overlap_ratio": round((on_near / on_rest) / (off_near / off_rest), 4)},
            "cpu_s_per_run": {"off": round(cpu_off, 2), "on": round(cpu_on, 2)},
            "sync_cpu_s_per_push": round((cpu_on - cpu_off) / max(pushes / ns.reps, 1), 4),
            "sync_cpu_share_of_run": round((cpu_on - cpu_off) / cpu_off, 4)}
        result["load_average_after_pairs"] = [round(x, 2) for x in os.getloadavg()]

        # the Hub down for a minute in the middle of a run
        n = max(ns.num_rollout, int(3 * ns.outage_s / max(off["step_time_median_s"], 0.01)))
        run_dir = tmp / "runs" / "outage"
        proc = launch(tmp, "outage", n, ns.save_interval, REPO, env)
        count = lambda: len(rollout_metrics(run_dir)) if (run_dir / "metrics.jsonl").exists() else 0  # noqa: E731
        while count() < n // 4:
            if proc.poll() is not None:
                raise RuntimeError(proc.communicate()[1][-3000:])
            time.sleep(0.2)
        post(f"{url}/_fake/faults", {"kind": "drop", "match": "", "count": None, "seconds": ns.outage_s})
        t_down, first = time.monotonic(), count()
        while time.monotonic() - t_down < ns.outage_s:
            time.sleep(0.2)
        last = count()
        t_up = time.monotonic()
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"outage run failed:\n{err[-3000:]}")
        rows = rollout_metrics(run_dir)
        down_rows = [r for r in rows if first < r["step"] <= last]
        evs = events(run_dir)
        failed = [e for e in evs if e["event"] == "hub_push_failed"]
        pushed = [e for e in evs if e["event"] == "hub_push"]
        status = json.loads((run_dir / "status.json").read_text())
        raw = urllib.request.urlopen(f"{url}/{REPO}/resolve/main/outage/latest.json", timeout=10).read()
        down = summary(down_rows)
        result["outage"] = {
            "num_rollout": n, "down_s": ns.outage_s, "rollouts_while_down": len(down_rows),
            "while_down": down, "whole_run": summary(rows),
            "rollout_time_ratio_while_down_vs_off": round(down["rollout_time_median_s"] / off["rollout_time_median_s"], 4),
            "push_failed_events": len(failed), "pushes": len(pushed),
            "pushes_after_the_hub_came_back": sum(1 for e in pushed if e["iteration"] > last),
            "seconds_from_hub_back_to_exit": round(time.monotonic() - t_up, 1),
            "last_checkpoint": status["last_checkpoint"], "hub_pointer": json.loads(raw)["iteration"],
            "backlog_pushed": json.loads(raw)["iteration"] == status["last_checkpoint"]}
    finally:
        hub_proc.terminate()
        hub_proc.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    result["context"] = benchlib.context()
    Path(ns.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
