"""Episodes at the env server's session limit wait (503 + ``Retry-After``) instead of failing after a
few retries, bounded by ``capacity_wait_s``: run through slime's ``generate_and_rm_group``, which
plays a group's samples concurrently."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.fakes.http_env import env_server, write_chatml_bpe
from tests.fakes.http_env_slime import ScriptedGenerate, load_slime, run_group, slime_args
from trainstack.http_env.envs import Started, Stepped

PLUGIN = "trainstack_plugins.http_env.generate.generate"


class SlowEnv:
    """One step per episode, holding its session for ``hold_s``."""

    name = "slow"
    default_terminal_hook = None

    def __init__(self, hold_s: float):
        self.hold_s = hold_s
        self.open = self.peak = 0

    async def start(self, task):
        self.open += 1
        self.peak = max(self.peak, self.open)
        return Started({}, "Say ok.")

    async def step(self, handle, action):
        await asyncio.sleep(self.hold_s)
        return Stepped(None, reward=1.0, done=True)

    async def close(self, handle):
        self.open -= 1


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    return d, write_chatml_bpe(d, ["Say ok.", "ok"])


def play_group(tok, tmp_path, env, n, **settings):
    load_slime()
    from slime.utils.types import Sample

    d, bpe = tok
    ids = bpe.encode("ok<|im_end|>", add_special_tokens=False).ids
    with env_server(env, max_sessions=1) as (url, _), \
            ScriptedGenerate(lambda r: (ids, [-0.1] * len(ids), "ok", "stop")) as llm:
        cfg = tmp_path / "http_env.yaml"
        cfg.write_text(json.dumps({"http_env": {"url": url, "max_turns": 1, "timeout_s": 10, "retries": 1,
                                                "backoff_s": 0.05, **settings}}))
        args = slime_args(["--hf-checkpoint", str(d), "--custom-generate-function-path", PLUGIN,
                           "--rollout-max-response-len", "50", "--n-samples-per-prompt", str(n)],
                          custom_config=cfg, sglang_router_port=llm.port)
        t0 = time.monotonic()
        out = run_group(args, [Sample(prompt="p", index=i, group_index=0) for i in range(n)])
    return out, time.monotonic() - t0, Sample


def test_a_group_larger_than_max_sessions_waits_for_sessions_and_all_complete(tok, tmp_path):
    env = SlowEnv(hold_s=0.3)
    out, _, Sample = play_group(tok, tmp_path, env, 3)
    assert [s.status for s in out] == [Sample.Status.COMPLETED] * 3, [s.metadata["http_env_episode"] for s in out]
    assert env.peak == 1  # the server's limit held
    meta = [s.metadata["http_env_episode"] for s in out]
    assert sum(m["capacity_waits"] for m in meta) >= 2 and all(m["retries"] == 0 for m in meta)
    assert sum(m["capacity_wait_s"] for m in meta) >= 2.0  # each wait is the server's Retry-After (1 s)


def test_waiting_for_a_full_server_is_bounded_by_capacity_wait_s(tok, tmp_path):
    env = SlowEnv(hold_s=2.5)
    out, seconds, Sample = play_group(tok, tmp_path, env, 2, capacity_wait_s=0.5)
    statuses = sorted(s.status.value for s in out)
    assert statuses == ["completed", "failed"]
    failed = next(s for s in out if s.status == Sample.Status.FAILED)
    assert failed.remove_sample and "still at capacity after waiting capacity_wait_s=0.5" in \
        failed.metadata["http_env_episode"]["status_reason"]
    assert seconds < 10
