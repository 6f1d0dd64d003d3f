"""The LiveWeb bridge against the real liveweb-arena (the git bundle in ../shared/upstream, checked out
at 350b4ff in a temporary directory): its pure-Python parts (the task registry, the step-wise reward
calculator) run here; the browser-driven ``Actor`` is the stand-in checkout
(tests/fakes/liveweb_standin) with the real episode fields the bridge reads. And the documented
LiveWeb rows load in slime's own ``Dataset``.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.fakes.http_env import env_server, run_generate, slime_args, write_chatml_bpe
from tests.fakes.http_faults import ScriptedSGLang
from trainstack.http_env.envs import Started, Stepped
from trainstack.tiny.sample import Sample

STANDIN = ROOT / "tests" / "fakes" / "liveweb_standin"
BUNDLE = "liveweb-arena-78e5caa.bundle"
COMMIT = "350b4ff"


def _bundle() -> Path | None:
    for up in (ROOT.parent, ROOT.parent.parent):
        if (up / "shared" / "upstream" / BUNDLE).is_file():
            return up / "shared" / "upstream" / BUNDLE
    return None


@pytest.fixture(scope="module")
def liveweb_root(tmp_path_factory) -> Path:
    """A liveweb-arena checkout at 350b4ff, cloned from the bundle (CI has it; elsewhere: skip)."""
    bundle = _bundle()
    if bundle is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: ../shared/upstream/{BUNDLE} is missing (see ../shared/upstream/README.md)")
        pytest.skip(f"../shared/upstream/{BUNDLE} is not here (CI has it)")
    root = tmp_path_factory.mktemp("lwa") / "liveweb-arena"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(bundle), str(root)], check=True, timeout=120)
    subprocess.run(["git", "-C", str(root), "checkout", "-q", COMMIT], check=True, timeout=60)
    return root


def real_module(root: Path, rel: str):
    """One of liveweb-arena's stdlib-only modules, loaded from its file under a private name (the
    package's ``__init__`` imports the browser stack, Playwright)."""
    name = "lwa_real_" + rel.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, root / rel)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- rows: slime's Dataset ----------------------------------------------------------------------
def documented_row() -> dict:
    text = (ROOT / "docs" / "http_env.md").read_text()
    m = re.search(r"Data rows:\s*`(\{.*?\})`", text)
    assert m, "docs/http_env.md documents LiveWeb's data rows"
    return json.loads(m.group(1))


def test_documented_liveweb_rows_load_in_slimes_dataset(tmp_path):
    """slime's Dataset reads ``data[label_key]``: the liveweb preset must not name a label its rows lack."""
    from tests.fakes.http_env_slime import load_slime
    from trainstack.render.pipeline import build_from_overrides

    load_slime()
    from slime.utils.data import Dataset

    _, cmd = build_from_overrides(["env=liveweb", "model=qwen3-4B", "cluster=local_8xh100"])
    argv = cmd.argv

    def flag(name):
        return argv[argv.index(name) + 1] if name in argv else None

    rows = tmp_path / "train.jsonl"
    row = documented_row()
    rows.write_text("".join(json.dumps(r) + "\n" for r in (row, {**row, "metadata": {"task_id": 7}})))
    data = Dataset(str(rows), tokenizer=None, processor=None, max_length=None, prompt_key=flag("--input-key"),
                   label_key=flag("--label-key"), metadata_key=flag("--metadata-key") or "metadata")
    assert len(data) == 2 and data[0].prompt == row["prompt"] and data[0].metadata == row["metadata"]
    assert data[1].metadata == {"task_id": 7} and data[0].label is None


# --- seeds -----------------------------------------------------------------------------------
class RecordingActor:
    def __init__(self):
        self.resets: list[tuple] = []

    async def reset(self, task_id=None, seed=None):
        self.resets.append((task_id, seed))
        return {"episode_id": f"e{len(self.resets)}", "observation": "page", "info": {}}


