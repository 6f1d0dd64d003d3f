"""The commander over real HTTP (uvicorn in a subprocess) with the fake Lium and the real SDK:
auth on every endpoint, per-run leases fenced by epoch, state that survives SIGKILL, and the
reconciler (rent with idempotency keys, replace, restart limit, cancel) leaving no pod behind."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from commander_helpers import TOKEN, CommanderProc, wait_for, worker_token
from conftest import ROOT, files_under, run_py
from trainstack.commander.client import CommanderClient, CommanderError

# `python: /bin/false`: the worker command exits at once, so these tests play the worker themselves
CPU_POD = {"gpu_type": "RTX4090", "gpu_count": 1, "volume": "auto", "python": "/bin/false",
           "image": "trainstack/trainstack-slime:test"}


def spec_of(run_id: str) -> dict:
    return {"run_id": run_id, "spec_version": 1, "note": "not executed in these tests"}


def register(c: CommanderClient, run_id: str, **kw) -> dict:
    return c.post("/v1/runs", {"run_id": run_id, "spec": spec_of(run_id), "settings": CPU_POD, **kw})


def run_of(c: CommanderClient, run_id: str) -> dict:
    return c.get(f"/v1/runs/{run_id}")


def test_every_endpoint_needs_a_token_and_worker_tokens_are_per_run(tmp_path):
    cmd = CommanderProc(tmp_path, {"LIUM_API_KEY": "unused", "LIUM_BASE_URL": "http://127.0.0.1:9"},
                        **{"--probe": "60"}).start()
    try:
        admin = cmd.client()
        register(admin, "run-a")
        paths = [("GET", "/v1/health"), ("GET", "/v1/runs"), ("GET", "/v1/runs/run-a"), ("GET", "/v1/runs/run-a/events"),
                 ("GET", "/v1/leases"), ("GET", "/v1/events"), ("POST", "/v1/runs"), ("POST", "/v1/runs/run-a/cancel"),
                 ("POST", "/v1/runs/run-a/lease/force-release"), ("GET", "/v1/runs/run-a/logs"),
                 ("GET", "/v1/runs/run-a/metrics"), ("POST", "/v1/runs/run-a/lease/acquire"), ("POST", "/v1/runs/run-a/lease/renew"),
                 ("POST", "/v1/runs/run-a/lease/report")]
        for method, path in paths:
            for client, code in ((CommanderClient(cmd.url, ""), 401), (cmd.client("wrong-token-xxxxxxxx"), 403),
                                 (cmd.client(worker_token("run-b")), 403)):
                with pytest.raises(CommanderError) as err:
                    client.call(method, path, {} if method == "POST" else None)
                assert err.value.status == code, (method, path, client)
        worker_a = cmd.client(worker_token("run-a"))
        for method, path in paths[:11]:  # a run's worker token works only on that run's lease endpoints
            with pytest.raises(CommanderError) as err:
                worker_a.call(method, path, {} if method == "POST" else None)
            assert err.value.status == 403
        with pytest.raises(CommanderError) as err:
            worker_a.post("/v1/runs/run-a/lease/acquire", {"epoch": 99, "holder": "w"})
        assert err.value.status == 409  # authenticated, then fenced
    finally:
        cmd.stop()
    assert TOKEN not in cmd.log.read_text()


@pytest.mark.slow
def test_lease_fencing_and_no_lost_state_across_sigkill(fake_lium, tmp_path):
    cmd = CommanderProc(tmp_path, fake_lium.env).start()
    try:
        admin = cmd.client()
        register(admin, "r1")
        rec = wait_for(lambda: (r := run_of(admin, "r1"))["phase"] == "starting" and r, 60, "a pod and a started worker")
        epoch, pod = rec["epoch"], rec["pod_id"]
        assert epoch == 1 and [p.id for p in fake_lium.fake.live_pods()] == [pod]
        vol = fake_lium.fake.volume_dir(rec["volume_id"])
        assert (vol / "trainstack" / "runs" / "r1" / "spec.json").is_file()  # uploaded to the run dir on the volume
        w = cmd.client(worker_token("r1"))
        with pytest.raises(CommanderError, match="superseded"):
            w.post("/v1/runs/r1/lease/acquire", {"epoch": 0, "holder": "old"})
        got = w.post("/v1/runs/r1/lease/acquire", {"epoch": 1, "holder": "w1", "pod_id": pod})
        assert got["ttl_s"] == 6 and got["deadline_s"] < got["ttl_s"]
        with pytest.raises(CommanderError, match="held by w1"):
            w.post("/v1/runs/r1/lease/acquire", {"epoch": 1, "holder": "intruder"})
        w.post("/v1/runs/r1/lease/renew", {"epoch": 1, "holder": "w1", "progress": {"last_checkpoint": 3}})
        cmd.kill9()  # acknowledged: lease w1@1, checkpoint 3
        cmd.start()
        rec = run_of(admin, "r1")
        assert (rec["epoch"], rec["lease_holder"], rec["last_checkpoint"], rec["pod_id"]) == (1, "w1", 3, pod)
        assert w.post("/v1/runs/r1/lease/renew", {"epoch": 1, "holder": "w1"})["desired"] == "running"
        events = [e["event"] for e in admin.get("/v1/runs/r1/events")]
        assert events[:3] == ["registered", "provisioning", "volume"] and "checkpoint" in events
        with pytest.raises(CommanderError) as err:
            w.post("/v1/runs/r1/lease/force-release")
        assert err.value.status == 403  # force is admin-only
        ck = vol / "trainstack" / "runs" / "r1" / "checkpoints"
        ck.mkdir(parents=True)
        (ck / "latest_checkpointed_iteration.txt").write_text("3")  # what w1 reported is on the volume
        admin.post("/v1/runs/r1/lease/force-release")
        with pytest.raises(CommanderError, match="not the lease holder|superseded"):
            w.post("/v1/runs/r1/lease/renew", {"epoch": 1, "holder": "w1"})
        rec = wait_for(lambda: (r := run_of(admin, "r1"))["epoch"] == 2 and r["phase"] == "starting" and r, 60,
                       "a replacement pod")
        assert rec["pod_id"] != pod and rec["restarts"] == 1
        assert [p.id for p in fake_lium.fake.live_pods()] == [rec["pod_id"]]  # the old pod was removed first
        with pytest.raises(CommanderError, match="superseded"):
            w.post("/v1/runs/r1/lease/acquire", {"epoch": 1, "holder": "w1"})
        admin.post("/v1/runs/r1/cancel")
        wait_for(lambda: run_of(admin, "r1")["phase"] == "cancelled", 30, "cancelled")
        wait_for(lambda: not fake_lium.fake.live_pods(), 10, "no pod left")
    finally:
        cmd.stop()
    assert fake_lium.fake.running_processes() == []


@pytest.mark.slow
def test_a_worker_that_never_takes_its_lease_is_replaced_up_to_the_restart_limit(fake_lium, tmp_path):
    cmd = CommanderProc(tmp_path, fake_lium.env, **{"--start-timeout": "1.5"}).start()
    try:
        admin = cmd.client()
        register(admin, "never", restart_limit=2)
        rec = wait_for(lambda: (r := run_of(admin, "never"))["phase"] == "failed" and r, 90, "failed")
        assert rec["restarts"] == 2 and rec["epoch"] == 3 and "restart_limit=2" in rec["message"]
        assert len(rec["pods"]) == 3 and all(p["removed"] for p in rec["pods"])
        assert not fake_lium.fake.live_pods()
        rents = [r for r in fake_lium.fake.requests if r["path"].endswith("/rent")]
        assert len({r["idempotency_key"] for r in rents}) == 3 == len(rents)  # one key per (run, epoch)
        assert [r["body"]["pod_name"].rsplit("-", 1)[1] for r in rents] == ["e1", "e2", "e3"]
        assert all(r["body"]["volume_id"] == rec["volume_id"] for r in rents)  # every pod mounts the run's volume
    finally:
        cmd.stop()
    assert fake_lium.fake.running_processes() == []


@pytest.mark.slow
def test_commander_killed_while_renting_makes_no_second_pod(fake_lium, tmp_path):
    """The rent's answer is lost (503 after the pod was made) and the commander is SIGKILLed before
    it learns the pod id: the restarted commander rents again with the same (run, epoch) key and
    gets the same pod back."""
    fake_lium.fake.set_faults(rent=[{"status": 503, "after_create": True}])
    cmd = CommanderProc(tmp_path, fake_lium.env).start()
    try:
        admin = cmd.client()
        register(admin, "once")
        wait_for(lambda: fake_lium.fake.live_pods(), 30, "the rent", every=0.05)
        cmd.kill9()  # the SDK is still looking for the pod by name: nothing recorded yet
        assert run_of_db(cmd, "once")["pod_id"] is None
        first = [p.id for p in fake_lium.fake.live_pods()]
        cmd.start()
        rec = wait_for(lambda: (r := run_of(admin, "once"))["phase"] == "starting" and r, 60, "started")
        assert [p.id for p in fake_lium.fake.live_pods()] == first == [rec["pod_id"]]
        assert rec["epoch"] == 1 and rec["restarts"] == 0
        rents = [r for r in fake_lium.fake.requests if r["path"].endswith("/rent")]
        assert len(rents) == 2 and len({r["idempotency_key"] for r in rents}) == 1
        admin.post("/v1/runs/once/cancel")
        wait_for(lambda: not fake_lium.fake.live_pods(), 30, "no pod left")
    finally:
        cmd.stop()


@pytest.mark.slow
def test_a_pod_missing_from_listings_is_kept_while_its_worker_renews(fake_lium, tmp_path):
    """The Lium API omits the run's pod from several `GET /pods` answers in a row while its worker renews
    every second: the pod is neither removed nor replaced, and no restart is counted."""
    import time

    cmd = CommanderProc(tmp_path, fake_lium.env).start()
    try:
        admin = cmd.client()
        register(admin, "glitch")
        rec = wait_for(lambda: (r := run_of(admin, "glitch"))["phase"] == "starting" and r, 60, "a started worker")
        pod = rec["pod_id"]
        w = cmd.client(worker_token("glitch"))
        w.post("/v1/runs/glitch/lease/acquire", {"epoch": 1, "holder": "w1", "pod_id": pod})
        fake_lium.fake.set_faults(omit_from_listing={pod: 4})
        end = time.time() + 8  # the commander lists every 0.5 s: all 4 glitches pass, then some good answers
        while time.time() < end:
            w.post("/v1/runs/glitch/lease/renew", {"epoch": 1, "holder": "w1"})
            time.sleep(1)
        assert "omit_from_listing" not in fake_lium.fake.state()["faults"] or \
            not fake_lium.fake.state()["faults"]["omit_from_listing"]  # the glitches were seen
        rec = run_of(admin, "glitch")
        assert (rec["phase"], rec["pod_id"], rec["epoch"], rec["restarts"]) == ("running", pod, 1, 0)
        assert [p.id for p in fake_lium.fake.live_pods()] == [pod]
        assert "pod_lost" not in [e["event"] for e in admin.get("/v1/runs/glitch/events")]
        admin.post("/v1/runs/glitch/cancel")
        wait_for(lambda: not fake_lium.fake.live_pods(), 30, "no pod left")
    finally:
        cmd.stop()


def run_of_db(cmd: CommanderProc, run_id: str) -> dict:
    from trainstack.commander.store import Store

    store = Store(cmd.db)
    try:
        rec = store.run(run_id)
        assert rec is not None
        return rec.public()
    finally:
        store.close()


def test_lium_launch_refuses_bad_pod_settings_and_a_missing_token_writing_nothing(tmp_path):
    env = {"TRAINSTACK_COMMANDER_TOKEN": "", "TRAINSTACK_COMMANDER_URL": "http://127.0.0.1:9"}
    common = ["cluster=lium_cpu", f"paths.runs_root={tmp_path}/runs", "env.num_rollout=2",
              "cluster.lium.pod.image=me/trainstack-slime:1"]
    bad = run_py(*common, "cluster.lium.pod.gpu_typo=H100", cwd=tmp_path, env={**env, "TRAINSTACK_COMMANDER_TOKEN": TOKEN})
    assert bad.returncode == 2 and "cluster.lium.pod.gpu_typo: not a Lium pod setting" in bad.stderr, bad.stderr
    nodes = run_py(*common, "cluster.num_nodes=2", cwd=tmp_path, env={**env, "TRAINSTACK_COMMANDER_TOKEN": TOKEN})
    assert nodes.returncode == 2 and "cluster.num_nodes: a Lium run is one pod" in nodes.stderr, nodes.stderr
    no_token = run_py(*common, cwd=tmp_path, env=env)
    assert no_token.returncode == 2 and "TRAINSTACK_COMMANDER_TOKEN" in no_token.stderr, no_token.stderr
    assert "openssl rand" in no_token.stderr and "Traceback" not in no_token.stderr + bad.stderr
    assert not (tmp_path / "runs").exists()


def test_a_lium_launch_without_a_trainstack_template_or_image_is_refused_registering_nothing(tmp_path):
    """Both presets leave template_id and image null: before, the launch registered the run and the commander
    rented Lium's stock PyTorch image, a pod that bills and cannot start the worker."""
    calls: list[str] = []
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    class Commander(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            calls.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        do_POST = do_GET  # noqa: N815

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Commander)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {"TRAINSTACK_COMMANDER_TOKEN": TOKEN, "TRAINSTACK_COMMANDER_URL": f"http://127.0.0.1:{server.server_address[1]}"}
    try:
        for preset in ("lium_cpu", "lium_8xh100"):
            extra = ["experiment=qwen3-4B-grpo-dapo"] if preset == "lium_8xh100" else []
            res = run_py(f"cluster={preset}", f"paths.runs_root={tmp_path}/runs", "env.num_rollout=2", *extra,
                         cwd=tmp_path, env=env)
            assert res.returncode == 2, res.stderr
            assert "cluster.lium.pod.image: neither cluster.lium.pod.template_id nor cluster.lium.pod.image" in res.stderr
            assert "docker/Dockerfile" in res.stderr and "Traceback" not in res.stderr
        sweep = run_py("-m", "hydra/launcher=lium", "cluster=lium_cpu", "algo.lr=1e-3,2e-3", f"paths.runs_root={tmp_path}/runs",
                       f"hydra.sweep.dir={tmp_path}/sw", cwd=tmp_path, env=env)
        assert sweep.returncode == 2 and "cluster.lium.pod.image" in sweep.stderr, sweep.stderr
    finally:
        server.shutdown()
    assert calls == [] and files_under(tmp_path / "runs") == []  # nothing registered, nothing written


