"""The fake Lium, driven by the real `lium.io` SDK (no mock of lium anywhere): what trainstack's
commander relies on (rent with an idempotency key, wait until ready, exec with env, upload,
detached processes, remove, volumes) and the faults it must survive."""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT
from lium_fixtures import skip_without_pods


def cheap_node(lium):
    """The cheapest RTX4090 node with a free GPU (a rented GPU is not rentable: the fake tracks them)."""
    free = [e for e in lium.ls(gpu_type="RTX4090") if e.available_gpu_count is None or e.available_gpu_count > 0]
    return min(free, key=lambda e: e.price_per_hour)


TS_IMAGE = "trainstack/trainstack-slime:test"  # the fake's pods of an image named `...trainstack...` have trainstack


def rent(lium, name: str, **kw):
    kw.setdefault("image", TS_IMAGE)
    return lium.up(executor_id=cheap_node(lium).id, name=name, wait=True, timeout=30, enable_backups=False, **kw)


def test_sdk_full_cycle_on_a_pod(fake_lium, tmp_path):
    with fake_lium.sdk() as lium:
        assert {e.gpu_type for e in lium.ls()} == {"H100", "RTX4090"}
        assert [e.gpu_count for e in lium.ls(gpu_type="H100")] == [8, 8]
        pod = rent(lium, "ts-cycle")
        assert pod.status == "RUNNING" and pod.ssh_cmd.startswith("ssh root@127.0.0.1 -p ")
        assert [p.id for p in lium.ps()] == [pod.id]
        out = lium.exec(pod, command='echo "$SECRET_THING"; ps -o args= -e', env={"SECRET_THING": "s3 cr$t 'q'"})
        assert out["exit_code"] == 0
        assert out["stdout"].splitlines()[0] == "s3 cr$t 'q'"
        assert "s3 cr" not in "".join(out["stdout"].splitlines()[1:])  # the value is not in any argv on the pod
        assert lium.exec(pod, command="exit 7")["exit_code"] == 7
        (tmp_path / "spec.json").write_text('{"a": 1}')
        lium.upload(pod, local=str(tmp_path / "spec.json"), remote="/workspace/runs/r1/")  # a trailing / makes the dir
        got = lium.exec(pod, command="cat /workspace/runs/r1/spec.json; echo; ls -A /tmp; python3 -c 'import trainstack'")
        # its own /tmp, holding only the image's dirs that live under the host's /tmp (a checkout cloned there)
        from trainstack_dev.fakes.lium_pods import _image_dirs_under

        kept = sorted({Path(d).relative_to("/tmp").parts[0] for d in _image_dirs_under("/tmp")})
        assert got["stdout"].split() == ['{"a":', '1}', *kept] and got["exit_code"] == 0  # trainstack in the image
        assert not (Path("/workspace") / "runs").exists()  # the pod's /workspace is its own
        job = lium.exec(pod, command="sleep 600", detach=True, log_path="/workspace/logs/sleep.log")
        assert job["pid"] > 0
        assert len(fake_lium.fake.running_processes()) >= 2  # sshd + the detached sleep
        lium.rm(pod)
        assert lium.ps() == []
    assert fake_lium.fake.running_processes() == []  # removing the pod killed the detached (setsid) job too


def test_rent_with_the_same_idempotency_key_is_one_pod(fake_lium):
    with fake_lium.sdk() as lium:
        a = rent(lium, "ts-idem", idempotency_key="run-1:epoch-1")
        b = lium.up(executor_id=cheap_node(lium).id, name="ts-idem", idempotency_key="run-1:epoch-1",
                    enable_backups=False)
        assert b["id"] == a.id and len(lium.ps()) == 1
        rents = [r for r in fake_lium.fake.requests if r["path"].endswith("/rent")]
        assert [r["idempotency_key"] for r in rents] == ["run-1:epoch-1"] * 2


