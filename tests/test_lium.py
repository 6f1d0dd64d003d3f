"""Sweeps and runs on (fake) Lium pods, end to end: `python run.py ... cluster=lium_cpu` and
`-m hydra/launcher=lium` register runs with a real commander (uvicorn subprocess), which rents
pods from the fake Lium through the real SDK; each pod runs `python -m trainstack.launch.lium_worker`, which
runs the stored spec with `trainstack exec` from the run's volume. After every scenario no pod is
listed and no pod process is left."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from commander_helpers import TOKEN, CommanderProc, wait_for
from conftest import ROOT, SMALL_BATCH, run_py

pytestmark = pytest.mark.slow
IMAGE = "cluster.lium.pod.image=trainstack/trainstack-slime:test"  # the fake's pods of a `trainstack` image have it
COMMON = ["cluster=lium_cpu", IMAGE, "env.eval_interval=null", "env.eval_prompt_data=null", *SMALL_BATCH]


class Stack:
    def __init__(self, fake_lium, tmp: Path, **flags: str):
        self.fake = fake_lium.fake
        self.tmp = tmp
        self.cmd = CommanderProc(tmp, fake_lium.env, **flags).start()
        self.env = {**fake_lium.env, "TRAINSTACK_COMMANDER_URL": self.cmd.url, "TRAINSTACK_COMMANDER_TOKEN": TOKEN}
        self.admin = self.cmd.client()

    def run(self, *overrides: str, timeout: float = 120):
        flags = [o for o in overrides if o == "-m"]
        return run_py(*flags, f"paths.runs_root={self.tmp}/runs", f"paths.data_root={self.tmp}/data", *COMMON,
                      *[o for o in overrides if o != "-m"], cwd=self.tmp, env=self.env, timeout=timeout)

    def trainstack(self, *argv: str, timeout: float = 60):
        return subprocess.run([sys.executable, "-m", "trainstack", *argv, "--runs-root", str(self.tmp / "runs")],
                              cwd=self.tmp, env={**os.environ, **self.env, "PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True, timeout=timeout)

    def rec(self, run_id: str) -> dict:
        return self.admin.get(f"/v1/runs/{run_id}")

    def wait_phase(self, run_id: str, phases: tuple[str, ...], timeout: float = 180) -> dict:
        try:
            return wait_for(lambda: (r := self.rec(run_id))["phase"] in phases and r, timeout,
                            f"{run_id} in {phases}", every=0.3)
        except AssertionError as ex:  # say what the commander saw
            events = [(e["event"], e["data"]) for e in self.admin.get(f"/v1/runs/{run_id}/events")]
            raise AssertionError(f"{ex}\nevents: {events}\nrecord: {self.rec(run_id)}\ncommander log: "
                                 f"{self.cmd.log.read_text()[-3000:]}") from None

    def volume_run_dir(self, run_id: str) -> Path:
        return self.fake.volume_dir(self.rec(run_id)["volume_id"]) / "trainstack" / "runs" / run_id

    def events(self, run_id: str) -> list[str]:
        return [e["event"] for e in self.admin.get(f"/v1/runs/{run_id}/events")]

    def close(self) -> None:
        """After a scenario: every pod is removed (within a few reconciler ticks) and none is running."""
        wait_for(lambda: not self.fake.live_pods(), 30, "every pod removed")
        self.cmd.stop()
        assert self.fake.live_pods() == [], "a pod was left running"


@pytest.fixture
def stack(fake_lium, tmp_path):
    s = Stack(fake_lium, tmp_path)
    try:
        yield s
    finally:
        s.cmd.stop()


def weights(path: Path) -> dict:
    import torch

    sd = torch.load(path, map_location="cpu", weights_only=False)
    return sd.get("model", sd)


def same_weights(a: Path, b: Path) -> bool:
    import torch

    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def tracker(run_dir: Path) -> int | None:
    try:
        return int((run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text())
    except (OSError, ValueError):
        return None


REF_ROLLOUTS = 160  # the longest scenario below


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same run trained locally without interruption, once for the module: it saves every rollout, so
    `reference(n)` is its iter n-1, the weights any uninterrupted n-rollout run ends with (a rollout's
    randomness derives from (seed, rollout); the LR schedule is constant; a save changes nothing)."""
    tmp = tmp_path_factory.mktemp("lium-ref")
    res = run_py(f"paths.runs_root={tmp}/ref-runs", f"paths.data_root={tmp}/ref-data", "cluster=local_cpu",
                 "run_id=ref", *COMMON[2:], f"env.num_rollout={REF_ROLLOUTS}", "args.save_interval=1", cwd=tmp,
                 timeout=300)
    assert res.returncode == 0, res.stderr

    def at(n: int) -> Path:
        assert n <= REF_ROLLOUTS, f"raise REF_ROLLOUTS to {n}"
        return tmp / "ref-runs" / "ref" / "checkpoints" / f"iter_{n - 1:07d}" / "model.pt"

    return at