def test_worker_progress_reports_the_run_dirs_traces_and_the_hub_commit(tmp_path):
    """The commander shows what the pod's run dir holds: rollouts from metrics.jsonl (deduplicated), the
    target from the spec, and the Hub commit of the newest pushed checkpoint from status.json's hub block;
    a changed metrics file is re-read."""
    import json

    from trainstack.run.rundir import RunDir
    from trainstack.launch.lium_worker import progress

    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    rd.update_status(state="running", hub={"repo_id": "me/run", "last_pushed": 3, "commit": "c0ffee" * 6, "pending": None})
    (rd.path / "spec.json").write_text(json.dumps({"args": {"num_rollout": 10}}))
    lines = [{"step_key": "rollout/step", "step": s, "metrics": {"rollout/raw_reward": r}}
             for s, r in ((0, 0.1), (1, 0.2), (1, 0.25))]  # rollout 1 redone after a resume
    rd.metrics_file.write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = progress(rd.path)
    assert (got["rollouts"], got["num_rollout"], got["reward"]) == (2, 10, 0.25)
    assert (got["hub_commit"], got["hub_pushed"]) == ("c0ffee" * 6, 3)
    with open(rd.metrics_file, "a") as f:
        f.write(json.dumps({"step_key": "rollout/step", "step": 2, "metrics": {"rollout/raw_reward": 0.5}}) + "\n")
    assert (progress(rd.path)["rollouts"], progress(rd.path)["reward"]) == (3, 0.5)


