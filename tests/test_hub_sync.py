"""Hub sync against the fake Hub with the real huggingface_hub client: the fake speaks the client's
protocol; a push lays out a checkpoint as documented and the pointer only ever names a complete one,
also when uploads are cut at random points; selection, newest-wins, backoff, fencing, retention,
restore checks, and no token anywhere."""
from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest

from hubtools import events, make_spec, pointer_checker, write_checkpoint
from trainstack.fencing.lease import Lease
from trainstack.run.rundir import RunDir

REPO = "team/ckpts"


def client():
    from trainstack.hub.client import HubClient

    return HubClient(REPO)


# -------------------------------------------------------------------------------------------------
# the fake speaks the real client's protocol
# -------------------------------------------------------------------------------------------------
def test_fake_hub_serves_what_the_real_client_calls(fake_hub, tmp_path):
    from huggingface_hub import CommitOperationAdd, HfApi, snapshot_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError

    api = HfApi(endpoint=fake_hub.url)
    api.create_repo(REPO, private=True, exist_ok=True)
    api.create_repo(REPO, private=True, exist_ok=True)  # 409 -> fine with exist_ok
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(b"\0" * 300)
    (src / "sub" / ".metadata").write_text("m")
    first = api.upload_folder(repo_id=REPO, folder_path=src, path_in_repo="run", commit_message="files")
    second = api.create_commit(REPO, [CommitOperationAdd("run/p.json", b"{}")], commit_message="p",
                               parent_commit=first.oid)
    with pytest.raises(HfHubHTTPError) as stale:  # main moved: a parent_commit check refuses
        api.create_commit(REPO, [CommitOperationAdd("run/p.json", b"[]")], commit_message="q", parent_commit=first.oid)
    assert stale.value.response.status_code == 412
    assert api.repo_info(REPO).sha == api.repo_info(REPO, revision="main").sha == second.oid
    tree = {e.path: getattr(e, "size", None) for e in api.list_repo_tree(REPO, path_in_repo="run", recursive=True)}
    assert tree == {"run/a.bin": 300, "run/sub": None, "run/sub/.metadata": 1, "run/p.json": 2}
    assert [b.target_commit for b in api.list_repo_refs(REPO).branches] == [second.oid]
    out = snapshot_download(REPO, revision=first.oid, local_dir=tmp_path / "snap", endpoint=fake_hub.url)
    assert (Path(out) / "run/sub/.metadata").read_text() == "m" and not (Path(out) / "run/p.json").exists()
    with pytest.raises(EntryNotFoundError):
        api.hf_hub_download(REPO, "run/none", local_dir=tmp_path / "x")
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=fake_hub.url, token=False).repo_info(REPO)  # private: no token, no repo
    def route(path: str) -> str:
        parts = path.split("/")
        return (parts[5] if len(parts) > 5 else "info") if path.startswith("/api/models/") else parts[3]

    seen = {(r["method"], route(r["path"])) for r in fake_hub.requests if r["path"].count("/") >= 3}
    assert {("POST", "preupload"), ("POST", "commit"), ("GET", "tree"), ("GET", "refs"), ("GET", "revision"),
            ("HEAD", "resolve"), ("GET", "resolve")} <= seen
    assert fake_hub.token not in Path(fake_hub.log_path).read_text()


def test_injected_faults_are_survived_by_a_push(fake_hub, tmp_path):
    """5xx bursts, a 429 with Retry-After, slow answers, a connection dropped in a commit body and a lost
    commit response: each push still ends with a pointer naming the checkpoint."""
    from trainstack.hub.push import PushJob, push_checkpoint

    save = tmp_path / "ck"
    c = client()
    plans = [("status", "", {"status": 503, "count": 3}), ("status", "/preupload/", {"status": 429, "retry_after": 1}),
             ("delay", "", {"delay_s": 0.3, "count": 4}), ("drop_mid_body", "/commit/", {}),
             ("lose_response", "/commit/", {})]
    for n, (kind, match, kw) in enumerate(plans):
        write_checkpoint(save, n)
        fault = fake_hub.inject(kind, match, **kw)
        t0 = time.monotonic()
        for attempt in range(6):  # what the sync worker does: retry the whole push
            try:
                res = push_checkpoint(c, PushJob("r", n, str(save), 1, {}), lambda: True)
                break
            except Exception:  # noqa: BLE001
                time.sleep(0.2)
        else:
            pytest.fail(f"{kind}: never pushed")
        assert fault.fired >= 1, kind
        assert res.commit and json.loads(fake_hub.files(REPO)["r/latest.json"])["iteration"] == n
        if kind == "status" and kw.get("retry_after"):
            assert time.monotonic() - t0 >= 1.0  # the client honoured Retry-After


