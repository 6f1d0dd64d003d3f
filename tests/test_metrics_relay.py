"""A Lium run's metrics reach the run dir the user compares (trainstack/metrics/relay.py): the worker sends what
the pod's metrics.jsonl gained with each lease renewal, the commander keeps a copy (it outlives the pod), and
`trainstack status` / `compare` / a waited sweep pull what the submit host's copy lacks. Run against the
commander's real HTTP API (FastAPI's test client), the real Worker and the real pull."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ADMIN = "admin-token-for-these-tests-0123456789"
WORKER = "worker-token-for-these-tests-0123456"


class Client:
    """The commander client's interface over FastAPI's test client."""

    def __init__(self, tc, token: str):
        self.tc, self.headers = tc, {"Authorization": f"Bearer {token}"}

    def _answer(self, r):
        from trainstack.commander.client import CommanderError

        if r.status_code != 200:
            raise CommanderError(r.status_code, str(r.json().get("detail")))
        return r.json()

    def get(self, path: str, **_kw):
        return self._answer(self.tc.get(path, headers=self.headers))

    def post(self, path: str, body=None, **_kw):
        return self._answer(self.tc.post(path, json=body or {}, headers=self.headers))


class Setup:
    """A commander with run `r` leased to a worker on a 'pod' (a directory), and the submit host's run dir."""

    def __init__(self, tmp: Path, mp: pytest.MonkeyPatch):
        from fastapi.testclient import TestClient

        from trainstack.commander.api import create_app
        from trainstack.commander.reconciler import CommanderConfig
        from trainstack.commander.store import Store
        from trainstack.launch import lium_status
        from trainstack.launch.lium_worker import Worker

        self.store = Store(tmp / "c.db")
        self.tc = TestClient(create_app(self.store, CommanderConfig(public_url="http://127.0.0.1:9"), ADMIN,
                                        lambda run_id: WORKER))
        self.admin = Client(self.tc, ADMIN)
        self.admin.post("/v1/runs", {"run_id": "r", "spec": {"run_id": "r"},
                                     "settings": {"gpu_type": "RTX4090", "gpu_count": 1, "volume": "auto"}})
        with self.store.tx() as db:
            Store.update(db, "r", phase="provisioning")
        self.pod = tmp / "pod"
        self.pod.mkdir()
        self.host = tmp / "host"
        self.host.mkdir()
        (self.host / "lium.json").write_text(json.dumps({"run_id": "r"}))
        mp.setattr(lium_status, "_client", lambda run_dir: (self.admin, None))
        self.worker = self.new_worker()

    def new_worker(self):
        """The worker of the next epoch (the commander replaced the pod: the old lease is gone)."""
        from trainstack.launch.lium_worker import Worker

        self.epoch = getattr(self, "epoch", -1) + 1
        with self.store.tx() as db:
            db.execute("UPDATE runs SET epoch=?, lease_holder=NULL, phase='provisioning' WHERE run_id='r'",
                       (self.epoch,))
        w = object.__new__(Worker)
        w.run_id, w.epoch, w.holder, w.run_dir, w.metrics_at = "r", self.epoch, f"pod-{self.epoch}/1", self.pod, -1
        w.client = Client(self.tc, WORKER)
        w.client.post("/v1/runs/r/lease/acquire", {"epoch": self.epoch, "holder": w.holder})
        return w

    def pull(self) -> None:
        from trainstack.launch.lium_status import pull_metrics

        pull_metrics(self.host)

    def pod_bytes(self) -> bytes:
        p = self.pod / "metrics.jsonl"
        return p.read_bytes() if p.exists() else b""

    def host_bytes(self) -> bytes:
        p = self.host / "metrics.jsonl"
        return p.read_bytes() if p.exists() else b""


def line(step: int, value: float) -> bytes:
    return (json.dumps({"step_key": "rollout/step", "step": step, "metrics": {"rollout/raw_reward": value,
                                                                             "rollout/step": step}}) + "\n").encode()


steps = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 30)),  # the trainer logs rollouts
    st.tuples(st.just("rewrite"), st.integers(0, 30)),  # a resumed trainer drops the lines after its checkpoint
    st.tuples(st.just("renew"), st.just(0)),  # a heartbeat
    st.tuples(st.just("new_worker"), st.just(0)),  # the pod replaced, or the trainer restarted
    st.tuples(st.just("pull"), st.just(0)),  # trainstack status / compare on the submit host
), max_size=25)


@settings(max_examples=40, deadline=None)
@given(steps)
def test_the_submit_hosts_copy_ends_equal_to_the_pods_file(ops):
    from trainstack.metrics import relay

    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        mp.setattr(relay, "CHUNK_BYTES", 300)  # a few lines a chunk: chunking is exercised
        s = Setup(Path(d), mp)
        step = 0
        for op, n in ops:
            if op == "append":
                with open(s.pod / "metrics.jsonl", "ab") as f:
                    for _ in range(n):
                        f.write(line(step, step / 100))
                        step += 1
            elif op == "rewrite":
                kept = s.pod_bytes().splitlines(keepends=True)[:n]
                (s.pod / "metrics.jsonl").write_bytes(b"".join(kept))
                step = len(kept)
            elif op == "renew":
                s.worker.renew()
            elif op == "new_worker":
                s.worker = s.new_worker()
            else:
                s.pull()
                assert s.host_bytes().endswith(b"\n") or not s.host_bytes()  # whole lines only, at every pull
        s.worker.flush_metrics()  # what the worker does before its last report
        s.pull()
        assert s.host_bytes() == s.pod_bytes()
        s.tc.close()
        s.store.close()


def test_the_copy_outlives_the_pod_and_compare_reads_it(tmp_path, monkeypatch):
    """After the worker's last report the pod is gone; status and compare still get every rollout's reward."""
    s = Setup(tmp_path, monkeypatch)
    (s.pod / "metrics.jsonl").write_bytes(b"".join(line(i, i / 10) for i in range(5)))
    s.worker.report("finished", 0, "done")
    import shutil

    shutil.rmtree(s.pod)  # the pod and its volume are gone
    s.pull()
    from trainstack.metrics import read_local

    series = read_local(s.host, "jsonl").series["rollout/raw_reward"]
    assert [v for _, v in series] == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert s.admin.get("/v1/runs/r/metrics?offset=0")["size"] == len(s.host_bytes())
