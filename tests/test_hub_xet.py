"""The Xet path, the one `huggingface_hub` 2.4.0 takes by default (hf_xet 1.8.0 installed): checkpoints go
up as xorbs and shards to the fake Hub's CAS (`trainstack_dev/fakes/xet.py`), are committed by sha256,
and come back through file reconstructions and xorb byte ranges, all spoken by the real client. The
CAS refuses what the real one refuses (wrong or expired token, a read token writing, a cut xorb, a
shard naming a xorb never sent, a commit naming a file no shard registered), faults on its routes are
survived, and a client without Xet still reads what Xet stored."""
from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hubtools import pointer_checker, write_checkpoint

REPO = "team/ckpts"
MIB = 1024 * 1024


def client():
    from trainstack.hub.client import HubClient

    return HubClient(REPO)


def push(n: int, save: Path, tries: int = 6):
    """What the sync worker does: retry the whole push until it lands."""
    from trainstack.hub.push import PushJob, push_checkpoint

    last: Exception | None = None
    for _ in range(tries):
        try:
            return push_checkpoint(client(), PushJob("x", n, str(save), 1, {}), lambda: True)
        except Exception as ex:  # noqa: BLE001
            last = ex
            time.sleep(0.2)
    pytest.fail(f"iteration {n} never pushed: {last}")


def with_weights(save: Path, n: int, size: int = 12 * MIB) -> dict[str, bytes]:
    """A checkpoint whose weights are over the Hub's 10 MiB limit for files kept in git."""
    written = write_checkpoint(save, n)
    data = os.urandom(size)
    (save / f"iter_{n:07d}" / "model.pt").write_bytes(data)
    written[f"iter_{n:07d}/model.pt"] = data
    return written


def routes(hub, since: int = 0) -> set[tuple[str, str]]:
    out = set()
    for r in hub.requests[since:]:
        parts = r["path"].split("/")
        key = "/".join(parts[:3]) if r["path"].startswith(("/v1/", "/v2/")) else (
            parts[5] if r["path"].startswith("/api/models/") and len(parts) > 5 else r["path"])
        out.add((r["method"], key))
    return out


def test_a_checkpoint_over_10_mib_round_trips_on_the_xet_path(fake_hub_xet, tmp_path):
    from trainstack.hub.restore import install

    save = tmp_path / "ck"
    written = with_weights(save, 3)
    res = push(3, save)
    seen = routes(fake_hub_xet)
    assert {("GET", "xet-write-token"), ("POST", "/v1/xorbs"), ("POST", "/v1/shards"), ("POST", "commit")} <= seen
    assert not any("/info/lfs/" in r["path"] or r["path"].startswith("/_lfs/") for r in fake_hub_xet.requests)
    blob = fake_hub_xet.blobs(REPO, res.files_commit)["x/iter_0000003/model.pt"]
    assert blob.xet and blob.data is None and blob.sha256 == hashlib.sha256(written["iter_0000003/model.pt"]).hexdigest()
    assert not fake_hub_xet.store.has(blob.sha256)  # only the CAS holds it: nothing went the LFS way

    n = len(fake_hub_xet.requests)
    dest = tmp_path / "restored"
    record = json.loads(fake_hub_xet.files(REPO)["x/latest.json"])
    install(client(), "x", record, dest)
    for rel, data in written.items():
        assert (dest / rel).read_bytes() == data, rel
    fetched = {("GET", "/v1/reconstructions")} | {("GET", f"/_xorb/{x}") for x in fake_hub_xet.cas._offsets}
    assert fetched <= routes(fake_hub_xet, n)  # every stored xorb read back
    assert not fake_hub_xet.store.has(blob.sha256)  # the download went the Xet way too


def test_a_second_checkpoint_sends_only_what_changed(fake_hub_xet, tmp_path):
    """Chunk-level dedup, the reason to take this path: weights that moved in one place cost that place."""
    save = tmp_path / "ck"
    first = with_weights(save, 1, 24 * MIB)["iter_0000001/model.pt"]
    push(1, save)
    sent_first = sum(r["bytes"] for r in fake_hub_xet.requests if r["path"].startswith("/v1/xorbs/"))
    n = len(fake_hub_xet.requests)
    write_checkpoint(save, 2)
    changed = bytearray(first)
    changed[8 * MIB:9 * MIB] = os.urandom(MIB)
    (save / "iter_0000002" / "model.pt").write_bytes(changed)
    res = push(2, save)
    sent_second = sum(r["bytes"] for r in fake_hub_xet.requests[n:] if r["path"].startswith("/v1/xorbs/"))
    assert sent_first >= 24 * MIB and sent_second < 3 * MIB, (sent_first, sent_second)
    assert fake_hub_xet.files(REPO, res.files_commit)["x/iter_0000002/model.pt"] == bytes(changed)


