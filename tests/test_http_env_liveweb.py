"""The LiveWeb-Arena bridge against a stand-in checkout (tests/fakes/liveweb_standin: an ``Actor``
with the real reset/step/stop signatures and response shapes, at the 350b4ff text-action protocol),
served by the real env server and played by the real generate function: the stop action's own
reward is 0.0, and the bridge's terminal hook validates its answers into the episode's reward."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import ROOT
from tests.fakes.http_env import env_server, run_generate, slime_args, write_chatml_bpe
from tests.fakes.http_faults import ScriptedSGLang
from trainstack.errors import ConfigErrors
from trainstack.tiny.sample import Sample

STANDIN = ROOT / "tests" / "fakes" / "liveweb_standin"


@pytest.fixture
def validator_env(monkeypatch):
    monkeypatch.setenv("VALIDATOR_BASE_URL", "http://validator.invalid/v1")
    monkeypatch.setenv("VALIDATOR_API_KEY", "not-a-real-key")


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    return d, write_chatml_bpe(d, ['{"action": {"type": "goto", "params": {"url": "https://prices.example/item/3"}}}',
                                   "Task: what does item 3 cost? Item 3 costs 21 coins."])


def actions(tok, texts):
    it = iter(texts)

    def reply(_req):
        text = next(it)
        ids = tok.encode(text + "<|im_end|>", add_special_tokens=False).ids
        return ids, [-0.1] * len(ids), text, "stop"

    return reply


def goto(n):
    return json.dumps({"action": {"type": "goto", "params": {"url": f"https://prices.example/item/{n}"}}})


def stop(answer):
    return json.dumps({"action": {"type": "stop", "params": {"format": "json", "final": {"answers": {"answer1": answer}}}}})


def play(bpe, turns, *, task=None, reward="sum"):
    from trainstack.http_env.liveweb import make_env

    d, tok = bpe
    env = make_env({"root": str(STANDIN)})
    with env_server(env) as (url, store), ScriptedSGLang(actions(tok, turns)) as llm:
        args = slime_args(url, llm.port, d, max_turns=4, max_tokens_per_turn=None, reward=reward)
        out = run_generate(args, Sample(prompt="liveweb", metadata=task or {"task_id": 3, "seed": 11}),
                           {"max_new_tokens": 1000})
    return out, env, store


def test_the_stop_action_is_validated_by_the_terminal_hook(bpe, validator_env):
    out, env, store = play(bpe, [goto(3), stop("21")])
    meta = out.metadata["http_env_episode"]
    assert out.status == Sample.Status.COMPLETED
    assert meta["rewards"] == [0.1, 0.0]  # LiveWeb's stop action itself carries no reward
    assert meta["validation"]["reward"] == 2.0 and meta["validation"]["score"] == 1.0
    assert meta["validation"]["hook"] == "trainstack.http_env.liveweb.validate_stop_answer"
    assert out.reward == pytest.approx(2.1)  # sum: shaping + the validated terminal reward
    assert env.actor._episodes == {} and env.actor.stopped  # the session's close stopped the episode
    assert store.sessions == {}


def test_a_wrong_or_unsupported_answer_is_not_rewarded(bpe, validator_env):
    out, _, _ = play(bpe, [goto(3), stop("22")])
    assert out.metadata["http_env_episode"]["validation"]["score"] == 0.0 and out.reward == pytest.approx(0.1)
    out, _, _ = play(bpe, [stop("21")])  # answered without visiting the page: no ground truth was collected
    v = out.metadata["http_env_episode"]["validation"]
    assert v["score"] == 0.0 and "never visited" in json.dumps(v) and out.reward == 0.0


@pytest.mark.parametrize("mode,want", [("last", 2.0), ("terminal", 2.0), ("sum", 2.1)])
def test_reward_modes_use_the_verdict(bpe, validator_env, mode, want):
    out, _, _ = play(bpe, [goto(3), stop("21")], reward=mode)
    assert out.reward == pytest.approx(want)


def test_an_episode_cut_by_the_turn_limit_gets_no_terminal_reward(bpe, validator_env):
    from trainstack.http_env.liveweb import make_env

    d, tok = bpe
    env = make_env({"root": str(STANDIN)})
    with env_server(env) as (url, _), ScriptedSGLang(actions(tok, [goto(3), goto(3)])) as llm:
        for mode, want in (("terminal", 0.0), ("sum", 0.2)):
            args = slime_args(url, llm.port, d, max_turns=1, max_tokens_per_turn=None, reward=mode)
            out = run_generate(args, Sample(prompt="liveweb", metadata={"task_id": 3}), {"max_new_tokens": 1000})
            assert out.status == Sample.Status.TRUNCATED and out.reward == pytest.approx(want - (0.1 if mode == "sum" else 0))


def test_a_validator_failure_fails_the_sample_instead_of_scoring_zero(bpe, monkeypatch):
    monkeypatch.delenv("VALIDATOR_BASE_URL", raising=False)
    out, _, _ = play(bpe, [goto(3), stop("21")])
    assert out.status == Sample.Status.FAILED and out.remove_sample
    assert "VALIDATOR_BASE_URL" in out.metadata["http_env_episode"]["errors"][0]


def test_a_task_without_id_or_seed_is_refused(bpe, validator_env):
    out, env, _ = play(bpe, [], task={"other": 1})
    assert out.status == Sample.Status.FAILED and "HTTP 400" in out.metadata["http_env_episode"]["errors"][0]
    assert env.actor._episodes == {}


def test_a_checkout_past_the_text_action_protocol_is_refused(tmp_path):
    from trainstack.http_env.liveweb import make_env

    root = tmp_path / "liveweb-arena"
    shutil.copytree(STANDIN, root)
    (root / "liveweb_arena" / "core" / "agent_policy.py").unlink()
    with pytest.raises(ConfigErrors, match="526f951") as e:
        make_env({"root": str(root)})
    assert "350b4ff" in str(e.value)
    with pytest.raises(ConfigErrors, match="no such option"):
        make_env({"root": str(STANDIN), "browser": "firefox"})
