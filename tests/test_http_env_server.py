"""The env server's protocol rules over real HTTP (FastAPI + uvicorn), and `trainstack env serve`."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import ROOT
from tests.fakes.http_env import CountingEnv, env_server
from trainstack.http_env import protocol as P
from trainstack.http_env.sessions import SessionStore

TASK = {"metadata": {"start": 3, "adds": [4, 2]}}


def post(url, path, body):
    return httpx.post(url + path, json=body, timeout=5)


def test_step_replay_turn_order_and_close():
    env = CountingEnv()
    with env_server(env) as (url, store):
        s = post(url, P.START, {"request_id": "s1", "task": TASK}).json()
        sid = s["session_id"]
        assert s["observation"] == "3+4" and not s["replayed"]
        assert post(url, P.START, {"request_id": "s1", "task": TASK}).json() == {**s, "replayed": True}
        first = post(url, P.STEP, {"request_id": "a", "session_id": sid, "turn": 0, "action": "7"})
        assert first.json()["reward"] == 1.0 and first.json()["observation"] == "+2"
        again = post(url, P.STEP, {"request_id": "a", "session_id": sid, "turn": 0, "action": "7"})
        assert again.json() == {**first.json(), "replayed": True} and env.applied == ["7"]
        # the same action under a new request id is refused: it would be applied twice
        dup = post(url, P.STEP, {"request_id": "b", "session_id": sid, "turn": 0, "action": "7"})
        assert dup.status_code == P.CONFLICT and "next turn is 1" in dup.json()["error"]
        last = post(url, P.STEP, {"request_id": "c", "session_id": sid, "turn": 1, "action": "9"}).json()
        assert last["done"] and last["validation"] is None
        after = post(url, P.STEP, {"request_id": "d", "session_id": sid, "turn": 2, "action": "1"})
        assert after.status_code == P.CONFLICT and "ended" in after.json()["error"]
        assert post(url, P.CLOSE, {"request_id": "x", "session_id": sid}).json() == {"closed": True}
        assert post(url, P.CLOSE, {"request_id": "y", "session_id": sid}).json() == {"closed": False}
        gone = post(url, P.STEP, {"request_id": "e", "session_id": sid, "turn": 2, "action": "1"})
        assert gone.status_code == P.NOT_FOUND and "closed" in gone.json()["error"]
        bad = post(url, P.STEP, {"request_id": "f", "session_id": sid, "turn": "1", "action": "1"})
        assert bad.status_code == P.BAD_REQUEST and "turn" in bad.json()["error"]
        assert httpx.get(url + P.HEALTH).json()["counters"]["replays"] == 2
    assert env.closed == 1


def test_concurrency_limit_and_close_by_start_request_id():
    env = CountingEnv()
    with env_server(env, max_sessions=2) as (url, store):
        ids = [post(url, P.START, {"request_id": f"s{i}", "task": TASK}).json()["session_id"] for i in range(2)]
        full = post(url, P.START, {"request_id": "s3", "task": TASK})
        assert full.status_code == P.AT_CAPACITY and full.headers["retry-after"] == "1"
        assert post(url, P.CLOSE, {"request_id": "c", "start_request_id": "s0"}).json() == {"closed": True}
        assert ids[0] not in store.sessions
        assert post(url, P.START, {"request_id": "s3", "task": TASK}).status_code == 200
        health = httpx.get(url + P.HEALTH).json()
        assert health["sessions"] == 2 and health["max_sessions"] == 2 and health["env"] == "chain_sum"


def test_idle_sessions_expire_after_the_ttl():
    now = [0.0]

    async def scenario():
        env = CountingEnv()
        store = SessionStore(env, max_sessions=4, session_ttl_s=10, clock=lambda: now[0])
        a = await store.start("a", TASK)
        b = await store.start("b", TASK)
        now[0] = 6.0
        await store.step("r", b["session_id"], 0, "7")  # b was used: its idle time restarts
        now[0] = 12.0
        assert await store.reap() == 1 and env.closed == 1
        with pytest.raises(Exception, match="TTL"):
            await store.step("r2", a["session_id"], 0, "7")
        assert b["session_id"] in store.sessions
        now[0] = 30.0
        assert await store.reap() == 1 and store.sessions == {}

    asyncio.run(scenario())


def test_trainstack_env_serve_listens_answers_and_stops_on_sigterm(tmp_path):
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen([sys.executable, "-m", "trainstack.cli.main", "env", "serve", "chain_sum", "--port", "0",
                             "--max-sessions", "3", "--ready-file", str(ready)], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        assert info["pid"] == proc.pid
        health = httpx.get(info["url"] + P.HEALTH, timeout=5).json()
        assert health["env"] == "chain_sum" and health["max_sessions"] == 3 and health["protocol"] == P.VERSION
        sid = post(info["url"], P.START, {"request_id": "s", "task": TASK}).json()["session_id"]
        assert sid
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert "serving env chain_sum" in out and "Traceback" not in out


def test_bad_serve_options_are_one_message_and_exit_2(tmp_path):
    res = subprocess.run([sys.executable, "-m", "trainstack.cli.main", "env", "serve", "chain_sum", "--option", "turns=9",
                          "--port", "0"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "serve.options.turns" in res.stderr and "Traceback" not in res.stderr
    res = subprocess.run([sys.executable, "-m", "trainstack.cli.main", "env", "serve", "nowhere"], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "NAME" in res.stderr and "chain_sum, liveweb" in res.stderr