# -------------------------------------------------------------------------------------------------
# one push
# -------------------------------------------------------------------------------------------------
def test_push_lays_out_the_checkpoint_and_commits_the_pointer_last(fake_hub, tmp_path):
    from trainstack.hub.push import PushJob, push_checkpoint
    from trainstack.hub.restore import install

    save = tmp_path / "ck"
    written = write_checkpoint(save, 4)
    hf = tmp_path / "hf" / "iter_4"
    hf.mkdir(parents=True)
    (hf / "pytorch_model.bin").write_bytes(b"w" * 99)
    (hf / "config.json").write_text("{}")
    rollouts = tmp_path / "rollout_data"
    rollouts.mkdir()
    for i in (3, 4, 5):
        (rollouts / f"rollout_{i}.pt").write_bytes(b"r" * i)
    pushed: dict[str, int] = {}
    job = PushJob("r", 4, str(save), 7, {"lr": 0.001}, spec_json=b"{}", hf_template=str(tmp_path / "hf/iter_{rollout_id}"),
                  rollout_template=str(rollouts / "rollout_{rollout_id}.pt"), host="h")
    res = push_checkpoint(client(), job, lambda: True, pushed)
    files = fake_hub.files(REPO)
    assert {f"r/{rel}" for rel in written} | {"r/hf/iter_0000004/pytorch_model.bin", "r/hf/iter_0000004/config.json",
                                              "r/rollout_data/rollout_3.pt", "r/rollout_data/rollout_4.pt",
                                              "r/manifests/iter_0000004.json", "r/spec.json", "r/latest.json",
                                              ".gitattributes"} == set(files)  # rollout 5 is newer than iter 4
    history = fake_hub.repo(REPO).history()
    assert history[-1].sha == res.commit and "r/latest.json" not in history[-2].files  # the pointer came last
    rec = json.loads(files["r/latest.json"])
    assert rec == json.loads(files["r/manifests/iter_0000004.json"])
    assert rec["iteration"] == 4 and rec["lease_epoch"] == 7 and rec["args"] == {"lr": 0.001}
    assert rec["files"] == {rel: len(data) for rel, data in written.items()}
    assert rec["hf"]["commit"] == res.hf_commit and rec["hf"]["files"] == {"config.json": 2, "pytorch_model.bin": 99}
    assert sorted(pushed) == ["rollout_3.pt", "rollout_4.pt"]
    # a second push of the same iteration commits nothing; a reader gets exactly the written bytes
    again = push_checkpoint(client(), job, lambda: True, pushed)
    assert again.skipped and fake_hub.repo(REPO).history()[-1].sha == res.commit
    dest = tmp_path / "restored"
    assert install(client(), "r", rec, dest) == (len(written), sum(map(len, written.values())))
    assert {rel: (dest / rel).read_bytes() for rel in written} == written
    assert (dest / "latest_checkpointed_iteration.txt").read_text() == "4"