def test_two_point_sweep_runs_to_the_end(stack, fake_lium):
    sweep = stack.tmp / "sw"
    t0 = time.monotonic()
    res = stack.run("-m", "hydra/launcher=lium", "algo.lr=1e-3,2e-3", "env.num_rollout=4", "args.save_interval=2",
                    f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 60 and "registered 2 runs" in res.stderr  # returns at once
    man = json.loads((sweep / "sweep.json").read_text())
    assert man["scheduler"] == "lium" and len(man["runs"]) == 2
    ids = [r["run_id"] for r in man["runs"]]
    assert len(set(ids)) == 2
    for rid in ids:
        assert (stack.tmp / "runs" / rid / "spec.json").is_file() and (stack.tmp / "runs" / rid / "lium.json").is_file()
    recs = [stack.wait_phase(rid, ("finished", "failed")) for rid in ids]
    assert [r["phase"] for r in recs] == ["finished", "finished"], [r["message"] for r in recs]
    assert [r["last_checkpoint"] for r in recs] == [3, 3] and all(r["cost_usd"] > 0 for r in recs)
    wait_for(lambda: not fake_lium.fake.live_pods(), 20, "both pods removed")
    assert fake_lium.fake.running_processes() == []
    assert len(fake_lium.fake.removed) == 2
    for rid in ids:  # billing stops at the next reconciler pass after the worker's last report, not minutes later
        # the commander records pod_removed just after the provider's removal returns (the pod can be gone first)
        ev = wait_for(lambda rid=rid: "pod_removed" in (e := {x["event"]: x["time"] for x in stack.admin.get(
            f"/v1/runs/{rid}/events")}) and e, 10, f"{rid}'s pod_removed event", every=0.2)
        assert ev["pod_removed"] - ev["worker_finished"] < 5.0, ev
    for rid in ids:  # the submit host's run dirs hold the spec only: the metrics are the pods' (gone now)
        assert not (stack.tmp / "runs" / rid / "metrics.jsonl").exists()
    cmp = stack.trainstack("compare", str(sweep), "--json")  # brings them back through the commander
    assert cmp.returncode == 0, cmp.stderr
    table = {r["run_id"]: r for r in json.loads(cmp.stdout)["rows"]}
    for rid in ids:
        assert table[rid]["status"] == "finished" and table[rid]["rollouts"] == 4 and table[rid]["source"] == "jsonl"
        assert table[rid]["metrics"]["rollout/raw_reward"]["final_step"] == 3
    st = stack.trainstack("status", str(sweep), "--json")
    assert st.returncode == 0, st.stderr
    rows = {r["run_id"]: r for r in json.loads(st.stdout)}
    for rid in ids:
        assert rows[rid]["state"] == "finished" and rows[rid]["last_checkpoint"] == 3 and rows[rid]["epoch"] == 1
        assert rows[rid]["scheduler"] == "finished" and rows[rid]["cost_usd"] > 0 and rows[rid]["restarts"] == 0
    assert sorted(r["varying"][0] for r in rows.values()) == ["algo.lr=0.001", "algo.lr=0.002"]
    logs = stack.trainstack("logs", ids[0])
    assert "rollout 4/4" in logs.stdout, logs.stderr
    # the pod ran the stored spec from its volume, with pod paths
    pod_spec = json.loads((stack.volume_run_dir(ids[0]) / "spec.json").read_text())
    assert pod_spec["run_dir"] == f"/mnt/trainstack/runs/{ids[0]}" and pod_spec["command"]["entrypoint"][0] == "python3"
    assert str(stack.tmp) not in json.dumps(pod_spec["command"])
    stack.close()


def test_pod_killed_mid_run_resumes_from_the_volume_with_identical_weights(stack, fake_lium, reference):
    n = 100
    ref = reference(n)
    res = stack.run("run_id=killed", f"env.num_rollout={n}", "args.save_interval=1")
    assert res.returncode == 0, res.stderr
    rec = wait_for(lambda: (r := stack.rec("killed"))["phase"] == "running" and (r["last_checkpoint"] or 0) >= 3
                   and r, 120, "a few checkpoints")
    first_pod = rec["pod_id"]
    killed_at = time.monotonic()
    fake_lium.fake.kill_pod(first_pod, listed="gone")
    rec2 = wait_for(lambda: (r := stack.rec("killed"))["epoch"] == 2 and r["phase"] == "running" and r, 60,
                    "a new pod holding the lease")
    back_in = time.monotonic() - killed_at
    assert rec2["pod_id"] != first_pod and back_in < 6 + 30  # TTL + provisioning on the fake
    done = stack.wait_phase("killed", ("finished", "failed"))
    assert done["phase"] == "finished", done["message"]
    ev = stack.events("killed")
    assert "pod_lost" in ev and ev.count("lease_acquired") == 2
    rd = stack.volume_run_dir("killed")
    starts = [json.loads(ln) for ln in (rd / "events.jsonl").read_text().splitlines()]
    resumes = [e for e in starts if e["event"] == "resume"]
    assert len(resumes) == 1 and resumes[0]["from_rollout"] >= 3  # from the volume, not from zero
    assert same_weights(ref, rd / "checkpoints" / f"iter_{n - 1:07d}" / "model.pt")
    stack.close()


def test_pod_lost_with_its_volume_wiped_restores_from_the_hub_with_identical_weights(fake_hub, stack, fake_lium, reference):
    """The node and its disk are gone: the next pod finds no checkpoint on the volume, restores the newest
    one the Hub holds (HF_ENDPOINT and HF_TOKEN reach it from the commander), and ends with the weights
    of an uninterrupted run; the token is in no file of the volume or the run dir."""
    import shutil

    n = 100
    ref = reference(n)
    res = stack.run("run_id=wiped", f"env.num_rollout={n}", "args.save_interval=2", "hub.repo_id=team/ckpts")
    assert res.returncode == 0, res.stderr
    rec = wait_for(lambda: (r := stack.rec("wiped"))["phase"] == "running"
                   and ((r.get("progress") or {}).get("hub_pushed") or -1) >= 3 and r, 150, "a checkpoint on the Hub")
    assert rec["last_hub_commit"] and len(rec["last_hub_commit"]) == 40
    rd = stack.volume_run_dir("wiped")
    fake_lium.fake.kill_pod(rec["pod_id"], listed="gone")
    shutil.rmtree(rd)  # the disk is gone with the node
    done = stack.wait_phase("wiped", ("finished", "failed"), timeout=240)
    assert done["phase"] == "finished" and done["epoch"] == 2, done["message"]
    evs = [json.loads(ln) for ln in (rd / "events.jsonl").read_text().splitlines()]
    restore = [e for e in evs if e["event"] == "hub_restore"]
    resume = [e for e in evs if e["event"] == "resume"]
    assert len(restore) == 1 and restore[0]["iteration"] >= 3 and restore[0]["repo_id"] == "team/ckpts"
    assert len(resume) == 1 and resume[0]["from_rollout"] == restore[0]["iteration"] + 1  # not from zero
    assert same_weights(ref, rd / "checkpoints" / f"iter_{n - 1:07d}" / "model.pt")
    token = os.environ["HF_TOKEN"].encode()
    leaks = [str(p) for base in (rd, stack.tmp / "runs") for p in base.rglob("*") if p.is_file() and token in p.read_bytes()]
    assert leaks == []
    stack.close()


def test_commander_sigkilled_and_restarted_mid_run(stack, fake_lium):
    res = stack.run("-m", "hydra/launcher=lium", "algo.lr=1e-3,2e-3", "env.num_rollout=120", "args.save_interval=5",
                    f"hydra.sweep.dir={stack.tmp / 'sw'}")
    assert res.returncode == 0, res.stderr
    ids = [r["run_id"] for r in json.loads((stack.tmp / "sw" / "sweep.json").read_text())["runs"]]
    for rid in ids:
        wait_for(lambda rid=rid: (r := stack.rec(rid))["phase"] == "running" and r, 120, f"{rid} running")
    before = {rid: stack.rec(rid) for rid in ids}
    stack.cmd.kill9()
    time.sleep(2.0)
    stack.cmd.start()
    for rid in ids:
        after = stack.rec(rid)
        assert (after["epoch"], after["pod_id"], after["lease_holder"]) == (
            before[rid]["epoch"], before[rid]["pod_id"], before[rid]["lease_holder"])
        assert (after["last_checkpoint"] or 0) >= (before[rid]["last_checkpoint"] or 0)
    recs = [stack.wait_phase(rid, ("finished", "failed")) for rid in ids]
    assert [r["phase"] for r in recs] == ["finished"] * 2, [r["message"] for r in recs]
    assert [r["epoch"] for r in recs] == [1, 1] and [r["restarts"] for r in recs] == [0, 0]
    wait_for(lambda: not fake_lium.fake.live_pods(), 20, "pods removed")
    assert len(fake_lium.fake.removed) == 2  # no duplicate pod was ever rented
    rents = [r for r in fake_lium.fake.requests if r["path"].endswith("/rent")]
    # one key per run: a rent refused because the other run took the node meanwhile is retried, same key
    assert len({r["idempotency_key"] for r in rents}) == 2
    stack.close()


def test_stale_worker_that_comes_back_stops_without_publishing(stack, fake_lium, reference):
    """Pod A freezes; its lease expires; its removal leaves it running (the platform lost the node);
    pod B takes over the run and its volume. When A thaws, its worker kills its trainer before it
    can write: the tracker never goes back and the final weights equal an uninterrupted run."""
    n = 100
    ref = reference(n)
    assert stack.run("run_id=stale", f"env.num_rollout={n}", "args.save_interval=1").returncode == 0
    rec = wait_for(lambda: (r := stack.rec("stale"))["phase"] == "running" and (r["last_checkpoint"] or 0) >= 2
                   and r, 120, "running with checkpoints")
    pod_a = rec["pod_id"]
    fake_lium.fake.set_faults(delete_leaves_running=1)
    fake_lium.fake.freeze_pod(pod_a)
    frozen_at = tracker(stack.volume_run_dir("stale"))
    wait_for(lambda: (r := stack.rec("stale"))["epoch"] == 2 and (r["last_checkpoint"] or 0) > (frozen_at or 0) + 3,
             120, "pod B training past A")
    rd = stack.volume_run_dir("stale")
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            t = tracker(rd)
            if t is not None:
                seen.append(t)
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    fake_lium.fake.thaw_pod(pod_a)
    proc_a = fake_lium.fake.lingering[0]

    def a_trains() -> bool:
        return any(b"trainstack" in Path(f"/proc/{p}/cmdline").read_bytes() for p in proc_a.pids()
                   if Path(f"/proc/{p}/cmdline").exists())

    wait_for(lambda: not a_trains(), 15, "pod A's worker and trainer gone")
    done = stack.wait_phase("stale", ("finished", "failed"))
    stop.set()
    watcher.join()
    assert done["phase"] == "finished", done["message"]
    assert all(b >= a for a, b in zip(seen, seen[1:])), "the tracker went back: the stale trainer published"
    ws = Path(fake_lium.fake.root) / "pods" / pod_a / "workspace" / "trainstack" / "stale" / "worker-e1.log"
    assert "without a checkpoint" in ws.read_text()
    assert same_weights(ref, rd / "checkpoints" / f"iter_{n - 1:07d}" / "model.pt")
    stack.close()


def test_cancel_stops_with_a_final_checkpoint_and_removes_the_pod(stack, fake_lium):
    assert stack.run("run_id=cancelme", "env.num_rollout=400", "args.save_interval=1000").returncode == 0
    wait_for(lambda: stack.rec("cancelme")["phase"] == "running", 120, "running")
    wait_for(lambda: "rollout 3/" in stack.admin.get("/v1/runs/cancelme/logs")["text"], 60, "training", every=0.5)
    assert tracker(stack.volume_run_dir("cancelme")) is None  # no periodic checkpoint yet
    res = stack.trainstack("cancel", "cancelme")
    assert res.returncode == 0, res.stderr
    done = stack.wait_phase("cancelme", ("cancelled",), timeout=60)
    ck = tracker(stack.volume_run_dir("cancelme"))
    assert ck is not None and done["last_checkpoint"] == ck  # the trainer checkpointed on SIGTERM
    assert "worker_stopped" in stack.events("cancelme")
    wait_for(lambda: not fake_lium.fake.live_pods(), 20, "pod removed")
    assert fake_lium.fake.running_processes() == []
    stack.close()


def test_spend_limit_pauses_the_run_and_removes_its_pod(stack, fake_lium):
    # the cheapest node costs $0.30/h: $0.0008 is about 10 s of pod time
    res = stack.run("run_id=budget", "env.num_rollout=400", "args.save_interval=1000",
                    "cluster.lium.spend_limit=0.0008")
    assert res.returncode == 0, res.stderr
    done = stack.wait_phase("budget", ("paused", "failed", "finished"), timeout=120)
    assert done["phase"] == "paused" and "spend limit" in done["message"]
    assert done["cost_usd"] >= 0.0008
    assert "spend_limit" in stack.events("budget")
    wait_for(lambda: not fake_lium.fake.live_pods(), 20, "pod removed")
    st = stack.trainstack("status", "budget", "--json")
    assert json.loads(st.stdout)[0]["state"] == "paused"
    stack.close()


def test_lium_doc_walkthrough(stack, fake_lium):
    """Every `python run.py` / `trainstack` line of docs/lium.md, in order, against the fake."""
    import re
    import shlex

    text = (ROOT / "docs" / "lium.md").read_text()
    lines = [ln.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S) for ln in block.splitlines()
             if ln.strip().startswith(("python ", "trainstack "))]
    assert len(lines) >= 6
    env = {**os.environ, **stack.env, "PYTHONPATH": str(ROOT)}
    for line in lines:
        argv = shlex.split(line)
        argv = ([sys.executable, str(ROOT / "run.py"), *argv[2:]] if argv[0] == "python"
                else [sys.executable, "-m", "trainstack", *argv[1:]])
        res = subprocess.run(argv, cwd=stack.tmp, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0 and "Traceback" not in res.stderr, f"{line}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
        if line.startswith("python run.py -m") and "lium-sweep" in line:
            ids = [r["run_id"] for r in json.loads((stack.tmp / "multirun/lium-sweep/sweep.json").read_text())["runs"]]
            for rid in ids:
                assert stack.wait_phase(rid, ("finished", "failed"))["phase"] == "finished"
        if "hydra/sweeper=optuna" in line:  # waited: four trials ended, each answered with its run's final reward
            check_optuna_on_lium(stack, res.stderr)
        if line.startswith("trainstack compare multirun/lium-optuna"):
            rows = re.findall(r"│ finished │\s+3 │\s+0\.\d+ │", res.stdout)  # status, rollouts, final reward
            assert len(rows) == 4 and "raw_" in res.stdout, res.stdout
        if line.startswith("trainstack status multirun"):
            assert res.stdout.count("finished") >= 2
        if line.startswith("trainstack cancel"):
            assert stack.wait_phase("lium-demo", ("cancelled",), timeout=90)["phase"] == "cancelled"
        if line.startswith("trainstack status lium-demo"):
            row = json.loads(res.stdout)[0]
            assert row["scheduler"] == "cancelled" and row["cost_usd"] is not None
    wait_for(lambda: not fake_lium.fake.live_pods(), 30, "no pod left")
    stack.close()


def check_optuna_on_lium(stack, stderr: str) -> None:
    """The documented Optuna sweep on the fake Lium: every trial waited for, its value the final reward the run
    logged on its pod, copied into the run dir here (what compare reads) after the pod is gone."""
    import yaml

    from trainstack.metrics import read_local

    sweep = stack.tmp / "multirun" / "lium-optuna"
    assert stderr.count("trainstack: waited for 2 runs: 2 finished") == 2, stderr[-3000:]
    assert stderr.count("sweep summary") == 2  # two batches of two trials
    runs = json.loads((sweep / "sweep.json").read_text())["runs"]
    assert len(runs) == 4 and json.loads((sweep / "sweep.json").read_text())["wait"] is True
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())["best_value"]
    finals = []
    for r in runs:
        assert stack.rec(r["run_id"])["phase"] == "finished"
        rewards = read_local(r["run_dir"], "jsonl").series["rollout/raw_reward"]
        assert [s for s, _ in rewards] == [0.0, 1.0, 2.0]  # every rollout's reward came back from the pod
        finals.append(rewards[-1][1])
    assert best == max(finals)


