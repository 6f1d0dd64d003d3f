"""Benchmark: pushing and restoring a large checkpoint through the Hub's large-file paths, Xet (the
client's default: hf_xet, chunked, deduplicated) and Git LFS (`HF_HUB_DISABLE_XET=1`), with the
client's peak memory.

A checkpoint of generated files is pushed with trainstack's own push (`trainstack.hub.push`, the real
huggingface_hub client) to the fake Hub running in its own process (LFS objects and the Xet CAS on
disk; not niced: it is the other end of every byte), then restored (`trainstack.hub.restore.install`)
and compared by sha256. The files are random bytes (a sparse file would be mostly one repeated chunk,
which Xet sends once). Each push and each restore runs in a fresh child process, whose peak RSS
(ru_maxrss) is reported next to the same process's RSS before the transfer: streaming means the peak
does not grow with the checkpoint's size. For Xet, `xorb_mib` is what went over the wire.

Writes benchmarks/results/hub_push.json.

    .venv/bin/python benchmarks/hub_push.py [--sizes-mib 256 1024 2048] [--files 4] [--paths xet lfs]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REPO = "bench/big-ckpts"

# runs in the child: push (or restore) one checkpoint, report seconds and memory
CHILD = r"""
import json, resource, sys, time
from pathlib import Path
mode, run, save, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
from trainstack.hub.client import HubClient
from trainstack.hub.push import PushJob, push_checkpoint
from trainstack.hub.restore import install
client = HubClient("%s")
client.ensure_repo()
rss = lambda: int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024
before = rss()
t0 = time.monotonic()
if mode == "push":
    res = push_checkpoint(client, PushJob(run, n, save, 1, {}), lambda: True)
    out = {"commit": res.commit, "bytes": res.bytes, "files": res.files}
else:
    rec, _ = client.read_pointer(run)
    files, nbytes = install(client, run, rec, save)
    out = {"bytes": nbytes, "files": files}
out.update(seconds=time.monotonic() - t0, rss_before_mib=before,
           peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(out))
""" % REPO


def start_hub(tmp: Path) -> tuple[subprocess.Popen, str]:
    ready = tmp / "hub.url"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'devtools'}"}
    # not niced (unlike hub_sync.py): the fake is the other end of every byte here, so its share of
    # the CPU is the throughput; the figure this benchmark is about is the client's memory
    proc = subprocess.Popen([sys.executable, "-m", "trainstack_dev.fakes.hub", "--port", "0",
                             "--ready-file", str(ready), "--blob-dir", str(tmp / "lfs")], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(600):  # on a loaded machine it can take a while
        if ready.exists():
            return proc, ready.read_text().strip()
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the fake Hub did not start")


def write_checkpoint(save: Path, n: int, total: int, nfiles: int) -> dict[str, str]:
    """iter_N as Megatron's torch_dist writes it (`nfiles` shards of random bytes totalling `total`;
    `.metadata` last, its completion marker), then the tracker; returns {relative path: sha256}."""
    d = save / f"iter_{n:07d}"
    d.mkdir(parents=True)
    sums = {}
    for i in range(nfiles):
        p = d / f"__{i}_0.distcp"
        h, left = hashlib.sha256(), total // nfiles
        with open(p, "wb") as f:
            while left > 0:
                block = os.urandom(min(left, 16 << 20))
                f.write(block)
                h.update(block)
                left -= len(block)
        sums[p.relative_to(save).as_posix()] = h.hexdigest()
    (d / ".metadata").write_bytes(json.dumps({"shards": nfiles}).encode())
    sums[f"iter_{n:07d}/.metadata"] = sha256_of(d / ".metadata")
    (save / "latest_checkpointed_iteration.txt").write_text(str(n))
    return sums


def sha256_of(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def fake_get(url: str, route: str) -> Any:
    """One of the fake Hub's own routes (`/_fake/health`: the request count; `/_fake/requests?since=N`)."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/_fake/{route}", timeout=30) as r:
        return json.loads(r.read())


def child(mode: str, run: str, save: Path, n: int, env: dict) -> dict:
    res = subprocess.run([sys.executable, "-c", CHILD, mode, run, str(save), str(n)], env=env, capture_output=True,
                         text=True, timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    import benchlib

    quick = benchlib.quick()  # short mode: 12 and 24 MiB checkpoints (benchmarks/benchlib.py)
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mib", type=int, nargs="+", default=[12, 24] if quick else [256, 1024, 2048])
    ap.add_argument("--files", type=int, default=2 if quick else 4, help="weight shards per checkpoint")
    ap.add_argument("--paths", nargs="+", choices=("xet", "lfs"), default=["xet", "lfs"])
    ns = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hub-push-bench-"))
    try:
        hub_proc, url = start_hub(tmp)
    except RuntimeError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    rows = []
    try:
        load_before = [round(x, 2) for x in os.getloadavg()]
        for k, mib in enumerate(ns.sizes_mib):
            save = tmp / f"ck{k}"
            sums = write_checkpoint(save, 1, mib << 20, ns.files)
            for path in ns.paths:
                run, restored = f"r{k}-{path}", tmp / f"restored{k}-{path}"
                env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_ENDPOINT": url, "HF_HOME": str(tmp / f"hf-{run}"),
                       "HF_HUB_DISABLE_TELEMETRY": "1", "HF_TOKEN": "hf_bench_token_not_checked",
                       "HF_HUB_DISABLE_XET": "0" if path == "xet" else "1"}
                before = fake_get(url, "health")["requests"]
                push = child("push", run, save, 1, env)
                pull = child("restore", run, restored, 1, env)
                sent = sum(r.get("bytes") or 0 for r in fake_get(url, f"requests?since={before}")
                           if r["path"].startswith("/v1/xorbs/"))
                same = all(sha256_of(restored / rel) == s for rel, s in sums.items())
                row = {"path": path, "size_mib": mib, "files": ns.files, "push_s": round(push["seconds"], 2),
                       "push_mb_s": round(push["bytes"] / 1e6 / push["seconds"], 1),
                       "push_rss_before_mib": round(push["rss_before_mib"], 1),
                       "push_peak_rss_mib": round(push["peak_rss_mib"], 1),
                       "restore_s": round(pull["seconds"], 2),
                       "restore_mb_s": round(pull["bytes"] / 1e6 / pull["seconds"], 1),
                       "restore_peak_rss_mib": round(pull["peak_rss_mib"], 1), "round_trip_identical": same}
                if path == "xet":
                    row["xorb_mib"] = round(sent / (1 << 20), 1)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
                shutil.rmtree(restored, ignore_errors=True)
                shutil.rmtree(tmp / f"hf-{run}", ignore_errors=True)
            shutil.rmtree(save, ignore_errors=True)
    finally:
        hub_proc.terminate()
        hub_proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    spread = {p: [r["push_peak_rss_mib"] for r in rows if r["path"] == p] for p in ns.paths}
    result = {"repo": REPO, "paths": ns.paths, "runs": rows,
              "push_peak_rss_spread_mib": {p: round(max(v) - min(v), 1) for p, v in spread.items()},
              "all_identical": all(r["round_trip_identical"] for r in rows), "load_average_before": load_before}
    benchlib.write("hub_push.json", result)
    return 0 if result["all_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