@pytest.mark.slow
def test_a_checkpoint_with_many_files_goes_up_before_the_pointer_that_names_it(fake_hub, tmp_path):
    """A Megatron torch_dist-style checkpoint (hundreds of shard files, `.metadata` last): the files go up
    (binary shards as LFS objects, one commit on the LFS path), the pointer comes after them and names the
    commit whose tree holds every file."""
    from trainstack.hub.push import PushJob, push_checkpoint
    from trainstack.storage.layout import TRACKER

    save = tmp_path / "ck"
    d = save / "iter_0000009"
    d.mkdir(parents=True)
    for rank in range(300):
        (d / f"__{rank}_0.distcp").write_bytes(rank.to_bytes(2, "big") * 8)
    (d / "common.pt").write_bytes(b"c")
    (d / ".metadata").write_bytes(b"m")  # torch_dist writes it last
    (save / TRACKER).write_text("9")
    before = len(fake_hub.repo(REPO).history()) if fake_hub.repo(REPO) else 1
    res = push_checkpoint(client(), PushJob("mega", 9, str(save), 1, {}), lambda: True)
    history = fake_hub.repo(REPO).history()
    parts = [c for c in history[before:] if "iter_0000009" in c.message and "pointer" not in c.message]
    assert len(parts) >= 1 and parts[-1].sha == res.files_commit and history[-1].sha == res.commit
    assert sum(p.startswith("mega/iter_0000009/") for p in fake_hub.files(REPO, res.files_commit)) == 302
    assert not any(p.startswith("mega/iter_0000009/") for p in fake_hub.files(REPO, parts[0].parent or ""))
    assert res.files == 302 and json.loads(fake_hub.files(REPO)["mega/latest.json"])["iteration"] == 9


def test_a_restore_refuses_files_that_do_not_match_the_recorded_sizes(fake_hub, tmp_path):
    from trainstack.hub.push import PushJob, push_checkpoint
    from trainstack.hub.restore import install

    write_checkpoint(tmp_path / "ck", 2)
    push_checkpoint(client(), PushJob("r", 2, str(tmp_path / "ck"), 1, {}), lambda: True)
    rec = json.loads(fake_hub.files(REPO)["r/latest.json"])
    rec["files"]["iter_0000002/model.pt"] += 1  # what a truncated or replaced file looks like
    dest = tmp_path / "dest"
    with pytest.raises(RuntimeError, match="model.pt"):
        install(client(), "r", rec, dest)
    assert not (dest / "latest_checkpointed_iteration.txt").exists() and not (dest / "iter_0000002").exists()


def test_retention_keeps_the_newest_checkpoints_and_every_hf_export(fake_hub, tmp_path):
    from trainstack.hub.push import PushJob, push_checkpoint

    save = tmp_path / "ck"
    for n in range(4):
        write_checkpoint(save, n)
        hf = tmp_path / f"hf{n}"
        hf.mkdir()
        (hf / "config.json").write_text("{}")
        (hf / "model.safetensors").write_bytes(b"s")
        res = push_checkpoint(client(), PushJob("r", n, str(save), 1, {}, hf_template=str(tmp_path / "hf{rollout_id}"),
                                                keep=2), lambda: True)
    assert res.deleted == [1]
    names = set(fake_hub.files(REPO))
    assert {p.split("/")[1] for p in names if p.startswith("r/iter_")} == {"iter_0000002", "iter_0000003"}
    assert {p for p in names if p.startswith("r/manifests/")} == {"r/manifests/iter_0000002.json",
                                                                  "r/manifests/iter_0000003.json"}
    assert not any("dataset_state_dict_0" in p or "dataset_state_dict_1" in p for p in names)
    assert {p.split("/")[2] for p in names if p.startswith("r/hf/")} == {f"iter_000000{i}" for i in range(4)}


# -------------------------------------------------------------------------------------------------
# the worker
# -------------------------------------------------------------------------------------------------
def _worker(spec, lease, **kw):
    from trainstack.hub.sync import SyncWorker

    return SyncWorker(spec, RunDir(spec.run_dir), lease, poll_s=0.05, **kw)


def _lease(spec) -> Lease:
    return Lease.acquire(Path(spec.run_dir) / "lease.json", ttl_s=60)


def test_every_nth_complete_checkpoint_is_pushed_and_the_last_one_always(fake_hub, tmp_path):
    spec = make_spec(tmp_path, "run_id=nth", "hub.every=3")
    save = Path(spec.args["save"])
    worker = _worker(spec, _lease(spec)).start()
    for n in range(8):  # complete checkpoints 0..7, each pushed before the next is written
        write_checkpoint(save, n)
        time.sleep(0.4)
    write_checkpoint(save, 8, complete=False)  # a save killed half-way: never selected, never pushed
    assert worker.finish(60)
    pushed = [e["iteration"] for e in events(Path(spec.run_dir)) if e["event"] == "hub_push"]
    assert pushed == [2, 5, 7]  # every 3rd complete checkpoint, then the run's last
    status = json.loads((Path(spec.run_dir) / "status.json").read_text())["hub"]
    last = [e for e in events(Path(spec.run_dir)) if e["event"] == "hub_push"][-1]
    assert status["last_pushed"] == 7 and status["commit"] == last["commit"] == fake_hub.repo(REPO).branches["main"]


