"""Pod lost -> training again, on the fake Lium (target: lease TTL + provisioning + 10 s).

A tiny run (`cluster=lium_cpu`, a checkpoint every rollout) trains on a fake pod under a real
commander (TTL 6 s, heartbeat 1 s, pod listing every 0.5 s, first backoff 0.5 s). Then, per trial:
- `gone`: the pod's node dies (every process killed, the pod no longer listed);
- `frozen`: every process of the pod is stopped (SIGSTOP) and stays listed: only the lease
  expiry tells.
Measured from the fault: the commander noticing (`pod_lost` / `lease_expired`), the new pod's
worker holding the lease, and the first new checkpoint on the volume after the resume ("training
again"). Provisioning (rent -> ready -> spec uploaded -> worker started) is reported separately.

Results: benchmarks/results/lium_recovery.json.
"""
from __future__ import annotations

import json
import os
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

TRIALS = int(os.environ.get("BENCH_TRIALS", 1 if benchlib.quick() else 3))  # short mode: one trial of each
TTL = 6.0


def last_event_id(admin) -> int:
    """The newest event id (the API pages by `after`, 1000 at a time)."""
    last = 0
    while True:
        page = admin.get(f"/v1/runs/bench/events?after={last}")
        if not page:
            return last
        last = page[-1]["id"]


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="liumbench-"))
    fake = FakeLium(tmp / "fake")
    url = fake.serve()
    key = ensure_ssh_key(tmp / "home" / ".ssh" / "id_ed25519")
    lenv = client_env(url, fake.api_key, home=tmp / "home", ssh_key=key)
    cmd = CommanderProc(tmp, lenv).start()
    admin = cmd.client()
    env = {**os.environ, **lenv, "TRAINSTACK_COMMANDER_URL": cmd.url, "TRAINSTACK_COMMANDER_TOKEN": TOKEN,
           "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, str(ROOT / "run.py"), "cluster=lium_cpu", "run_id=bench",
                          "cluster.lium.pod.image=trainstack/trainstack-slime:bench", "env.num_rollout=100000",
                          "args.save_interval=1", "env.eval_interval=null", "env.eval_prompt_data=null",
                          f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data",
                          "cluster.lium.restart_limit=100"],
                         cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    trials = []
    try:
        for i in range(2 * TRIALS):
            kind = "gone" if i % 2 == 0 else "frozen"
            rec = wait_for(lambda: (r := admin.get("/v1/runs/bench"))["phase"] == "running"
                           and (r["last_checkpoint"] or 0) >= 1 and r, 120, "training")
            ck_before = rec["last_checkpoint"]
            epoch = rec["epoch"]
            seen_events = last_event_id(admin)
            if kind == "gone":
                t0 = time.time()
                fake.kill_pod(rec["pod_id"], listed="gone")
            else:
                t0 = time.time()
                fake.freeze_pod(rec["pod_id"])
            vol = fake.volume_dir(rec["volume_id"]) / "trainstack" / "runs" / "bench" / "checkpoints"
            tracker = vol / "latest_checkpointed_iteration.txt"
            at_fault = int(tracker.read_text())  # the old trainer is dead or stopped: only the new pod moves it
            assert at_fault >= ck_before
            wait_for(lambda: admin.get("/v1/runs/bench")["epoch"] == epoch + 1
                     and int(tracker.read_text() or -1) > at_fault, 180, "a new checkpoint after resume", every=0.05)
            t_train = time.time() - t0
            ev = admin.get(f"/v1/runs/bench/events?after={seen_events}")
            at = {e["event"]: e["time"] - t0 for e in reversed(ev)}
            trials.append({"fault": kind, "noticed_s": round(at.get("pod_lost", at.get("lease_expired", -1)), 2),
                           "provisioning_s": round(at["worker_started"] - at["provisioning"], 2),
                           "lease_s": round(at["lease_acquired"], 2), "training_again_s": round(t_train, 2)})
            print(json.dumps(trials[-1]), flush=True)
    finally:
        admin.post("/v1/runs/bench/cancel")
        try:
            wait_for(lambda: not fake.live_pods(), 60, "pods removed")
        finally:
            cmd.stop()
            fake.close()
    out: dict = {"ttl_s": TTL, "trials": trials}
    for kind in ("gone", "frozen"):
        ts = [t for t in trials if t["fault"] == kind]
        out[kind] = {k: round(statistics.median(t[k] for t in ts), 2) for k in ("noticed_s", "provisioning_s",
                                                                               "lease_s", "training_again_s")}
        out[kind]["target_s"] = round(TTL + out[kind]["provisioning_s"] + 10, 2)
    print(json.dumps(out, indent=1))
    benchlib.write("lium_recovery.json", out)
    ok = all(out[k]["training_again_s"] <= out[k]["target_s"] for k in ("gone", "frozen"))
    return 0 if ok or benchlib.quick() else 1  # a short run checks that it works, not the figures


if __name__ == "__main__":
    sys.exit(main())
