"""The generate function against a real env server and inference server behind a fault-injecting proxy.

Lost replies, 4xx, 5xx bursts, failing starts and servers that never answer, as production has
them (a TCP proxy drops, replaces or withholds real responses); the env counts what it applied.
"""
from __future__ import annotations

import time

import pytest

from tests.fakes.http_env import CountingEnv, digit_answers, env_server, run_generate, slime_args
from tests.fakes.http_faults import Fault, FaultProxy, ScriptedSGLang
from trainstack.http_env import protocol as P
from trainstack.http_env.settings import parse_settings
from trainstack.tiny import hf_tokenizer
from trainstack.tiny.sample import Sample

TASK = {"start": 3, "adds": [4, 2]}  # "3+4" -> 7, "+2" -> 9


@pytest.fixture
def tok(tmp_path):
    return hf_tokenizer.write(tmp_path / "tok")


def sample() -> Sample:
    return Sample(prompt="chain_sum", metadata=dict(TASK))


def episode(env, tok, faults, answers=("7", "9"), gen_faults=(), **settings):
    """One generate() call through proxies in front of both servers; returns (sample, env proxy, store, seconds)."""
    with env_server(env) as (url, store), ScriptedSGLang(digit_answers(hf_tokenizer.vocab(), list(answers))) as llm, \
            FaultProxy(url, list(faults)) as env_proxy, FaultProxy(llm.url, list(gen_faults)) as gen_proxy:
        port = int(gen_proxy.url.rsplit(":", 1)[1])
        t0 = time.monotonic()
        out = run_generate(slime_args(env_proxy.url, port, tok, **settings), sample())
        return out, env_proxy, store, time.monotonic() - t0


def test_a_dropped_step_reply_is_retried_once_and_the_action_applied_once(tok):
    env = CountingEnv()
    out, proxy, store, _ = episode(env, tok, [Fault(P.STEP, "drop")])
    assert out.status == Sample.Status.COMPLETED
    assert env.applied == ["7", "9"]  # the first step reached the env once, though its reply was lost
    assert proxy.log.count((P.STEP, "dropped")) == 1 and proxy.count(P.STEP) == 3  # 2 steps + 1 retry
    meta = out.metadata["http_env_episode"]
    assert meta["retries"] == 1 and meta["per_turn"][0].get("replayed") is True
    assert store.counters["replays"] == 1 and store.counters["steps"] == 2
    assert out.reward == 2.0 and meta["rewards"] == [1.0, 1.0]


def test_a_step_applied_but_answered_502_is_replayed_not_repeated(tok):
    env = CountingEnv()
    out, proxy, store, _ = episode(env, tok, [Fault(P.STEP, "status_after", status=502)])
    assert out.status == Sample.Status.COMPLETED and env.applied == ["7", "9"]
    assert store.counters["replays"] == 1


def test_4xx_is_not_retried_and_the_session_is_still_closed(tok):
    env = CountingEnv()
    out, proxy, store, _ = episode(env, tok, [Fault(P.STEP, "status", status=409, times=5)])
    assert proxy.count(P.STEP) == 1  # one attempt, no retry
    assert out.status == Sample.Status.FAILED and out.remove_sample and out.reward == 0.0
    assert "HTTP 409" in out.metadata["http_env_episode"]["errors"][0]
    assert set(out.loss_mask) == {0}  # a failed episode is no evidence about the policy
    assert proxy.count(P.CLOSE) == 1 and store.sessions == {} and env.closed == 1


def test_a_bad_task_is_a_400_answered_once_and_opens_nothing(tok):
    env = CountingEnv()
    with env_server(env) as (url, store), ScriptedSGLang(digit_answers(hf_tokenizer.vocab(), [])) as llm, \
            FaultProxy(url) as proxy:
        out = run_generate(slime_args(proxy.url, llm.port, tok), Sample(prompt="x", metadata={"task_id": 10**6}))
    assert out.status == Sample.Status.FAILED and "HTTP 400" in out.metadata["http_env_episode"]["errors"][0]
    assert proxy.count(P.START) == 1 and env.opened == 0 and store.sessions == {}
    assert out.tokens and out.response_length == 0  # the task's prompt, so the sample still has tokens


def test_5xx_bursts_are_retried_with_backoff_within_the_bound(tok):
    env = CountingEnv()
    out, proxy, _, secs = episode(env, tok, [Fault(P.STEP, "status", status=503, times=2)], retries=3, backoff_s=0.1)
    assert out.status == Sample.Status.COMPLETED and env.applied == ["7", "9"]
    assert out.metadata["http_env_episode"]["retries"] == 2
    assert secs >= 0.1 + 0.2  # the backoff doubles

    env = CountingEnv()
    out, proxy, store, _ = episode(env, tok, [Fault(P.STEP, "status", status=503, times=100)], retries=2)
    assert proxy.count(P.STEP) == 3  # 1 + 2 retries, then the sample fails
    assert out.status == Sample.Status.FAILED and "gave up after 3 attempts" in out.metadata["http_env_episode"]["errors"][0]
    assert env.applied == [] and store.sessions == {}