def _cas(hub, method: str, path: str, token: str | None, body: bytes | None = None) -> int:
    req = urllib.request.Request(hub.storage_url + path, data=body, method=method,
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as ex:
        return ex.code


def _token(hub, scope: str) -> str:
    req = urllib.request.Request(f"{hub.url}/api/models/{REPO}/xet-{scope}-token/main",
                                 headers={"Authorization": f"Bearer {hub.token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        body = json.loads(r.read())
    assert r.headers["X-Xet-Access-Token"] == body["accessToken"] and body["casUrl"] == hub.storage_url
    return body["accessToken"]


def test_the_cas_refuses_what_the_real_one_refuses(fake_hub_xet, tmp_path):
    from huggingface_hub import HfApi

    hub = fake_hub_xet
    api = HfApi(endpoint=hub.url)
    api.create_repo(REPO, private=True)
    path = tmp_path / "w.bin"
    path.write_bytes(os.urandom(3 * MIB))
    api.upload_file(path_or_fileobj=str(path), path_in_repo="w.bin", repo_id=REPO)
    xorb = next(iter(hub.cas._offsets))
    good = Path(hub.cas.xorb_path(xorb)).read_bytes()
    some = "ab" * 32

    # the Hub hands out tokens only to who may write (401 without the Hub token), and the CAS checks them
    req = urllib.request.Request(f"{hub.url}/api/models/{REPO}/xet-write-token/main")
    with pytest.raises(urllib.error.HTTPError) as ex:
        urllib.request.urlopen(req, timeout=10)
    assert ex.value.code == 401
    read, write = _token(hub, "read"), _token(hub, "write")
    assert _cas(hub, "POST", f"/v1/xorbs/default/{some}", None, good) == 401
    assert _cas(hub, "POST", f"/v1/xorbs/default/{some}", "xet_forged", good) == 401
    assert _cas(hub, "POST", f"/v1/xorbs/default/{some}", read, good) == 403
    assert _cas(hub, "POST", f"/v1/xorbs/default/{some}", write, good[: len(good) // 2]) == 400  # cut in a chunk
    assert _cas(hub, "POST", "/v1/shards", write, b"not a shard") == 400
    shard = Path(hub.cas.root, "shards", os.listdir(Path(hub.cas.root, "shards"))[0]).read_bytes()
    raw = b"".join(struct.pack("<Q", int(xorb[i:i + 16], 16)) for i in range(0, 64, 16))  # as a shard stores it
    assert raw in shard
    assert _cas(hub, "POST", "/v1/shards", write, shard.replace(raw, os.urandom(32))) == 400  # a xorb never sent
    assert _cas(hub, "GET", f"/v1/reconstructions/{some}", read) == 404
    hub.xet_token_ttl = -1  # tokens handed out from now on are already expired
    assert _cas(hub, "GET", f"/v1/reconstructions/{some}", _token(hub, "read")) == 401

    # a commit may name only a file a shard registered, with its size
    blob = hub.blobs(REPO)["w.bin"]
    assert _commit_lfs(hub, "v.bin", "c" * 64, 5)[0] == 400
    code, message = _commit_lfs(hub, "v.bin", blob.sha256 or "", blob.size + 1)
    assert code == 400 and "LFS pointer pointed to a file that does not exist" in message
    assert _commit_lfs(hub, "v.bin", blob.sha256 or "", blob.size)[0] == 200
    assert hub.files(REPO)["v.bin"] == path.read_bytes()


def _commit_lfs(hub, path: str, sha256: str, size: int) -> tuple[int, str]:
    """The NDJSON commit the client sends after its upload step, naming one large file by sha256."""
    body = "\n".join(json.dumps(x) for x in ({"key": "header", "value": {"summary": "claim"}}, {
        "key": "lfsFile", "value": {"path": path, "algo": "sha256", "oid": sha256, "size": size}})).encode()
    req = urllib.request.Request(f"{hub.url}/api/models/{REPO}/commit/main", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {hub.token}",
                                          "Content-Type": "application/x-ndjson"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, ""
    except urllib.error.HTTPError as ex:
        return ex.code, ex.headers.get("X-Error-Message", "")


def test_faults_on_the_xet_path_are_survived(fake_hub_xet, tmp_path):
    """503s and a body cut on xorb uploads, a 429 on the shard upload, a dropped token request, a lost
    commit answer and tokens that expire mid-push: each push ends with the pointer naming the checkpoint,
    and after every commit the pointer names exactly the bytes that were written."""
    hub = fake_hub_xet
    violations: list[str] = []
    truth: dict[int, dict[str, bytes]] = {}
    hub.commit_hooks.append(pointer_checker("x", truth, violations))
    plans = [("status", "POST /v1/xorbs/", {"status": 503}), ("drop_mid_body", "POST /v1/xorbs/", {}),
             ("status", "POST /v1/shards", {"status": 429, "retry_after": 0}),
             ("drop", "xet-write-token", {}), ("lose_response", "/commit/", {})]
    save = tmp_path / "ck"
    for n, (kind, match, kw) in enumerate(plans):
        truth[n] = with_weights(save, n, 11 * MIB)
        fault = hub.inject(kind, match, **kw)
        res = push(n, save)
        assert fault.fired >= 1, kind
        assert json.loads(hub.files(REPO)["x/latest.json"])["iteration"] == n
        assert hub.files(REPO, res.files_commit)[f"x/iter_{n:07d}/model.pt"] == truth[n][f"iter_{n:07d}/model.pt"]
    assert violations == []
    assert os.listdir(hub.cas.tmp("")) == []  # the cut xorb body was not kept


def test_a_client_without_xet_reads_what_xet_stored_at_each_revision(fake_hub_xet, tmp_path):
    """The Hub serves Xet-stored files to every client: here rebuilt once by hf_xet from the CAS and
    admitted only with the committed sha256, then streamed like an LFS object (with Range)."""
    from huggingface_hub import HfApi, constants

    api = HfApi(endpoint=fake_hub_xet.url)
    api.create_repo(REPO, private=True)
    old, new = os.urandom(11 * MIB), os.urandom(11 * MIB)
    (tmp_path / "w.bin").write_bytes(old)
    first = api.upload_file(path_or_fileobj=str(tmp_path / "w.bin"), path_in_repo="w.bin", repo_id=REPO).oid
    (tmp_path / "w.bin").write_bytes(new)
    api.upload_file(path_or_fileobj=str(tmp_path / "w.bin"), path_in_repo="w.bin", repo_id=REPO)
    xet_at_first = api.hf_hub_download(REPO, "w.bin", revision=first, local_dir=tmp_path / "xet")
    assert Path(xet_at_first).read_bytes() == old
    constants.HF_HUB_DISABLE_XET = True  # the fixture's monkeypatch restores it
    plain = api.hf_hub_download(REPO, "w.bin", local_dir=tmp_path / "plain")
    assert Path(plain).read_bytes() == new
    assert any(r["path"].startswith("/_cdn/") and r["status"] == 200 for r in fake_hub_xet.requests)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.sampled_from([0, 1, 8191, 65536, 65537, 3 * MIB + 5]), seed=st.integers(0, 2**16))
def test_any_file_size_round_trips_through_the_cas(fake_hub_xet, tmp_path, size, seed):
    """Over file sizes around chunk boundaries (hf_xet cuts 64 KiB chunks on average): what hf_xet
    uploads, the fake's shard parser and xorb walker turn into a reconstruction hf_xet reads back."""
    import random

    from huggingface_hub import HfApi

    api = HfApi(endpoint=fake_hub_xet.url)
    api.create_repo(REPO, private=True, exist_ok=True)
    data = random.Random(seed).randbytes(size)
    name = f"f{size}-{seed}.bin"
    info = api.upload_file(path_or_fileobj=data, path_in_repo=name, repo_id=REPO)
    back = api.hf_hub_download(REPO, name, revision=info.oid, local_dir=tmp_path / f"dl{seed}")
    assert Path(back).read_bytes() == data


def test_the_client_bounds_hf_xet_memory_unless_told_otherwise(fake_hub_xet, monkeypatch):
    """The bounds that keep a multi-GB push near 0.5 GiB (docs/hub.md) are ones hf_xet reads, with the
    values set; a value the user exported wins."""
    import hf_xet

    from trainstack.storage.hf_xet import XET_BOUNDS

    for key in XET_BOUNDS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_XET_CLIENT_AC_MAX_UPLOAD_CONCURRENCY", "16")  # the user's
    client()
    assert os.environ["HF_XET_CLIENT_AC_MAX_UPLOAD_CONCURRENCY"] == "16"
    seen = dict(hf_xet.XetConfig().items())
    units = {"mb": 10**6, "": 1}
    for key, value in XET_BOUNDS.items():
        group, _, name = key[len("HF_XET_"):].lower().partition("_")
        number, unit = re.fullmatch(r"(\d+)([a-z]*)", value).groups()  # type: ignore[union-attr]
        want = 16 if key == "HF_XET_CLIENT_AC_MAX_UPLOAD_CONCURRENCY" else int(number) * units[unit]
        assert seen[f"{group}.{name}"] == want, key
