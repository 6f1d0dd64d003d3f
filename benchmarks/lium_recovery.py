"""Fault -> training again, on the fake Lium: the figures of docs/lium.md's recovery table.

A tiny run (`cluster=lium_cpu`, a checkpoint every rollout) trains on a fake pod under a real
commander (lease TTL 6 s, heartbeat 1 s, worker deadline 4 s, pod listing every 0.5 s, backoff
0.5 s doubling to 2 s). Then one fault at a time, each measured from the moment it is injected:
- `gone`: the pod's node dies (every process killed, the pod no longer listed);
- `frozen`: every process of the pod is stopped (SIGSTOP) and stays listed: only the lease expiry tells;
- `glitch`: the pod is left out of 3 pod listings in a row while it trains (nothing must happen);
- `no_capacity`: the node dies and every node is sold out for CAPACITY_S seconds;
- `commander_restart`: the commander is SIGKILLed and started again DOWN_S seconds later (longer than
  the worker deadline, so the trainer stops and is started again);
- `volume_lost_no_hub`: the node dies with its volume: the run is paused (time to the pause), then
  `resume?from_scratch=true` (time from that call to the first checkpoint);
- `volume_lost_hub` (a second run, `hub.repo_id` on the fake Hub): the node dies with its volume; the next
  pod restores the newest checkpoint the Hub holds;
- `finish`: a short run ends; the time from the worker's `finished` report to its pod's removal (billing).
"Training again" is the first new checkpoint on the volume after the fault (after the resume).

Results: benchmarks/results/lium_recovery.json. Short mode: gone, frozen and glitch once.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "devtools"))  # trainstack_dev: the fake Lium (not installed)

from commander_helpers import TOKEN, CommanderProc, wait_for  # noqa: E402
from trainstack_dev.fakes.lium import FakeLium, client_env, ensure_ssh_key  # noqa: E402

import benchlib  # noqa: E402

QUICK = benchlib.quick()
TRIALS = int(os.environ.get("BENCH_TRIALS", 1 if QUICK else 3))  # gone and frozen; the others once
TTL = 6.0
CAPACITY_S = 8.0
DOWN_S = 8.0
IMAGE = "cluster.lium.pod.image=trainstack/trainstack-slime:bench"


class Bench:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.fake = FakeLium(tmp / "fake")
        url = self.fake.serve()
        key = ensure_ssh_key(tmp / "home" / ".ssh" / "id_ed25519")
        self.lenv = client_env(url, self.fake.api_key, home=tmp / "home", ssh_key=key)
        self.hub = None
        if not QUICK:
            from trainstack_dev.fakes.hub import FakeHub

            token = "hf_" + secrets.token_hex(16)
            self.hub = FakeHub(token=token, log_path=str(tmp / "hub.jsonl")).start()
            self.lenv.update({"HF_ENDPOINT": self.hub.url, "HF_TOKEN": token, "HF_HOME": str(tmp / "hf-home"),
                              "HF_HUB_DISABLE_TELEMETRY": "1"})
        self.cmd = CommanderProc(tmp, self.lenv).start()
        self.admin = self.cmd.client()
        self.env = {**os.environ, **self.lenv, "TRAINSTACK_COMMANDER_URL": self.cmd.url,
                    "TRAINSTACK_COMMANDER_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}

    def launch(self, run_id: str, *extra: str) -> None:
        res = subprocess.run([sys.executable, str(ROOT / "run.py"), "cluster=lium_cpu", IMAGE, f"run_id={run_id}",
                              "args.save_interval=1", "env.eval_interval=null", "env.eval_prompt_data=null",
                              f"paths.runs_root={self.tmp}/runs", f"paths.data_root={self.tmp}/data",
                              "cluster.lium.restart_limit=100", *extra],
                             cwd=self.tmp, env=self.env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr

    def rec(self, run_id: str) -> dict:
        return self.admin.get(f"/v1/runs/{run_id}")

    def training(self, run_id: str, timeout: float = 120) -> dict:
        return wait_for(lambda: (r := self.rec(run_id))["phase"] == "running" and (r["last_checkpoint"] or 0) >= 1
                        and r, timeout, f"{run_id} training")

    def tracker(self, rec: dict) -> Path:
        return (self.fake.volume_dir(rec["volume_id"]) / "trainstack" / "runs" / rec["run_id"] / "checkpoints"
                / "latest_checkpointed_iteration.txt")

    def last_event(self, run_id: str) -> int:
        last = 0
        while True:
            page = self.admin.get(f"/v1/runs/{run_id}/events?after={last}")
            if not page:
                return last
            last = page[-1]["id"]

    def events_since(self, run_id: str, after: int, t0: float) -> dict[str, float]:
        """First time (s after t0) of each event since `after`."""
        ev = self.admin.get(f"/v1/runs/{run_id}/events?after={after}")
        return {e["event"]: round(e["time"] - t0, 2) for e in reversed(ev)}

    def close(self) -> None:
        try:
            for r in self.admin.get("/v1/runs"):
                if r["phase"] not in ("finished", "failed", "cancelled"):
                    self.admin.post(f"/v1/runs/{r['run_id']}/cancel")
            wait_for(lambda: not self.fake.live_pods(), 90, "pods removed")
        finally:
            self.cmd.stop()
            self.fake.close()
            if self.hub is not None:
                self.hub.stop()


def read_int(path: Path) -> int:
    try:
        return int(path.read_text() or -1)
    except (OSError, ValueError):
        return -1


def replaced(b: Bench, kind: str) -> dict:
    """gone / frozen / no_capacity: the run moves to a new pod and trains again."""
    rec = b.training("bench")
    tracker, epoch, after = b.tracker(rec), rec["epoch"], b.last_event("bench")
    t0 = time.time()
    if kind == "no_capacity":
        b.fake.set_faults(sold_out_until=t0 + CAPACITY_S)
    if kind == "frozen":
        b.fake.freeze_pod(rec["pod_id"])
    else:
        b.fake.kill_pod(rec["pod_id"], listed="gone")
    at_fault = read_int(tracker)
    seen_waiting = []
    wait_for(lambda: (seen_waiting.append((b.rec("bench").get("message") or "")) or True)
             and b.rec("bench")["epoch"] > epoch and read_int(tracker) > at_fault, 180,
             f"{kind}: a new checkpoint after the resume", every=0.05)
    at = b.events_since("bench", after, t0)
    out = {"fault": kind, "noticed_s": at.get("pod_lost", at.get("lease_expired", -1)),
           "provisioning_s": round(at["worker_started"] - at["provisioning"], 2), "lease_s": at["lease_acquired"],
           "training_again_s": round(time.time() - t0, 2), "restarts_counted": "backoff" in at}
    if kind == "no_capacity":
        out["capacity_s"] = CAPACITY_S
        out["status_said"] = next((m for m in seen_waiting if m.startswith("waiting for capacity")), None)
    return out


def glitch(b: Bench) -> dict:
    rec = b.training("bench")
    tracker, epoch = b.tracker(rec), rec["epoch"]
    at_fault = read_int(tracker)
    t0 = time.time()
    b.fake.set_faults(omit_from_listing={rec["pod_id"]: 3})
    wait_for(lambda: not b.fake.faults.omit_from_listing, 30, "three listings without the pod", every=0.05)
    hidden_s = time.time() - t0
    time.sleep(TTL)  # more than a lease TTL after the glitch: the pod is still the run's
    after = b.rec("bench")
    assert after["epoch"] == epoch and after["pod_id"] == rec["pod_id"], after
    return {"fault": "glitch", "listings_omitting_it": 3, "hidden_for_s": round(hidden_s, 2), "training_again_s": 0.0,
            "checkpoints_during": read_int(tracker) - at_fault, "pod_kept": True, "epoch_unchanged": True}


def commander_restart(b: Bench) -> dict:
    rec = b.training("bench")
    tracker, epoch = b.tracker(rec), rec["epoch"]
    t0 = time.time()
    b.cmd.kill9()
    time.sleep(DOWN_S)
    at_back = read_int(tracker)
    t_back = time.time()
    b.cmd.start()
    wait_for(lambda: read_int(tracker) > at_back, 120, "a checkpoint after the commander is back", every=0.05)
    after = b.rec("bench")
    return {"fault": "commander_restart", "down_s": DOWN_S, "training_again_s": round(time.time() - t0, 2),
            "after_back_s": round(time.time() - t_back, 2), "same_pod": after["pod_id"] == rec["pod_id"],
            "same_epoch": after["epoch"] == epoch}


def volume_lost_no_hub(b: Bench) -> dict:
    rec = b.training("bench")
    tracker = b.tracker(rec)
    t0 = time.time()
    b.fake.kill_pod(rec["pod_id"], listed="gone")
    shutil.rmtree(tracker.parents[1])
    paused = wait_for(lambda: (r := b.rec("bench"))["phase"] == "paused" and r, 120, "paused: volume lost")
    t_pause = time.time() - t0
    t1 = time.time()
    b.admin.post("/v1/runs/bench/resume?from_scratch=true")
    wait_for(lambda: read_int(tracker) >= 0, 120, "training from scratch", every=0.05)
    return {"fault": "volume_lost_no_hub", "paused_s": round(t_pause, 2), "status_said": paused["message"],
            "from_scratch_to_training_s": round(time.time() - t1, 2), "training_again_s": None}


def volume_lost_hub(b: Bench) -> dict:
    b.launch("benchhub", "env.num_rollout=100000", "hub.repo_id=team/bench")
    rec = wait_for(lambda: (r := b.rec("benchhub"))["phase"] == "running"
                   and ((r.get("progress") or {}).get("hub_pushed") or -1) >= 2 and r, 180, "a checkpoint on the Hub")
    tracker = b.tracker(rec)
    pushed = rec["progress"]["hub_pushed"]
    t0 = time.time()
    b.fake.kill_pod(rec["pod_id"], listed="gone")
    shutil.rmtree(tracker.parents[1])
    wait_for(lambda: b.rec("benchhub")["epoch"] > rec["epoch"] and read_int(tracker) > pushed, 240,
             "a checkpoint after the Hub restore", every=0.05)
    out = {"fault": "volume_lost_hub", "training_again_s": round(time.time() - t0, 2), "hub_checkpoint": pushed}
    reqs = list(b.hub.requests) if b.hub is not None else []  # which large-file path the pushes and restore took
    out["xorb_uploads"] = sum(r["path"].startswith("/v1/xorbs/") for r in reqs)
    out["reconstructions_after_fault"] = sum(r["path"].startswith("/v1/reconstructions/") and r["t"] >= t0
                                             for r in reqs)
    b.admin.post("/v1/runs/benchhub/cancel")
    wait_for(lambda: b.rec("benchhub")["phase"] == "cancelled", 90, "benchhub cancelled")
    return out


def finish(b: Bench) -> dict:
    b.launch("benchfin", "env.num_rollout=8")
    wait_for(lambda: b.rec("benchfin")["phase"] in ("finished", "failed"), 180, "benchfin finished")
    rec = wait_for(lambda: (r := b.rec("benchfin"))["pods"] and all(p["removed"] for p in r["pods"]) and r, 60,
                   "its pod removed")
    ev = {e["event"]: e["time"] for e in b.admin.get("/v1/runs/benchfin/events")}
    removed = max(p["removed"] for p in rec["pods"])
    fake_removed = max(r["removed"] for r in b.fake.removed if r["name"].startswith("ts-benchfin"))
    return {"fault": "finish", "phase": rec["phase"], "report_to_removed_s": round(removed - ev["worker_finished"], 2),
            "report_to_fake_removed_s": round(fake_removed - ev["worker_finished"], 2), "training_again_s": None}


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="liumbench-"))
    b = Bench(tmp)
    b.launch("bench", "env.num_rollout=100000")
    trials = []
    plan = ["gone", "frozen"] * TRIALS + ["glitch"]
    if not QUICK:
        plan += ["no_capacity", "commander_restart", "volume_lost_no_hub", "volume_lost_hub", "finish"]
    if os.environ.get("BENCH_FAULTS"):  # e.g. BENCH_FAULTS=no_capacity,finish: only those
        plan = [k for k in plan if k in os.environ["BENCH_FAULTS"].split(",")]
    try:
        for kind in plan:
            if kind in ("gone", "frozen", "no_capacity"):
                trials.append(replaced(b, kind))
            else:
                trials.append({"glitch": glitch, "commander_restart": commander_restart,
                               "volume_lost_no_hub": volume_lost_no_hub, "volume_lost_hub": volume_lost_hub,
                               "finish": finish}[kind](b))
            print(json.dumps(trials[-1]), flush=True)
    finally:
        b.close()
        shutil.rmtree(tmp, ignore_errors=True)  # a benchmark leaves nothing behind
    out: dict = {"ttl_s": TTL, "heartbeat_s": 1.0, "worker_deadline_s": 4.0, "probe_s": 0.5, "backoff_s": [0.5, 2.0],
                 "trials": trials}
    for kind in dict.fromkeys(plan):
        ts = [t for t in trials if t["fault"] == kind]
        keys = [k for k, v in ts[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        out[kind] = {k: round(statistics.median(t[k] for t in ts), 2) for k in keys}
    for kind in ("gone", "frozen"):
        out[kind]["target_s"] = round(TTL + out[kind]["provisioning_s"] + 10, 2)
    print(json.dumps(out, indent=1))
    benchlib.write("lium_recovery.json", out)
    ok = all(out[k]["training_again_s"] <= out[k]["target_s"] for k in ("gone", "frozen"))
    return 0 if ok or QUICK else 1  # a short run checks that it works, not the figures


if __name__ == "__main__":
    sys.exit(main())
