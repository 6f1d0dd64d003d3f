"""The fake Hub takes the large-file path as the real Hub does, driven by the real huggingface_hub 2.4.0
client on its Git LFS path (`HF_HUB_DISABLE_XET=1`; the Xet path: test_hub_xet.py): preupload says `lfs` for files over 10 MiB, binary files and the repo's
LFS patterns; a commit with a regular file over 10 MiB is refused; LFS objects go through the batch
API (basic and multipart) to a storage host and come back through a redirect, at any revision. The
old fake answered `regular` for everything, so a checkpoint went up as base64 inside one commit."""
from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hubtools import write_checkpoint
from trainstack_dev.fakes.hub import GITATTRIBUTES, REGULAR_MAX, lfs_patterns, upload_mode

REPO = "team/ckpts"
MIB = 1024 * 1024


def sparse(path: Path, size: int, head: bytes) -> bytes:
    """A file of `size` bytes, mostly a hole (cheap to write and read), starting with `head`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return head + b"\0" * (size - len(head))


def post(hub, path: str, body: bytes, content_type: str = "application/json") -> tuple[int, dict, str]:
    req = urllib.request.Request(hub.url + path, data=body, method="POST",
                                 headers={"Authorization": f"Bearer {hub.token}", "Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}"), ""
    except urllib.error.HTTPError as ex:
        return ex.code, {}, ex.headers.get("X-Error-Message", "")


def preupload(hub, files: list[tuple[str, int, bytes]]) -> dict[str, str]:
    body = json.dumps({"files": [{"path": p, "size": n, "sample": base64.b64encode(s[:512]).decode()}
                                 for p, n, s in files]}).encode()
    status, answer, msg = post(hub, f"/api/models/{REPO}/preupload/main", body)
    assert status == 200, msg
    return {f["path"]: f["uploadMode"] for f in answer["files"]}


def test_preupload_decides_regular_or_lfs_like_the_hub(fake_hub):
    from huggingface_hub import HfApi

    api = HfApi(endpoint=fake_hub.url)
    api.create_repo(REPO, private=True)
    modes = preupload(fake_hub, [("notes.txt", 100, b"hello"), ("big.txt", REGULAR_MAX + 1, b"a" * 512),
                                 ("at-limit.txt", REGULAR_MAX, b"a" * 512), ("blob", 300, b"\0\1\2"),
                                 ("latin1.txt", 20, "caf\xe9 au lait".encode("latin-1")), ("iter_1/model.pt", 5, b"text!"),
                                 ("sub/x.safetensors", 5, b"text!")])
    assert modes == {"notes.txt": "regular", "big.txt": "lfs", "at-limit.txt": "regular", "blob": "lfs",
                     "latin1.txt": "lfs", "iter_1/model.pt": "lfs", "sub/x.safetensors": "lfs"}
    # the repo's own .gitattributes decides, as committed
    api.upload_file(path_or_fileobj=GITATTRIBUTES + b"*.log filter=lfs diff=lfs merge=lfs -text\n",
                    path_in_repo=".gitattributes", repo_id=REPO)
    assert preupload(fake_hub, [("train.log", 10, b"step 1\n"), ("train.txt", 10, b"step 1\n")]) == \
        {"train.log": "lfs", "train.txt": "regular"}


@settings(max_examples=200, deadline=None)
@given(size=st.integers(0, 3 * REGULAR_MAX), text=st.text(max_size=200), nul=st.booleans(),
       name=st.sampled_from(["a.txt", "b.json", "c.pt", "d/e.bin", "f.safetensors", "events.out.tfevents.1"]))
def test_a_file_is_regular_only_when_small_text_and_not_an_lfs_pattern(size, text, nul, name):
    sample = text.encode("utf-8") + (b"\0" if nul else b"")
    lfs_name = name.endswith((".pt", ".bin", ".safetensors")) or "tfevents" in name
    expect = "lfs" if size > REGULAR_MAX or b"\0" in sample[:512] or lfs_name else "regular"
    assert upload_mode(name, size, sample, lfs_patterns(GITATTRIBUTES)) == expect


def test_a_commit_with_a_regular_file_over_10_mib_is_refused_with_the_hubs_message(fake_hub):
    """The old fake stored it (one NDJSON line of 14 MB of base64); the Hub refuses it."""
    from huggingface_hub import HfApi

    HfApi(endpoint=fake_hub.url).create_repo(REPO, private=True)
    line = lambda key, value: json.dumps({"key": key, "value": value}).encode() + b"\n"  # noqa: E731
    body = line("header", {"summary": "big", "description": ""}) + line(
        "file", {"path": "big.txt", "encoding": "base64", "content": base64.b64encode(b"a" * (REGULAR_MAX + 1)).decode()})
    status, _, msg = post(fake_hub, f"/api/models/{REPO}/commit/main", body, "application/x-ndjson")
    assert status == 400 and "larger than 10 MiB" in msg and "big.txt" in msg
    assert "big.txt" not in fake_hub.files(REPO)
    # an lfsFile whose object was never uploaded is refused too
    body = line("header", {"summary": "ptr"}) + line("lfsFile", {"path": "w.pt", "algo": "sha256", "oid": "0" * 64,
                                                                 "size": 5})
    status, _, msg = post(fake_hub, f"/api/models/{REPO}/commit/main", body, "application/x-ndjson")
    assert status == 400 and "LFS pointer" in msg


def test_a_checkpoint_over_10_mib_round_trips_on_the_lfs_path(fake_hub, tmp_path):
    """Done-when of the issue: push a checkpoint whose weights are 11 MiB through the real client, get it
    back byte for byte from the commit the pointer names. The bytes go to the storage host (basic PUT
    and multipart parts + completion + verify); the commit carries pointers only."""
    from trainstack.hub.client import HubClient
    from trainstack.hub.push import PushJob, push_checkpoint
    from trainstack.hub.restore import install

    fake_hub.multipart_chunk = 4 * MIB  # 11 MiB: three parts
    save = tmp_path / "ck"
    written = write_checkpoint(save, 3)
    written["iter_0000003/model.pt"] = sparse(save / "iter_0000003/model.pt", 11 * MIB, os.urandom(4096))
    written["iter_0000003/optimizer.pt"] = sparse(save / "iter_0000003/optimizer.pt", 3 * MIB, os.urandom(64))
    n_before = len(fake_hub.requests)
    res = push_checkpoint(HubClient(REPO), PushJob("r", 3, str(save), 1, {}), lambda: True)
    assert res.commit and res.bytes == sum(map(len, written.values()))
    reqs = fake_hub.requests[n_before:]
    blobs = fake_hub.blobs(REPO, res.files_commit)
    assert blobs["r/iter_0000003/model.pt"].sha256 and blobs["r/iter_0000003/model.pt"].size == 11 * MIB
    assert blobs["r/iter_0000003/meta.json"].data is not None  # small text stays in git
    parts = [r for r in reqs if r["method"] == "PUT" and "/_lfs/part/" in r["path"]]
    assert len(parts) == 3 and sum(r["bytes"] for r in parts) == 11 * MIB
    assert any(r["method"] == "PUT" and "/_lfs/put/" in r["path"] and r["bytes"] == 3 * MIB for r in reqs)
    assert any(r["path"].endswith("/info/lfs/objects/verify") and r["status"] == 200 for r in reqs)
    assert not any(r["auth"] for r in reqs if "/_lfs/" in r["path"])  # no Hub token to the storage host
    commits = [r for r in reqs if "/commit/" in r["path"] and r["method"] == "POST"]
    assert commits and max(r["bytes"] for r in commits) < 64 * 1024  # pointers, not base64 bodies
    rec = json.loads(fake_hub.files(REPO)["r/latest.json"])
    dest = tmp_path / "restored"
    assert install(HubClient(REPO), "r", rec, dest) == (len(written), sum(map(len, written.values())))
    assert all((dest / rel).read_bytes() == data for rel, data in written.items())
    assert any(r["method"] == "GET" and r["path"].startswith("/_cdn/") for r in fake_hub.requests)
    # the same objects pushed again are not sent again (the batch API answers without actions)
    n_before = len(fake_hub.requests)
    HubClient(REPO).upload_folder(save, "copy", allow=["iter_0000003/model.pt"], message="again")
    assert not any(r["method"] == "PUT" for r in fake_hub.requests[n_before:])


def test_downloads_honour_the_revision_by_branch_and_commit(fake_hub, tmp_path):
    """An LFS file and a regular file overwritten on main: `resolve/<sha>` gives the old bytes, `resolve/main`
    the new; the LFS one through a 302 to the storage host with its sha256 and size."""
    from huggingface_hub import HfApi, hf_hub_download

    api = HfApi(endpoint=fake_hub.url)
    api.create_repo(REPO, private=True)
    old = sparse(tmp_path / "v1.bin", REGULAR_MAX + 5, b"v1")
    new = sparse(tmp_path / "v2.bin", REGULAR_MAX + 7, b"v2")
    first = api.upload_file(path_or_fileobj=str(tmp_path / "v1.bin"), path_in_repo="w.bin", repo_id=REPO).oid
    api.upload_file(path_or_fileobj=b"note 1\n", path_in_repo="n.txt", repo_id=REPO)
    second = api.upload_file(path_or_fileobj=str(tmp_path / "v2.bin"), path_in_repo="w.bin", repo_id=REPO).oid
    api.upload_file(path_or_fileobj=b"note 2\n", path_in_repo="n.txt", repo_id=REPO)
    got = lambda name, rev, d: Path(hf_hub_download(REPO, name, revision=rev, local_dir=tmp_path / d,  # noqa: E731
                                                    endpoint=fake_hub.url)).read_bytes()
    assert got("w.bin", first, "a") == old and got("w.bin", second, "b") == new and got("w.bin", "main", "c") == new
    assert got("n.txt", second, "d") == b"note 1\n" and got("n.txt", "main", "e") == b"note 2\n"
    req = urllib.request.Request(f"{fake_hub.url}/{REPO}/resolve/{first}/w.bin", method="HEAD",
                                 headers={"Authorization": f"Bearer {fake_hub.token}"})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None

    with pytest.raises(urllib.error.HTTPError) as head:
        urllib.request.build_opener(NoRedirect).open(req, timeout=10)
    h = head.value.headers
    assert head.value.code == 302 and h["X-Repo-Commit"] == first and h["X-Linked-Size"] == str(len(old))
    assert h["Location"].startswith(fake_hub.storage_url) and json.loads(h["X-Linked-Etag"]) == \
        __import__("hashlib").sha256(old).hexdigest()
    entries = {e.path: e for e in api.list_repo_tree(REPO, revision=first)}
    assert entries["w.bin"].lfs.sha256 == json.loads(h["X-Linked-Etag"]) and entries["w.bin"].size == len(old)


def test_a_hub_without_xet_tells_a_xet_client_what_to_set(tmp_path):
    from huggingface_hub import HfApi
    from trainstack_dev.fakes.hub import FakeHub

    hub = FakeHub(token="t", xet=False, blob_dir=str(tmp_path / "blobs")).start()
    try:
        HfApi(endpoint=hub.url, token="t").create_repo(REPO, private=True)
        req = urllib.request.Request(f"{hub.url}/api/models/{REPO}/xet-write-token/main",
                                     headers={"Authorization": "Bearer t"})
        with pytest.raises(urllib.error.HTTPError) as ex:
            urllib.request.urlopen(req, timeout=10)
        assert ex.value.code == 404 and "HF_HUB_DISABLE_XET=1" in ex.value.headers["X-Error-Message"]
    finally:
        hub.stop()


def test_faults_on_the_large_file_path_are_survived(fake_hub, tmp_path):
    """A part upload cut in the middle of its body, 503s on the basic PUT, a dropped batch request and a
    lost completion answer: the push (retried as the sync worker does) ends with the pointer naming the
    checkpoint, and after every commit the pointer names exactly the bytes that were written."""
    import time

    from hubtools import pointer_checker
    from trainstack.hub.client import HubClient
    from trainstack.hub.push import PushJob, push_checkpoint

    fake_hub.multipart_chunk = 4 * MIB
    violations: list[str] = []
    truth: dict[int, dict[str, bytes]] = {}
    fake_hub.commit_hooks.append(pointer_checker("f", truth, violations))
    plans = [("drop_mid_body", "PUT /_lfs/part/", {}), ("status", "PUT /_lfs/put/", {"status": 503, "count": 2}),
             ("drop", "/info/lfs/objects/batch", {}), ("lose_response", "/info/lfs/complete/", {})]
    save = tmp_path / "ck"
    for n, (kind, match, kw) in enumerate(plans):
        written = write_checkpoint(save, n)
        written[f"iter_{n:07d}/model.pt"] = sparse(save / f"iter_{n:07d}/model.pt", 11 * MIB, os.urandom(256))
        written[f"iter_{n:07d}/optimizer.pt"] = sparse(save / f"iter_{n:07d}/optimizer.pt", 2 * MIB, os.urandom(256))
        truth[n] = written
        fault = fake_hub.inject(kind, match, **kw)
        for _ in range(6):
            try:
                res = push_checkpoint(HubClient(REPO), PushJob("f", n, str(save), 1, {}), lambda: True)
                break
            except Exception:  # noqa: BLE001 - the sync worker retries the whole push
                time.sleep(0.2)
        else:
            pytest.fail(f"{kind}: never pushed")
        assert fault.fired >= 1, kind
        assert res.commit and json.loads(fake_hub.files(REPO)["f/latest.json"])["iteration"] == n
        assert fake_hub.files(REPO, res.files_commit)[f"f/iter_{n:07d}/model.pt"] == written[f"iter_{n:07d}/model.pt"]
    assert violations == []