def test_every_endpoint_needs_the_api_key(fake_lium):
    for path in ("/pods", "/executors", "/volumes", "/templates", "/_fake/state"):
        req = urllib.request.Request(fake_lium.url + path, headers={"X-API-KEY": "wrong"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        assert err.value.code == 401
    from lium import Config, Lium
    from lium.sdk.exceptions import LiumAuthError

    with pytest.raises(LiumAuthError):
        Lium(config=Config(api_key="wrong", base_url=fake_lium.url)).ps()


def test_volume_outlives_its_pod_and_is_attached_to_one_pod_at_a_time(fake_lium):
    from lium.sdk.exceptions import LiumError

    with fake_lium.sdk() as lium:
        vol = lium.volume_create("ts-run-1")
        a = rent(lium, "ts-a", volume_id=vol.id)
        assert lium.exec(a, command="mkdir -p /mnt/runs && echo 41 > /mnt/runs/tracker")["exit_code"] == 0
        with pytest.raises(LiumError, match="409"):
            lium.up(executor_id=cheap_node(lium).id, name="ts-b", volume_id=vol.id, enable_backups=False)
        lium.rm(a)
        b = rent(lium, "ts-b", volume_id=vol.id)
        assert lium.exec(b, command="cat /mnt/runs/tracker")["stdout"].strip() == "41"
        assert [v.name for v in lium.volumes()] == ["ts-run-1"]
        lium.rm(b)


def test_killed_pod_takes_every_process_with_it(fake_lium):
    with fake_lium.sdk() as lium:
        pod = rent(lium, "ts-kill")
        lium.exec(pod, command="(setsid sleep 600 & nohup sleep 601 &) >/dev/null 2>&1 </dev/null", timeout=10)
        lium.exec(pod, command="sleep 602", detach=True, log_path="/workspace/logs/x.log")
        assert len(fake_lium.fake.running_processes()) >= 4
        fake_lium.fake.kill_pod(pod.id, listed="failed")
        assert fake_lium.fake.running_processes() == []
        assert [p.status for p in lium.ps()] == ["FAILED"]
        lium.rm(pod)  # a failed pod still bills until removed
        assert lium.ps() == []


def test_freeze_and_thaw_stop_and_continue_every_process(fake_lium):
    with fake_lium.sdk() as lium:
        pod = rent(lium, "ts-freeze")
        lium.exec(pod, command="sh -c 'while :; do date +%s%N >> /workspace/ticks; sleep 0.05; done'", detach=True,
                  log_path="/workspace/logs/t.log")
        time.sleep(0.5)
        assert fake_lium.fake.freeze_pod(pod.id) >= 2
        ws = Path(fake_lium.fake.state()["pods"][0]["workspace"])
        n = len((ws / "ticks").read_text().split())
        time.sleep(0.6)
        assert len((ws / "ticks").read_text().split()) == n
        fake_lium.fake.thaw_pod(pod.id)
        time.sleep(0.5)
        assert len((ws / "ticks").read_text().split()) > n
        lium.rm(pod)
    assert fake_lium.fake.running_processes() == []


def test_never_ready_and_slow_pods(fake_lium):
    with fake_lium.sdk() as lium:
        fake_lium.fake.set_faults(never_ready=1)
        created = lium.up(executor_id=cheap_node(lium).id, name="ts-stuck", enable_backups=False)
        assert lium.wait_ready(created, timeout=3) is None
        assert [p.status for p in lium.ps()] == ["PENDING"]
        lium.rm(lium.ps()[0])
        fake_lium.fake.set_faults(ready_delay_s=2.0)
        t0 = time.monotonic()
        pod = rent(lium, "ts-slow")
        assert time.monotonic() - t0 >= 2.0 and pod.status == "RUNNING"
        lium.rm(pod)


def test_a_listing_glitch_omits_a_pod_from_the_next_listings_only(fake_lium):
    with fake_lium.sdk() as lium:
        pod = rent(lium, "ts-glitch")
        fake_lium.fake.set_faults(omit_from_listing={"ts-glitch": 2})
        assert lium.ps() == [] and lium.ps() == []  # two answers without it
        assert [p.id for p in lium.ps()] == [pod.id]  # then it is back: it never stopped
        assert lium.exec(pod, command="true")["exit_code"] == 0
        lium.rm(pod)


def test_a_rented_gpu_is_not_rentable_and_the_commander_rents_the_count_the_run_needs(fake_lium):
    """`available_gpu_count` as the service lists it: a pod of 5 GPUs on an 8-GPU node leaves 3; a rent
    for more than is free is refused; the commander's provider rents exactly `gpu_count` GPUs, on a node
    that has them free (the run's argv expects that many), at the per-GPU price."""
    from lium.sdk.exceptions import LiumError

    from trainstack.commander.provider import LiumProvider, PodRequest

    h100 = "6f0c5a7e-0d4f-4a53-9a55-8f0f8b2a0002"  # the cheaper 8xH100 node
    prov = LiumProvider()
    req = PodRequest(gpu_type="H100", gpu_count=5, volume=None)
    a = prov.rent(req, "ts-split-a", "key-a", None)
    with fake_lium.sdk() as lium:
        free = {e.id: e.available_gpu_count for e in lium.ls(gpu_type="H100")}
        assert free[h100] == 3 and sorted(free.values()) == [3, 8]
        with pytest.raises(LiumError, match="3 free GPUs"):
            lium.up(executor_id=h100, name="too-many", gpu_count=4, enable_backups=False)
    assert fake_lium.fake.pod_by_name("ts-split-a").gpu_count == 5 and a.price_per_hour == pytest.approx(5 * 1.95)
    b = prov.rent(req, "ts-split-b", "key-b", None)  # 3 free on the cheap node: the other node it is
    pod_b = fake_lium.fake.pod_by_name("ts-split-b")
    assert pod_b.executor["id"] != h100 and pod_b.gpu_count == 5
    rents = [r for r in fake_lium.fake.requests if r["path"].endswith("/rent")
             and r["body"]["pod_name"].startswith("ts-split")]
    assert [r["body"].get("gpu_count") for r in rents] == [5, 5]
    prov.remove(a.id)
    prov.remove(b.id)
    with fake_lium.sdk() as lium:
        assert sorted(e.available_gpu_count for e in lium.ls(gpu_type="H100")) == [8, 8]


def test_removal_that_leaves_the_pod_running(fake_lium):
    with fake_lium.sdk() as lium:
        pod = rent(lium, "ts-linger")
        fake_lium.fake.set_faults(delete_leaves_running=1)
        lium.rm(pod)
        assert lium.ps() == [] and fake_lium.fake.running_processes() != []  # the platform lost the node
    fake_lium.fake.close()
    assert fake_lium.fake.running_processes() == []


@pytest.mark.slow
def test_rent_answer_lost_after_create_is_one_pod_and_rate_limit_is_retried(fake_lium):
    """The SDK's own recovery against the fake: a 503 after the pod was made finds it by name
    (no second pod); a 429 before anything was made sends the rent once more."""
    with fake_lium.sdk() as lium:
        fake_lium.fake.set_faults(rent=[{"status": 503, "after_create": True}])
        got = lium.up(executor_id=cheap_node(lium).id, name="ts-lost", enable_backups=False, idempotency_key="k-lost")
        assert len(lium.ps()) == 1 and got["id"] == lium.ps()[0].id
        fake_lium.fake.set_faults(rent=[{"status": 429, "retry_after": 1}])
        got2 = lium.up(executor_id=cheap_node(lium).id, name="ts-429", enable_backups=False)
        assert sorted(p.name for p in lium.ps()) == ["ts-429", "ts-lost"] and got2["name"] == "ts-429"
        for p in lium.ps():
            lium.rm(p)


def test_lium_local_script_up_status_down(tmp_path):
    skip_without_pods()
    env = {**os.environ, "LIUM_LOCAL_ROOT": str(tmp_path / "ll")}
    script = str(ROOT / "scripts" / "lium-local.sh")
    up = subprocess.run([script, "up"], env=env, capture_output=True, text=True, timeout=60)
    try:
        assert up.returncode == 0, up.stderr
        exports = dict(line.removeprefix("export ").split("=", 1) for line in up.stdout.splitlines())
        assert set(exports) >= {"LIUM_BASE_URL", "LIUM_API_KEY", "LIUM_SSH_KEY_PATH"}
        again = subprocess.run([script, "up"], env=env, capture_output=True, text=True, timeout=30)
        assert again.stdout == up.stdout  # idempotent: the same fake
        lium = subprocess.run([str(ROOT / ".venv" / "bin" / "lium"), "ps", "--format", "json"], capture_output=True,
                              text=True, timeout=60, env={**env, **exports, "HOME": str(tmp_path / "home")})
        assert lium.returncode == 0 and json.loads(lium.stdout) == [], lium.stderr
        st = subprocess.run([script, "status"], env=env, capture_output=True, text=True, timeout=30)
        assert "0 pod(s)" in st.stdout
    finally:
        down = subprocess.run([script, "down"], env=env, capture_output=True, text=True, timeout=30)
    assert down.returncode == 0 and "stopped" in down.stderr
    assert not (tmp_path / "ll" / "fake.json").exists()


def test_two_local_fakes_and_their_commanders_at_once(tmp_path):
    """Two checkouts (or users) on one machine, each with its own fake Lium and the commander a launch starts:
    every port a free one, every state dir its own (it was port 8780, ~/.trainstack and /tmp/trainstack-lium-local
    for everyone: the second commander's token was refused and status lied); `down` stops the commander too (it
    polled the gone fake for minutes)."""
    import sys

    skip_without_pods()
    script = str(ROOT / "scripts" / "lium-local.sh")
    start = ("from trainstack.launch.lium_commander import LiumSettings, commander\n"
             "print(commander(LiumSettings()).url)")
    sides = {}
    try:
        for name in ("a", "b"):
            env = {**os.environ, "LIUM_LOCAL_ROOT": str(tmp_path / name), "PYTHONPATH": str(ROOT),
                   "TRAINSTACK_COMMANDER_TOKEN": f"token-of-{name}-0123456789abcdef"}
            env.pop("TRAINSTACK_COMMANDER_URL", None)
            up = subprocess.run([script, "up"], env=env, capture_output=True, text=True, timeout=60)
            assert up.returncode == 0, up.stderr
            env.update(line.removeprefix("export ").split("=", 1) for line in up.stdout.splitlines())
            assert env["TRAINSTACK_HOME"] == str(tmp_path / name / "commander")
            cmd = subprocess.run([sys.executable, "-c", start], env=env, capture_output=True, text=True, timeout=60)
            assert cmd.returncode == 0, cmd.stderr
            sides[name] = (env, cmd.stdout.strip())
        (env_a, url_a), (env_b, url_b) = sides["a"], sides["b"]
        assert env_a["LIUM_BASE_URL"] != env_b["LIUM_BASE_URL"] and url_a != url_b and ":8780" not in url_a + url_b
        again = subprocess.run([sys.executable, "-c", start], env=env_a, capture_output=True, text=True, timeout=60)
        assert again.stdout.strip() == url_a  # a second launch finds its state dir's commander
        from trainstack.commander.client import CommanderClient, CommanderError

        with pytest.raises(CommanderError):  # each answers its own token only
            CommanderClient(url_b, env_a["TRAINSTACK_COMMANDER_TOKEN"]).get("/v1/runs")
        st = subprocess.run([script, "status"], env=env_a, capture_output=True, text=True, timeout=30)
        assert f"commander at {url_a}" in st.stdout, st.stdout + st.stderr
        pid_a = json.loads((tmp_path / "a" / "commander" / "commander.json").read_text())["pid"]
        down = subprocess.run([script, "down"], env=env_a, capture_output=True, text=True, timeout=60)
        assert down.returncode == 0 and f"stopped pid {pid_a}" in down.stderr, down.stderr
        deadline = time.monotonic() + 20
        while Path(f"/proc/{pid_a}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not Path(f"/proc/{pid_a}").exists()
        assert CommanderClient(url_b, env_b["TRAINSTACK_COMMANDER_TOKEN"]).get("/v1/runs") is not None  # b: untouched
    finally:
        for env, _ in sides.values():
            subprocess.run([script, "down"], env=env, capture_output=True, text=True, timeout=60)


def test_an_image_rent_makes_a_one_time_template_deleted_with_its_pod(fake_lium):
    """`lium.up(image=...)` as lium.io 0.32 sends it: `POST /templates` (private, one-time, port 22), then the
    rent names that template. Before, the fake had no `POST /templates` and every `image=` rent failed."""
    with fake_lium.sdk() as lium:
        pod = rent(lium, "ts-image", image="me/trainstack-slime:0.1")
        made = [r for r in fake_lium.fake.requests if r["method"] == "POST" and r["path"] == "/templates"]
        assert len(made) == 1 and made[0]["body"]["one_time_template"] is True
        assert made[0]["body"]["docker_image"] == "me/trainstack-slime:0.1"
        tpl = next(t for t in fake_lium.fake.templates if t.get("one_time_template"))
        assert (tpl["docker_image"], tpl["docker_image_tag"]) == ("me/trainstack-slime", "0.1")
        assert fake_lium.fake.pod_by_name("ts-image").template_id == tpl["id"]
        lium.rm(pod)
        assert not any(t.get("one_time_template") for t in fake_lium.fake.templates)


def test_termination_hours_removes_the_pod_when_they_are_up(fake_lium):
    from lium.sdk.exceptions import LiumError

    fake_lium.fake.hour_s = 1.0  # an "hour" of this fake is a second
    with fake_lium.sdk() as lium:
        with pytest.raises(LiumError, match="termination_hours"):
            lium.up(executor_id=cheap_node(lium).id, name="ts-ttl-bad", termination_hours=721, enable_backups=False)
        lium.up(executor_id=cheap_node(lium).id, name="ts-ttl", termination_hours=2, enable_backups=False)
        [row] = lium.ps()
        assert row.removal_scheduled_at is not None
        t0 = time.monotonic()
        while lium.ps() and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        assert lium.ps() == [] and 1.5 <= time.monotonic() - t0 < 5
    gone = [r for r in fake_lium.fake.removed if r["name"] == "ts-ttl"]
    assert gone and gone[0]["reason"].startswith("scheduled removal")
    assert fake_lium.fake.running_processes() == []


def test_api_faults_on_every_route_are_ridden_out_by_the_commanders_provider(fake_lium):
    """503 on every route, then 429 with Retry-After: the provider's volume, rent, listing and removal all
    succeed with backoff, make one volume and one pod, and wait at least what Retry-After asked."""
    from trainstack.commander.provider import LiumProvider, PodRequest

    fake = fake_lium.fake
    prov = LiumProvider()
    fake.set_faults(api=[{"status": 503, "times": 3}])
    vol = prov.ensure_volume("trainstack-faults")
    assert len(fake.volumes) == 1 and vol in fake.volumes
    fake.set_faults(api=[{"status": 503, "times": 2, "method": "POST", "path": "rent$"}])
    pod = prov.rent(PodRequest(gpu_type="RTX4090", volume=None), "ts-faults", "key-faults", None)
    assert [p.id for p in fake.live_pods()] == [pod.id]
    fake.set_faults(api=[{"status": 429, "times": 3, "retry_after": 3, "method": "GET", "path": "^volumes$"}])
    t0 = time.time()
    assert prov.ensure_volume("trainstack-faults") == vol  # the SDK's 3 tries refused: we wait what Lium asked
    listed = [r for r in fake.requests if r["method"] == "GET" and r["path"] == "/volumes" and r["time"] >= t0]
    refused = [r for r in listed if r.get("injected") == 429]
    answered = [r for r in listed if not r.get("injected")]
    assert len(refused) == 3 and answered and answered[0]["time"] - refused[-1]["time"] >= 3.0  # Retry-After honoured
    # the listing (in the reconciler's tick) is not retried in place, and not asked again before Retry-After
    from lium.sdk.exceptions import LiumRateLimitError

    fake.set_faults(api=[{"status": 429, "times": 3, "retry_after": 2, "method": "GET", "path": "^pods$"}])
    with pytest.raises(LiumRateLimitError):
        prov.list_pods()
    sent = len(fake.requests)
    with pytest.raises(RuntimeError, match="Retry-After"):
        prov.list_pods()
    assert len(fake.requests) == sent  # nothing sent
    time.sleep(2.1)
    assert pod.id in prov.list_pods()
    fake.set_faults(api=[{"status": 502, "times": 2, "method": "DELETE"}])
    prov.remove(pod.id)
    prov.delete_volume(vol)
    assert fake.live_pods() == [] and fake.volumes == {} and fake.running_processes() == []
    assert fake.faults.api == []  # every injected fault was met


def test_with_backoff_honours_retry_after_and_gives_up_on_refusals():
    from lium.sdk.exceptions import LiumNotFoundError, LiumRateLimitError, LiumServerError

    from trainstack.commander.provider import with_backoff

    slept: list[float] = []
    errors = [LiumServerError("503"), LiumRateLimitError("slow down"), LiumServerError("502")]
    errors[1].retry_after = 7.0

    def flaky():
        if errors:
            raise errors.pop(0)
        return "ok"

    assert with_backoff(flaky, "test", budget_s=60, sleep=slept.append) == "ok"
    assert len(slept) == 3 and slept[1] >= 7.0 and all(s > 0 for s in slept)
    with pytest.raises(LiumNotFoundError):  # not transient: raised at once
        with_backoff(lambda: (_ for _ in ()).throw(LiumNotFoundError("gone")), "test", sleep=slept.append)
    assert len(slept) == 3
    with pytest.raises(LiumServerError):  # past the budget: the last failure is raised
        with_backoff(lambda: (_ for _ in ()).throw(LiumServerError("503")), "test", budget_s=0.0, sleep=slept.append)


def test_a_stock_template_pod_has_no_trainstack_and_the_provider_says_so(fake_lium):
    """What `template_id: null` rents: Lium's default PyTorch template, whose image has no trainstack."""
    from trainstack.commander.provider import LiumProvider

    prov = LiumProvider()
    with fake_lium.sdk() as lium:
        stock = lium.up(executor_id=cheap_node(lium).id, name="ts-stock", wait=True, timeout=30, enable_backups=False)
        ours = rent(lium, "ts-ours")
        assert lium.exec(stock, command="python3 -c 'import trainstack'")["exit_code"] != 0
        why = prov.image_problem(stock.id, "python3")
        assert why is not None and "has no trainstack" in why
        assert prov.image_problem(ours.id, "python3") is None
        assert prov.image_problem(ours.id, "/bin/false") is None  # the image's `trainstack` command counts too
        lium.rm(stock)
        lium.rm(ours)


def test_sold_out_lists_no_free_gpu_and_the_provider_finds_no_node(fake_lium):
    from trainstack.commander.provider import LiumProvider, NoNode, PodRequest

    fake_lium.fake.set_faults(sold_out_until=time.time() + 30)
    with fake_lium.sdk() as lium:
        assert {e.available_gpu_count for e in lium.ls()} == {0}
    with pytest.raises(NoNode, match="no node with 1x"):
        LiumProvider().rent(PodRequest(volume=None), "ts-sold-out", "key-sold-out", None)
    fake_lium.fake.set_faults(sold_out_until=0.0)
    with fake_lium.sdk() as lium:
        assert 0 not in {e.available_gpu_count for e in lium.ls()}
    assert fake_lium.fake.live_pods() == []