def test_a_failing_start_leaks_no_session(tok):
    # every start reply is lost although the server opened the session: the retries get the same
    # session back (one episode, not three), and close by the start's request id frees it
    env = CountingEnv()
    out, proxy, store, _ = episode(env, tok, [Fault(P.START, "drop", times=100)], retries=2)
    assert out.status == Sample.Status.FAILED
    assert proxy.count(P.START) == 3 and env.opened == 1 and store.counters["replays"] == 2
    assert store.sessions == {} and env.closed == 1

    # the env fails while opening (a crashed browser): 500, retried; nothing stays registered
    env = CountingEnv(fail_starts=100)
    out, proxy, store, _ = episode(env, tok, [], retries=1)
    assert out.status == Sample.Status.FAILED and "HTTP 500" in out.metadata["http_env_episode"]["errors"][0]
    assert proxy.count(P.START) == 2 and store.sessions == {} and store.pending == 0

    # one crash, then the retry opens the episode: the sample completes
    env = CountingEnv(fail_starts=1)
    out, _, store, _ = episode(env, tok, [], retries=1)
    assert out.status == Sample.Status.COMPLETED and env.opened == 1 and store.sessions == {}


@pytest.mark.parametrize("where", ["env", "inference"])
def test_a_server_that_never_answers_fails_the_sample_within_the_configured_timeout(tok, where):
    settings = {"timeout_s": 0.4, "generate_timeout_s": 0.4, "retries": 1, "backoff_s": 0.05}
    env = CountingEnv()
    env_faults = [Fault(P.START, "hang", times=100)] if where == "env" else []
    gen_faults = [Fault("/generate", "hang", times=100)] if where == "inference" else []
    out, proxy, store, secs = episode(env, tok, env_faults, gen_faults=gen_faults, **settings)
    assert out.status == Sample.Status.FAILED and out.remove_sample
    bound = parse_settings({"url": "http://x", **settings}).call_bound_s()
    # the failing call, then close (one retry at most) against the same silent server
    assert secs < bound + 2 * settings["timeout_s"] + 1.0, secs
    assert "gave up after 2 attempts" in out.metadata["http_env_episode"]["errors"][0]
    if where == "inference":
        assert store.sessions == {} and env.closed == 1  # the env session is closed all the same


def test_the_episode_timeout_bounds_a_slow_episode(tok):
    env = CountingEnv()
    out, _, store, secs = episode(env, tok, [Fault(P.STEP, "hang", times=100)], timeout_s=30.0,
                                  episode_timeout_s=0.5, retries=0)
    assert out.status == Sample.Status.FAILED and "episode_timeout_s" in out.metadata["http_env_episode"]["errors"][0]
    assert secs < 30


def test_concurrent_episodes_wait_for_a_full_server_and_all_complete(tok):
    """slime runs many episodes at once: starts beyond max_sessions get 503 + Retry-After and wait."""
    import asyncio

    from trainstack_plugins.http_env.generate import generate
    from tests.fakes.http_env import SAMPLING

    inverse = {i: c for c, i in hf_tokenizer.vocab().items()}

    def solve(req):  # "3+4=" -> 7, "3+4=7+2=" -> 9: the running sum, answered right
        text = "".join(inverse[i] for i in req["input_ids"])
        a, b = text.rstrip("=").split("=")[-1].split("+")
        answer = str(int(a) + int(b))
        return [hf_tokenizer.vocab()[answer]], [-0.1], answer, "length"

    env = CountingEnv()
    with env_server(env, max_sessions=2) as (url, store), ScriptedSGLang(solve) as llm:
        args = slime_args(url, llm.port, tok, retries=8, backoff_s=0.02)

        async def many():
            samples = [Sample(prompt="c", metadata={"start": i % 3, "adds": [1, 2]}) for i in range(8)]
            return await asyncio.gather(*(generate(args, s, dict(SAMPLING)) for s in samples))

        outs = asyncio.run(many())
    assert [o.status for o in outs] == [Sample.Status.COMPLETED] * 8
    assert all(o.reward == 2.0 for o in outs) and len(env.applied) == 16
    # some starts met a full server (503 + Retry-After) and waited, without using up their retries
    assert sum(o.metadata["http_env_episode"]["capacity_waits"] for o in outs) > 0
    assert sum(o.metadata["http_env_episode"]["retries"] for o in outs) == 0
    assert store.sessions == {} and env.opened == env.closed == 8