def test_a_row_with_only_task_id_gets_its_variation_seed_not_a_random_one(liveweb_root):
    """Actor.reset draws ``random.randint`` when seed is None: the samples of a GRPO group (and a resumed
    run) would answer different tasks. The bridge passes the seed Actor.evaluate uses for a task id."""
    import asyncio

    from trainstack.http_env.liveweb import LiveWebEnv

    registry = real_module(liveweb_root, "liveweb_arena/core/task_registry.py")
    env = LiveWebEnv(RecordingActor(), str(liveweb_root))
    for task_id in (1, 10001, 123456):
        for _ in range(3):  # one group: every sample of the prompt
            asyncio.run(env.start({"metadata": {"task_id": task_id}}))
        want = registry.parse_task_id(task_id)["variation_seed"]
        assert env.actor.resets[-3:] == [(task_id, want)] * 3
    asyncio.run(env.start({"metadata": {"task_id": 5, "seed": 99}}))
    assert env.actor.resets[-1] == (5, 99)  # an explicit seed is kept


@settings(max_examples=30, deadline=None)
@given(task_id=st.integers(min_value=1, max_value=10 ** 6))
def test_every_task_id_maps_to_one_seed(liveweb_root, task_id):
    import asyncio

    from trainstack.http_env.liveweb import LiveWebEnv
    from trainstack.http_env.envs import TaskError

    env = LiveWebEnv(RecordingActor(), str(liveweb_root))
    try:
        asyncio.run(env.start({"metadata": {"task_id": task_id}}))
        asyncio.run(env.start({"metadata": {"task_id": task_id}}))
    except TaskError as e:  # beyond the registry's range: refused with liveweb-arena's own message
        assert "out of range" in str(e)
        return
    (a, sa), (b, sb) = env.actor.resets
    assert a == b == task_id and sa == sb == (task_id - 1) % 10000


# --- terminal verdicts: truncation, invalid episodes -----------------------------------------------
def _actor_class(liveweb_root: Path, *, cache_error_on: str | None = None, gt_system_error: bool = False):
    """The stand-in Actor with liveweb-arena's real StepwiseRewardCalculator (RewardConfig's penalties),
    and the real failure shapes: ``cache_error`` (step: done, ``failure_reason``, ``info.error``) and a
    ground-truth failure of type SYSTEM_ERROR (``GTCollector.is_system_error``)."""
    import importlib
    from types import SimpleNamespace

    from trainstack.http_env.liveweb import load_actor_class

    base = load_actor_class(str(STANDIN))
    standin = SimpleNamespace(**base.reset.__globals__)  # the stand-in env.py's names
    reward = real_module(liveweb_root, "liveweb_arena/core/reward.py")
    importlib.import_module("liveweb_arena.core.agent_policy")

    class SystemErrorGT(standin.GTCollector):
        def get_gt_for_subtask(self, subtask):
            return None

        def get_failure_reason(self, subtask):
            return "coingecko API: HTTP 502"

        def is_system_error(self, subtask):
            return True

    class Actor(base):
        async def reset(self, task_id=None, seed=None):
            resp = await super().reset(task_id, seed)
            ep = self._episodes[resp.episode_id]
            ep.reward_calculator = reward.StepwiseRewardCalculator()
            ep.failure_reason = None
            if gt_system_error:
                ep.gt_collector = SystemErrorGT("0")
            return resp

        async def step(self, action, episode_id=None):
            ep = self._episodes.get(episode_id)
            if ep is not None and cache_error_on and cache_error_on in action:
                ep.done, ep.failure_reason = True, "cache_error"  # env.py 350b4ff: _on_episode_navigation raised
                return standin.OpenEnvResponse(observation="Cache error: fetch failed", episode_id=episode_id,
                                               done=True, info={"error": {"type": "cache_error",
                                                                          "message": "fetch failed"}})
            resp = await super().step(action, episode_id)
            if ep is not None and ep.truncated:
                ep.failure_reason = "max_steps_reached"
            return resp

    return Actor, reward


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    return d, write_chatml_bpe(d, ['{"action": {"type": "goto", "params": {"url": "https://prices.example/item/3"}}}',
                                   "Task: what does item 3 cost? Item 3 costs 21 coins."])