def test_when_uploads_fall_behind_the_newest_checkpoint_wins(fake_hub, tmp_path):
    spec = make_spec(tmp_path, "run_id=behind")
    save = Path(spec.args["save"])
    fake_hub.inject("delay", "/commit/", delay_s=1.5, count=1)  # the first commit is slow
    worker = _worker(spec, _lease(spec)).start()
    write_checkpoint(save, 0)
    time.sleep(0.5)  # the push of 0 is under way and stuck in its commit
    for n in range(1, 6):
        write_checkpoint(save, n)
        time.sleep(0.05)
    assert worker.finish(60)
    evs = events(Path(spec.run_dir))
    assert [e["iteration"] for e in evs if e["event"] == "hub_push"] == [0, 5]
    assert [e["iteration"] for e in evs if e["event"] == "hub_skip"] == [1, 2, 3, 4]


def test_a_hub_outage_is_retried_with_backoff_and_the_backlog_pushed_after(fake_hub, tmp_path):
    spec = make_spec(tmp_path, "run_id=outage", "hub.retry_max_s=1")
    save = Path(spec.args["save"])
    worker = _worker(spec, _lease(spec)).start()
    time.sleep(0.5)
    fake_hub.inject("drop", "", count=None, seconds=4)  # every connection dropped for 4 s
    t0 = time.monotonic()
    for n in range(4):
        write_checkpoint(save, n)
        time.sleep(0.3)
    assert time.monotonic() - t0 < 2.5  # the writer never waited on the Hub
    assert worker.finish(60)
    evs = events(Path(spec.run_dir))
    failed = [e for e in evs if e["event"] == "hub_push_failed"]
    assert failed and all(e["retry_in_s"] <= 1 for e in failed)
    assert [e["iteration"] for e in evs if e["event"] == "hub_push"][-1] == 3
    assert json.loads(fake_hub.files(REPO)["outage/latest.json"])["iteration"] == 3


def test_a_writer_that_lost_the_lease_pushes_nothing(fake_hub, tmp_path):
    spec = make_spec(tmp_path, "run_id=fenced")
    save = Path(spec.args["save"])
    old = Lease.acquire(Path(spec.run_dir) / "lease.json", ttl_s=0.2)
    time.sleep(0.3)  # expired without a heartbeat: the next launch takes the run over
    new = Lease.acquire(Path(spec.run_dir) / "lease.json", ttl_s=60)
    assert new.record.epoch == old.record.epoch + 1 and not old.holds()
    write_checkpoint(save, 0)
    worker = _worker(spec, old).start()
    worker.finish(10)
    assert fake_hub.repo(REPO) is None or "fenced/latest.json" not in fake_hub.files(REPO)
    assert [e["event"] for e in events(Path(spec.run_dir)) if e["event"].startswith("hub_")] == ["hub_fenced"]


@pytest.mark.slow
def test_the_pointer_only_ever_names_a_complete_checkpoint_under_random_interruptions(fake_hub, tmp_path):
    """Connections dropped before an answer, in the middle of a commit body and after a commit was
    applied, 5xx and 429 answers, at random requests; saves killed half-way. After every single commit the Hub's pointer names a checkpoint whose files are all there, with
    the bytes that were written; at the end it names the last complete checkpoint."""
    spec = make_spec(tmp_path, "run_id=chaos", "hub.retry_max_s=0.5")
    save = Path(spec.args["save"])
    truth: dict[int, dict[str, bytes]] = {}
    violations: list[str] = []
    fake_hub.commit_hooks.append(pointer_checker("chaos", truth, violations))
    fake_hub.rng.seed(1234)
    rng = random.Random(99)
    for kind, match, p in (("drop", "", 0.08), ("drop_mid_body", "/commit/", 0.25), ("lose_response", "/commit/", 0.25),
                           ("status", "", 0.06), ("drop", "/resolve/", 0.1)):
        fake_hub.inject(kind, match, count=None, probability=p, status=rng.choice([500, 502, 503]))
    fake_hub.inject("status", "/preupload/", count=2, status=429, retry_after=0)
    worker = _worker(spec, _lease(spec)).start()
    for n in range(9):
        if rng.random() < 0.25:
            write_checkpoint(save, n, complete=False)  # killed mid-save: tracker untouched
            continue
        truth[n] = write_checkpoint(save, n)
        deadline = time.monotonic() + rng.uniform(0.05, 20)  # mostly: give the push time to get through
        while (worker.pushed or -1) < n and time.monotonic() < deadline:
            time.sleep(0.05)
    assert worker.finish(240)
    fired = sum(f.fired for f in fake_hub.faults)
    assert fired >= 5, "the faults did not fire: this run tested nothing"
    assert not violations, violations[:5]
    commits_with_pointer = [c for c in fake_hub.repo(REPO).history() if "chaos/latest.json" in c.files]
    named = [json.loads(c.files["chaos/latest.json"])["iteration"] for c in commits_with_pointer]
    assert len(set(named)) >= 3 and set(named) <= set(truth) and named == sorted(named)  # never backwards
    assert named[-1] == max(truth)