def pod_pids_running(fake, pod_id: str, needle: bytes) -> list[int]:
    proc = next(p.process for p in fake.live_pods() if p.id == pod_id)
    out = []
    for pid in proc.pids():
        try:
            if needle in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            pass
    return out


def test_commander_down_longer_than_the_deadline_stops_training_until_it_is_back(stack, fake_lium, reference):
    """The seed's worker crashed when the commander was down while its trainer kept going: here the
    trainer is stopped after the deadline (4 s < TTL 6 s), nothing trains while the commander is
    away, and when it is back the same lease continues and the run resumes to the same weights."""
    n = 160  # > 6 s of training past checkpoint 2: the trainer must still be going when it is stopped
    ref = reference(n)
    assert stack.run("run_id=down", f"env.num_rollout={n}", "args.save_interval=1").returncode == 0
    rec = wait_for(lambda: (r := stack.rec("down"))["phase"] == "running" and (r["last_checkpoint"] or 0) >= 2
                   and r, 120, "training")
    stack.cmd.kill9()
    time.sleep(9)  # > deadline (4 s) + the short stop grace (TTL - deadline = 2 s)
    assert pod_pids_running(fake_lium.fake, rec["pod_id"], b"trainstack.tiny.train") == []
    rd = stack.fake.volume_dir(rec["volume_id"]) / "trainstack" / "runs" / "down"
    stopped_at = tracker(rd)
    assert stopped_at is not None and stopped_at < n - 1  # stopped mid-run
    time.sleep(3)
    assert tracker(rd) == stopped_at  # no training without a lease
    stack.cmd.start()
    done = stack.wait_phase("down", ("finished", "failed"))
    assert done["phase"] == "finished" and done["epoch"] == 1 and done["pod_id"] == rec["pod_id"], done["message"]
    log = (fake_lium.fake.root / "pods" / rec["pod_id"] / "workspace" / "trainstack" / "down" / "worker-e1.log").read_text()
    assert ("commander unreachable" in log or "no renewal for longer than the lease TTL" in log), log
    assert "starting the trainer again" in log
    assert same_weights(ref, rd / "checkpoints" / f"iter_{n - 1:07d}" / "model.pt")
    stack.close()