def goto(n):
    return json.dumps({"action": {"type": "goto", "params": {"url": f"https://prices.example/item/{n}"}}})


def stop(answer):
    return json.dumps({"action": {"type": "stop", "params": {"format": "json", "final": {"answers": {"answer1": answer}}}}})


def play(bpe, actor, turns, max_turns=8):
    from trainstack.http_env.liveweb import LiveWebEnv

    d, tok = bpe
    it = iter(turns)

    def reply(_req):
        text = next(it)
        ids = tok.encode(text + "<|im_end|>", add_special_tokens=False).ids
        return ids, [-0.1] * len(ids), text, "stop"

    env = LiveWebEnv(actor, str(STANDIN))
    with env_server(env) as (url, store), ScriptedSGLang(reply) as llm:
        args = slime_args(url, llm.port, d, max_turns=max_turns, max_tokens_per_turn=None, reward="sum")
        out = run_generate(args, Sample(prompt="liveweb", metadata={"task_id": 3, "seed": 11}), {"max_new_tokens": 4000})
    assert store.sessions == {}
    return out


@pytest.fixture
def validator_env(monkeypatch):
    monkeypatch.setenv("VALIDATOR_BASE_URL", "http://validator.invalid/v1")
    monkeypatch.setenv("VALIDATOR_API_KEY", "not-a-real-key")


def test_an_episode_cut_at_liveweb_max_steps_gets_the_truncation_penalty(bpe, liveweb_root, validator_env):
    actor_cls, reward = _actor_class(liveweb_root)
    out = play(bpe, actor_cls(), [goto(1)] * 5)  # the stand-in's max_steps is 5: the 5th step truncates
    meta = out.metadata["http_env_episode"]
    penalty = reward.RewardConfig().max_steps_penalty
    assert out.status == Sample.Status.TRUNCATED and meta["validation"]["truncated"] is True
    assert meta["validation"]["reward"] == pytest.approx(penalty) and penalty < 0
    assert out.reward == pytest.approx(sum(meta["rewards"]) + penalty)


def test_a_cache_error_is_not_trained_on_as_the_agents_failure(bpe, liveweb_root, validator_env):
    actor_cls, _ = _actor_class(liveweb_root, cache_error_on="item/4")
    out = play(bpe, actor_cls(), [goto(3), goto(4)])
    assert out.status == Sample.Status.FAILED and out.remove_sample and set(out.loss_mask) == {0}
    assert out.reward == 0.0 and "cache_error" in out.metadata["http_env_episode"]["status_reason"]


def test_a_ground_truth_system_error_is_not_trained_on(bpe, liveweb_root, validator_env):
    actor_cls, _ = _actor_class(liveweb_root, gt_system_error=True)
    out = play(bpe, actor_cls(), [goto(3), stop("21")])
    reason = out.metadata["http_env_episode"]["status_reason"]
    assert out.status == Sample.Status.FAILED and out.remove_sample and set(out.loss_mask) == {0}
    assert "ground truth system error" in reason and "HTTP 502" in reason


# --- context: step (LiveWeb's self-contained step prompts) -----------------------------------------
PAGE_CHARS = 4000  # the byte-level test tokenizer: one token per byte (LiveWeb pages: up to 20,000 chars)


class LongPagesEnv:
    """Each observation is a self-contained step prompt, like LiveWeb's: a whole page plus recent actions."""

    name = "long_pages"
    default_terminal_hook = None

    def __init__(self, steps: int = 30):
        self.steps = steps

    def page(self, n: int) -> str:
        head = f"Step {n}/{self.steps}. URL: https://prices.example/page/{n}\n"
        return head + ("item costs 21 coins. " * PAGE_CHARS)[: PAGE_CHARS - len(head)]

    async def start(self, task):
        return Started({"turn": 0}, self.page(0))

    async def step(self, handle, action):
        handle["turn"] += 1
        done = handle["turn"] == self.steps
        return Stepped(None if done else self.page(handle["turn"]), reward=0.01, done=done)

    async def close(self, handle):
        return None