def test_lium_sweep_refuses_points_sharing_a_run_id_and_invalid_points_registering_nothing(tmp_path):
    """Every point is checked before anything is registered: two points that would be one run (one
    volume, one lease) and an invalid point are refused, naming the point and the key; no run dir, no
    sweep dir, and no commander is asked (its URL is a closed port)."""
    env = {"TRAINSTACK_COMMANDER_TOKEN": TOKEN, "TRAINSTACK_COMMANDER_URL": "http://127.0.0.1:9"}
    common = ["-m", "hydra/launcher=lium", "cluster=lium_cpu", "cluster.lium.pod.image=me/trainstack-slime:1",
              f"paths.runs_root={tmp_path}/runs", "hydra.sweep.dir=sw"]
    shared = run_py(*common, "env.num_rollout=3,4", cwd=tmp_path, env=env)
    assert shared.returncode == 2 and "2 points would be the same run" in shared.stderr, shared.stderr
    assert "env.num_rollout" in shared.stderr
    invalid = run_py(*common, "model.hidden_size=64,65", cwd=tmp_path, env=env)
    assert invalid.returncode == 2 and "point 1 [" in invalid.stderr, invalid.stderr
    assert "model.hidden_size=65]: model.hidden_size: 65 is not divisible" in invalid.stderr
    assert "Traceback" not in shared.stderr + invalid.stderr
    assert files_under(tmp_path) == []