def test_sigterm_to_the_worker_checkpoints_reports_preempted_and_the_run_moves_on(fake_lium, tmp_path):
    """The pod is going away (SIGTERM to the worker): the trainer checkpoints, the worker reports
    PREEMPTED and releases, a new pod resumes from that checkpoint. The commander's secrets reach
    the trainer through the exec environment and no file anywhere holds them."""
    secret = "hf_SECRET_value_1234567890"
    cmd_env = {**fake_lium.env, "HF_TOKEN": secret}
    s = Stack.__new__(Stack)
    s.fake, s.tmp = fake_lium.fake, tmp_path
    s.cmd = CommanderProc(tmp_path, cmd_env).start()
    s.env = {**fake_lium.env, "TRAINSTACK_COMMANDER_URL": s.cmd.url, "TRAINSTACK_COMMANDER_TOKEN": TOKEN}
    s.admin = s.cmd.client()
    try:
        assert s.run("run_id=preempt", "env.num_rollout=300", "args.save_interval=1000").returncode == 0
        s.wait_phase("preempt", ("running",), timeout=120)
        rec = s.rec("preempt")
        wait_for(lambda: "rollout 3/" in s.admin.get("/v1/runs/preempt/logs")["text"], 60, "training", every=0.5)
        trainer = pod_pids_running(fake_lium.fake, rec["pod_id"], b"trainstack.tiny.train")
        assert trainer and secret.encode() in Path(f"/proc/{trainer[0]}/environ").read_bytes()
        for pid in trainer:
            assert secret.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        [worker] = pod_pids_running(fake_lium.fake, rec["pod_id"], b"trainstack.launch.lium_worker")
        os.kill(worker, 15)
        rec2 = wait_for(lambda: (r := s.rec("preempt"))["epoch"] == 2 and r["phase"] == "running" and r, 90,
                        "the next pod")
        ev = s.events("preempt")
        assert "worker_preempted" in ev
        first_ck = rec2["last_checkpoint"]
        assert first_ck is not None and first_ck >= 2  # the preempted trainer's final checkpoint
        rd = s.volume_run_dir("preempt")

        def resumes() -> list:
            return [json.loads(ln)["from_rollout"] for ln in (rd / "events.jsonl").read_text().splitlines()
                    if '"resume"' in ln]

        assert wait_for(resumes, 30, "the new pod's resume") == [first_ck + 1]
        s.admin.post("/v1/runs/preempt/cancel")
        s.wait_phase("preempt", ("cancelled",), timeout=90)
        wait_for(lambda: not fake_lium.fake.live_pods(), 30, "pods removed")
    finally:
        s.cmd.stop()
    hits = []
    for base in (fake_lium.fake.root, tmp_path):
        for p in Path(base).rglob("*"):
            try:
                if p.is_file() and not p.is_symlink() and secret.encode() in p.read_bytes():
                    hits.append(str(p))
            except OSError:
                pass
    assert hits == [], f"the secret was written to {hits}"


def test_sweep_spend_limit_pauses_every_run_of_the_sweep(stack, fake_lium):
    sweep = stack.tmp / "sw-budget"
    res = stack.run("-m", "hydra/launcher=lium", "algo.lr=1e-3,2e-3", "env.num_rollout=400", "args.save_interval=1000",
                    "hydra.launcher.sweep_spend_limit=0.0012", f"hydra.sweep.dir={sweep}")
    assert res.returncode == 0, res.stderr
    ids = [r["run_id"] for r in json.loads((sweep / "sweep.json").read_text())["runs"]]
    recs = [stack.wait_phase(rid, ("paused", "failed", "finished"), timeout=120) for rid in ids]
    assert [r["phase"] for r in recs] == ["paused", "paused"]
    assert all("sweep spend limit" in r["message"] for r in recs)
    assert sum(r["cost_usd"] for r in recs) >= 0.0012
    wait_for(lambda: not fake_lium.fake.live_pods(), 20, "pods removed")
    stack.close()
