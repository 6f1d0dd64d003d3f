"""Commander request latency with 1,000 runs whose workers renew their lease every 10 s (target:
p99 < 50 ms on 2 cores; `BENCH_RUNS` sets the count, 200 in earlier records). The real server (`trainstack commander serve`, uvicorn, SQLite WAL with
synchronous=FULL) in a subprocess; the simulated workers (threads) acquire their lease, then
renew with progress every 10 s (jittered) for DURATION seconds, while an operator polls
`GET /v1/runs` every 2 s. The reconciler runs as usual (tick 1 s over every run); its Lium is
unreachable, so no pod is rented (the runs are put in the `starting` phase directly in the
database, as after a worker start).

Results: benchmarks/results/commander_latency.json. Everything (database, log) lives in a temp dir
removed at the end, and the server is stopped whatever happens.
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainstack.commander.client import CommanderClient  # noqa: E402
from trainstack.commander.server import worker_token_for  # noqa: E402

import benchlib  # noqa: E402

TOKEN = "bench-admin-token-0123456789abcdef"
QUICK = benchlib.quick()  # short mode: 20 runs for 8 s (benchmarks/benchlib.py)
RUNS = int(os.environ.get("BENCH_RUNS", 20 if QUICK else 1000))
PERIOD = float(os.environ.get("BENCH_PERIOD", 2.0 if QUICK else 10.0))
DURATION = float(os.environ.get("BENCH_DURATION", 8.0 if QUICK else 90.0))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(db: Path, port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "TRAINSTACK_COMMANDER_TOKEN": TOKEN, "LIUM_API_KEY": "unused",
           "LIUM_BASE_URL": "http://127.0.0.1:9", "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "trainstack", "commander", "serve", "--db", str(db), "--port", str(port),
            "--lease-ttl", "30", "--heartbeat", "10", "--worker-deadline", "20", "--tick", "1", "--probe", "15",
            "--backoff", "100000", "--start-timeout", "100000"]
    proc = subprocess.Popen(argv, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    c = CommanderClient(f"http://127.0.0.1:{port}", TOKEN)
    for _ in range(300):
        try:
            c.get("/v1/health", timeout=1)
            return proc
        except Exception:
            time.sleep(0.1)
    raise RuntimeError(log.read_text())


def main() -> int:
    """The run in a temp dir removed at the end, the server stopped whatever happens: nothing left behind."""
    with tempfile.TemporaryDirectory(prefix="cmdbench-") as tmp:
        procs: list[subprocess.Popen] = []
        try:
            return measure(Path(tmp), procs)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


def measure(tmp: Path, procs: list[subprocess.Popen]) -> int:
    db, port, log = tmp / "c.db", free_port(), tmp / "commander.log"
    proc = start(db, port, log)
    procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    admin = CommanderClient(url, TOKEN)
    for i in range(RUNS):
        admin.post("/v1/runs", {"run_id": f"run-{i:03d}", "spec": {"run_id": f"run-{i:03d}", "spec_version": 1},
                                "settings": {"gpu_type": "H100", "gpu_count": 8}})
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait()
    with sqlite3.connect(db) as con:  # as if each run's worker had just been started on its pod
        con.execute("UPDATE runs SET phase='starting', epoch=1")
    con.close()
    proc = start(db, port, log)
    procs.append(proc)
    tokens = worker_token_for(TOKEN)
    lat: dict[str, list[float]] = {"acquire": [], "renew": [], "list": []}
    errors: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def timed(kind: str, fn) -> None:
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as ex:  # noqa: BLE001
            with lock:
                errors.append(f"{kind}: {ex}")
            return
        with lock:
            lat[kind].append(time.perf_counter() - t0)

    def worker(i: int) -> None:
        rid = f"run-{i:03d}"
        c = CommanderClient(url, tokens(rid), timeout=30)
        time.sleep(random.uniform(0, PERIOD))
        timed("acquire", lambda: c.post(f"/v1/runs/{rid}/lease/acquire", {"epoch": 1, "holder": f"w{i}"}))
        step = 0
        while not stop.wait(PERIOD + random.uniform(-0.5, 0.5)):
            step += 1
            timed("renew", lambda: c.post(f"/v1/runs/{rid}/lease/renew", {
                "epoch": 1, "holder": f"w{i}", "progress": {"last_checkpoint": step, "reward": 0.5, "state": "running"}}))

    def operator() -> None:
        while not stop.wait(2.0):
            timed("list", lambda: admin.get("/v1/runs"))

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(RUNS)]
    threads.append(threading.Thread(target=operator, daemon=True))
    t0 = time.time()
    for t in threads:
        t.start()
    time.sleep(DURATION)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait()

    with lock:  # a worker still inside a request when the others were joined adds nothing now
        lat = {k: list(v) for k, v in lat.items()}
    every = lat["acquire"] + lat["renew"] + lat["list"]
    out = {"runs": RUNS, "period_s": PERIOD, "duration_s": round(time.time() - t0, 1), "cpus": os.cpu_count(),
           "all": summary(every), **{k: summary(v) for k, v in lat.items()}, "errors": errors[:20],
           "n_errors": len(errors), "target_p99_ms": 50}
    benchlib.write("commander_latency.json", out)
    return 0 if not errors and (QUICK or out["all"]["p99_ms"] < 50) else 1


def summary(xs: list[float]) -> dict:
    """Percentiles of one list of latencies, taken once (each within the list's min and max)."""
    xs = sorted(xs)
    if not xs:
        return {"n": 0}
    q = statistics.quantiles(xs, n=100, method="inclusive") if len(xs) > 1 else [xs[0]] * 99
    return {"n": len(xs), "p50_ms": round(q[49] * 1000, 2), "p95_ms": round(q[94] * 1000, 2),
            "p99_ms": round(q[98] * 1000, 2), "max_ms": round(xs[-1] * 1000, 2)}


if __name__ == "__main__":
    sys.exit(main())