@pytest.mark.parametrize("context", ["conversation", "step"])
def test_step_context_fits_self_contained_pages_so_max_turns_30_is_reachable(context, tmp_path):
    """slime's rollout (generate_and_rm_group) with the plugin, LiveWeb's budget (16,384 tokens) and
    max_turns 30: one growing chat fills the budget after 3 pages; with ``context: step`` every turn is
    its own sample (slime's fan-out shape, one rollout_id), whose prompt is that turn's page alone."""
    from tests.fakes.http_env_slime import ScriptedGenerate, byte_tokenizer, load_slime, run_group
    from tests.fakes.http_env_slime import slime_args as slime_ns

    load_slime()
    from slime.observability.rollout_data_utils import validate_rollout_id_annotated
    from slime.utils.types import Sample as SlimeSample

    from trainstack_plugins.http_env.rewards import normalize_by_group

    template = (ROOT / "tests" / "data" / "chat_templates" / "Qwen-Qwen3-0.6B.jinja").read_text()
    d = byte_tokenizer(tmp_path / "tok", template)
    from trainstack_plugins.http_env.chat import ChatTokenizer

    chat = ChatTokenizer(d)
    action = chat.encode('{"action": {"type": "scroll"}}<|im_end|>')
    with env_server(LongPagesEnv()) as (url, _), \
            ScriptedGenerate(lambda r: (action, [-0.2] * len(action), "scroll", "stop")) as llm:
        cfg = tmp_path / "http_env.yaml"
        cfg.write_text(json.dumps({"http_env": {"url": url, "max_turns": 30, "max_tokens_per_turn": 2048,
                                                "context": context, "timeout_s": 10}}))
        args = slime_ns(["--hf-checkpoint", str(d), "--custom-generate-function-path",
                         "trainstack_plugins.http_env.generate.generate", "--rollout-max-response-len", "16384",
                         "--rollout-max-context-len", "16384", "--n-samples-per-prompt", "2"],
                        custom_config=cfg, sglang_router_port=llm.port)
        out = run_group(args, [SlimeSample(prompt="liveweb", index=i, group_index=0) for i in range(2)])
    if context == "conversation":
        assert all(s.status == SlimeSample.Status.TRUNCATED for s in out)
        assert all(s.metadata["http_env_episode"]["turns"] <= 4 for s in out)  # 3-4 pages fill 16,384 tokens
        return
    assert [len(turns) for turns in out] == [30, 30]
    for i, turns in enumerate(out):
        assert {s.rollout_id for s in turns} == {i} and {s.group_index for s in turns} == {0}
        for k, s in enumerate(turns):
            assert len(s.tokens) <= 16384 and s.response_length == len(action)
            assert s.tokens[-len(action):] == action and s.loss_mask == [1] * len(action)
            assert s.rollout_log_probs == pytest.approx([-0.2] * len(action))
            assert chat.decode(s.tokens[:-len(action)]).count("Step ") == 1  # that turn's page only
            assert f"Step {k}/30" in chat.decode(s.tokens)
            assert s.status == SlimeSample.Status.COMPLETED and s.reward == pytest.approx(0.3)
    validate_rollout_id_annotated([out])  # slime's check of the fan-out shape: siblings share a rollout_id
    for s in out[0]:
        s.reward = 1.0  # episode 0 did better: all its 30 turns carry its reward
    flat = [s for turns in out for s in turns]
    raw, norm = normalize_by_group(args, flat)
    assert norm[:30] == pytest.approx([0.7071] * 30, abs=1e-3) and norm[30:] == pytest.approx([-0.7071] * 30, abs=1e-3)