NO_LIUM = {"LIUM_API_KEY": "unused", "LIUM_BASE_URL": "http://127.0.0.1:9"}  # no pod is ever rented


def test_a_launch_started_commander_exits_once_its_last_run_has_ended_and_commander_stop_stops_one(tmp_path):
    """Before, the commander a launch started on the submit host ran forever. Now it exits `--exit-when-idle`
    seconds after no run is active; `trainstack commander stop` stops the one a launch started."""
    cmd = CommanderProc(tmp_path, NO_LIUM, **{"--exit-when-idle": "1.5"}).start()
    try:
        admin = cmd.client()
        register(admin, "idle-a")
        time.sleep(3)
        assert cmd.proc.poll() is None  # a run is active (waiting for a pod): it stays
        admin.post("/v1/runs/idle-a/cancel")
        t0 = time.monotonic()
        wait_for(lambda: cmd.proc.poll() is not None, 20, "the idle commander to exit")
        assert cmd.proc.returncode == 0 and time.monotonic() - t0 < 10
        assert "no active run for 2 s; exiting" in cmd.log.read_text()
    finally:
        cmd.stop()
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "b").mkdir()
    other = CommanderProc(tmp_path / "b", NO_LIUM).start()
    try:
        (home / "commander.pid").write_text(str(other.proc.pid))
        env = {**os.environ, "TRAINSTACK_HOME": str(home), "PYTHONPATH": str(ROOT)}
        res = subprocess.run([sys.executable, "-m", "trainstack", "commander", "stop"], env=env, capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 0 and f"stopped pid {other.proc.pid}" in res.stderr, res.stderr
        wait_for(lambda: other.proc.poll() is not None, 20, "the commander to stop")
        again = subprocess.run([sys.executable, "-m", "trainstack", "commander", "stop"], env=env, capture_output=True,
                               text=True, timeout=60)
        assert again.returncode == 1 and "none started here is running" in again.stderr
    finally:
        other.stop()


def test_trainstack_resume_with_a_new_spend_limit_from_the_cli(tmp_path):
    """`trainstack resume RUN --spend-limit N` for a run its spend limit paused: the same limit is refused
    (exit 1, naming the flag), a higher one resumes it and it is not paused again."""
    cmd = CommanderProc(tmp_path, NO_LIUM, **{"--backoff": "5", "--backoff-max": "5"}).start()
    env = {"TRAINSTACK_COMMANDER_TOKEN": TOKEN, "TRAINSTACK_COMMANDER_URL": cmd.url}
    try:
        res = run_py("cluster=lium_cpu", "cluster.lium.pod.image=me/trainstack-slime:1", "run_id=budget",
                     "cluster.lium.spend_limit=0.5", "cluster.lium.restart_limit=1000", f"paths.runs_root={tmp_path}/runs",
                     "env.num_rollout=2", cwd=tmp_path, env=env)
        assert res.returncode == 0, res.stderr
        db = sqlite3.connect(cmd.db, timeout=30)  # a pod that billed $0.60 (price $1/h for 36 min)
        now = time.time()
        db.execute("INSERT INTO pods(pod_id, run_id, epoch, name, price_per_hour, rented, removed) "
                   "VALUES ('p0','budget',1,'ts-budget',1.0,?,?)", (now - 0.6 * 3600, now))
        db.commit()
        db.close()
        admin = cmd.client()
        wait_for(lambda: admin.get("/v1/runs/budget")["phase"] == "paused", 30, "paused at the spend limit")

        def trainstack(*argv: str):  # from another directory, no --runs-root: the commander knows the run
            return subprocess.run([sys.executable, "-m", "trainstack", *argv], cwd=tmp_path / "elsewhere",
                                  capture_output=True, text=True, timeout=60,
                                  env={**os.environ, **env, "PYTHONPATH": str(ROOT)})

        def resume(*flags: str):
            return trainstack("resume", "budget", *flags)

        (tmp_path / "elsewhere").mkdir()
        st = trainstack("status", "budget", "--json")
        assert st.returncode == 0, st.stderr
        import json

        [row] = json.loads(st.stdout)
        assert row["run_id"] == "budget" and row["state"] == "paused" and row["cost_usd"] >= 0.5

        same = resume()
        assert same.returncode == 1 and "--spend-limit" in same.stderr and "paused again at once" in same.stderr
        ok = resume("--spend-limit", "10")
        assert ok.returncode == 0 and "spend limit $10.00" in ok.stderr, ok.stderr
        time.sleep(2)  # several reconciler ticks
        rec = admin.get("/v1/runs/budget")
        assert rec["desired"] == "running" and rec["phase"] != "paused" and rec["spend_limit"] == 10.0
        events = [e["event"] for e in admin.get("/v1/runs/budget/events")]
        assert events.count("spend_limit") == 1 and "spend_limit_set" in events
        logs = trainstack("logs", "budget")
        assert logs.returncode == 0 and "Traceback" not in logs.stderr, logs.stderr
        gone = trainstack("cancel", "budget", "--purge")
        assert gone.returncode == 0 and "and delete its volume" in gone.stderr, gone.stderr
        wait_for(lambda: admin.get("/v1/runs/budget")["phase"] == "cancelled", 30, "cancelled")
        assert "purge_requested" in [e["event"] for e in admin.get("/v1/runs/budget/events")]
    finally:
        cmd.stop()


def test_the_commander_a_launch_starts_is_told_to_exit_when_idle(tmp_path, monkeypatch):
    import subprocess

    from trainstack.launch import lium_commander as lium

    started: list[list[str]] = []

    class Proc:
        pid = 4242

    monkeypatch.setenv("TRAINSTACK_HOME", str(tmp_path))
    monkeypatch.setattr(subprocess, "Popen", lambda argv, **kw: started.append(argv) or Proc())
    lium.start_local_commander(8781, None)
    [argv] = started
    assert argv[argv.index("--exit-when-idle") + 1] == str(lium.LOCAL_IDLE_EXIT_S)
    assert (tmp_path / "commander.pid").read_text() == "4242"
    assert json.loads((tmp_path / "commander.json").read_text()) == {"url": "http://127.0.0.1:8781", "pid": 4242,
                                                                     "port": 8781}