def test_no_token_in_events_status_logs_or_hub_requests(fake_hub, tmp_path, capfd):
    """A failing Hub makes the sync write errors into events.jsonl, status.json and stderr: none of
    them, nor the fake's request log, holds the token (errors are scrubbed, the token is never read)."""
    from trainstack.hub.client import describe_error

    spec = make_spec(tmp_path, "run_id=secret", "hub.retry_max_s=0.2")
    save = Path(spec.args["save"])
    fake_hub.inject("status", "/preupload/", count=2, status=403)  # not retried by the client: our retry
    worker = _worker(spec, _lease(spec)).start()
    write_checkpoint(save, 0)
    assert worker.finish(60)
    token = fake_hub.token
    texts = [p.read_text(errors="replace") for p in Path(spec.run_dir).rglob("*") if p.is_file()]
    texts += [Path(fake_hub.log_path).read_text(), "".join(capfd.readouterr())]
    assert any("hub_push_failed" in t for t in texts)
    assert not [t[:80] for t in texts if token in t]
    assert token not in describe_error(RuntimeError(f"401 for Authorization: Bearer {token} ({token})"))
    threading.enumerate()  # the worker thread is gone (finish returned): nothing left to leak later
    assert not any(t.name == "trainstack-hub-sync" and t.is_alive() for t in threading.enumerate())


# -------------------------------------------------------------------------------------------------
# trainstack hub ls / pull
# -------------------------------------------------------------------------------------------------
def test_hub_ls_and_pull_an_older_checkpoint(fake_hub, tmp_path, capsys):
    from trainstack.cli import main as cli
    from trainstack.hub.push import PushJob, push_checkpoint

    save = tmp_path / "ck"
    written = {n: write_checkpoint(save, n) for n in (1, 3)}
    for n in (1, 3):
        push_checkpoint(client(), PushJob("r", n, str(save), 1, {}), lambda: True)
    assert cli.main(["hub", "ls", "r", "--repo-id", REPO, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pointer"]["iteration"] == 3
    assert [(c["iteration"], c["files"], c["complete"]) for c in data["checkpoints"]] == [(3, 6, True), (1, 6, True)]
    assert cli.main(["hub", "pull", "r", "--repo-id", REPO, "--iter", "1", "--to", str(tmp_path / "old")]) == 0
    assert {rel: (tmp_path / "old" / rel).read_bytes() for rel in written[1]} == written[1]
    assert (tmp_path / "old" / "latest_checkpointed_iteration.txt").read_text() == "1"
    out = capsys.readouterr().out
    assert "pulled iter_0000001" in out and "relaunch of the run resumes" not in out  # --to: not the run's dir
    assert f"tracker  -> 1: {tmp_path / 'old'} is a complete checkpoint directory" in out
    assert cli.main(["hub", "pull", "r", "--repo-id", REPO, "--iter", "2", "--to", str(tmp_path / "x")]) == 2
    assert "no pushed iter_0000002" in capsys.readouterr().err
    assert cli.main(["hub", "ls", "r"]) == 2  # no run dir, no --repo-id: which repo?
    assert "--repo-id" in capsys.readouterr().err
