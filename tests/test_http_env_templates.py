"""The HTTP-env plugin with the real chat templates of the model families trainstack ships presets for
(tests/data/chat_templates/, sources in SOURCES.md), run through slime's own rollout code:
``slime.rollout.sglang_rollout.generate_and_rm_group`` with ``GenerateState``, args from slime's own
parser, the plugin as ``--custom-generate-function-path``, the real env server, and a scripted
SGLang-compatible ``/generate``.

Per template, a 2-turn episode (two samples of one group, concurrently, as slime runs them): the
tokens are the prompt (rendered by ``transformers``' ``apply_chat_template``, an independent
renderer), the model's first turn as the server returned it, the observation's delta written out
by hand below, and the model's second turn; ``loss_mask`` is 1 on model tokens and 0 on the
observation; ``rollout_log_probs`` are the server's, 0.0 on the observation; every ``/generate``
carries slime's routing key, the sample's ``session_id``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.fakes.http_env import env_server
from tests.fakes.http_env_slime import ScriptedGenerate, byte_tokenizer, load_slime, run_group, slime_args
from trainstack.http_env.envs import Started, Stepped

TEMPLATES = ROOT / "tests" / "data" / "chat_templates"
PLUGIN = "trainstack_plugins.http_env.generate.generate"
OBS = ["Page one: what does item 3 cost?", "Page two: item 3 costs 21 coins."]
THOUGHT = "The price is on the next page."


@dataclass
class Case:
    name: str
    file: str
    turn1: str  # the model's first turn, as generated (end-of-turn token included)
    delta: str  # what follows it for OBS[1]: written out by hand from the template
    turn2: str
    bos: str | None = None
    kwargs: dict = field(default_factory=dict)  # chat_template_kwargs
    history_prefix: str | None = None  # how the template renders a plain answer in history (None: it rewrites)


CASES = [
    Case("qwen3-thinking", "Qwen-Qwen3-0.6B.jinja",
         f"<think>\n{THOUGHT}\n</think>\n\nClick next.<|im_end|>",
         f"\n<|im_start|>user\n{OBS[1]}<|im_end|>\n<|im_start|>assistant\n",
         "<think>\nFound it.\n</think>\n\n21<|im_end|>", history_prefix=""),
    Case("qwen3-non-thinking", "Qwen-Qwen3-0.6B.jinja", "Click next.<|im_end|>",
         f"\n<|im_start|>user\n{OBS[1]}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
         "21<|im_end|>", kwargs={"enable_thinking": False}),
    Case("qwen3.5", "Qwen3.5-4B.jinja", f"{THOUGHT}\n</think>\n\nClick next.<|im_end|>",
         f"\n<|im_start|>user\n{OBS[1]}<|im_end|>\n<|im_start|>assistant\n<think>\n",
         "Found it.\n</think>\n\n21<|im_end|>"),
    Case("glm-4.5", "glm_4_5.jinja", f"\n<think>{THOUGHT}</think>\nClick next.<|user|>",
         f"{OBS[1]}<|assistant|>", "\n<think>Found it.</think>\n21<|user|>", history_prefix="\n<think></think>\n"),
    Case("llama-3", "meta-llama-Llama-3.2-3B-Instruct.jinja", "Click next.<|eot_id|>",
         f"<|start_header_id|>user<|end_header_id|>\n\n{OBS[1]}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
         "21<|eot_id|>", bos="<|begin_of_text|>", history_prefix=""),
    Case("deepseek-v3", "deepseek-ai-DeepSeek-V3.1.jinja", "Click next.<｜end▁of▁sentence｜>",
         f"<｜User｜>{OBS[1]}<｜Assistant｜></think>", "21<｜end▁of▁sentence｜>", bos="<｜begin▁of▁sentence｜>",
         history_prefix=""),
    Case("kimi-k2", "moonshotai-Kimi-K2.jinja", "Click next.<|im_end|>",
         f"<|im_user|>user<|im_middle|>{OBS[1]}<|im_end|><|im_assistant|>assistant<|im_middle|>", "21<|im_end|>",
         history_prefix=""),
    Case("kimi-k2-thinking", "moonshotai-Kimi-K2-Thinking.jinja", f"<think>{THOUGHT}</think>Click next.<|im_end|>",
         f"<|im_user|>user<|im_middle|>{OBS[1]}<|im_end|><|im_assistant|>assistant<|im_middle|>",
         "<think>Found it.</think>21<|im_end|>", history_prefix="<think></think>"),
    Case("minimax-m2", "unsloth-MiniMax-M2.jinja", f"{THOUGHT}\n</think>\n\nClick next.[e~[",
         f"\n]~b]user\n{OBS[1]}[e~[\n]~b]ai\n<think>\n", "Found it.\n</think>\n\n21[e~["),
]


def test_every_stored_template_has_a_case_and_a_source():
    stored = {p.name for p in TEMPLATES.glob("*.jinja")}
    assert stored == {c.file for c in CASES}
    sources = (TEMPLATES / "SOURCES.md").read_text()
    assert all(name in sources for name in stored)


@pytest.fixture(scope="module")
def tokdirs(tmp_path_factory):
    return {c.name: byte_tokenizer(tmp_path_factory.mktemp(c.name), (TEMPLATES / c.file).read_text(encoding="utf-8"),
                                   bos=c.bos) for c in CASES}


class PagesEnv:
    name = "pages"
    default_terminal_hook = None

    async def start(self, task):
        return Started({"turn": 0}, OBS[0])

    async def step(self, handle, action):
        handle["turn"] += 1
        done = handle["turn"] == 2
        return Stepped(None if done else OBS[handle["turn"]], reward=0.5 if done else 0.25, done=done)

    async def close(self, handle):
        return None


@lru_cache(maxsize=None)
def hf(d: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(d))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_two_turn_episode_through_slimes_rollout(case, tokdirs, tmp_path):
    load_slime()
    from slime.utils.types import Sample

    d = tokdirs[case.name]
    tok = hf(d)
    enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    prompt = enc(tok.apply_chat_template([{"role": "user", "content": OBS[0]}], tokenize=False,
                                         add_generation_prompt=True, **case.kwargs))
    m1, m2, delta = enc(case.turn1), enc(case.turn2), enc(case.delta)
    assert tok.decode(m1 + delta + m2) == case.turn1 + case.delta + case.turn2  # the tokenizer round-trips
    lp1 = [-0.1 - 0.01 * i for i in range(len(m1))]
    lp2 = [-0.5 - 0.01 * i for i in range(len(m2))]

    def reply(req):
        first = req["input_ids"] == prompt
        ids, lps = (m1, lp1) if first else (m2, lp2)
        return ids, lps, tok.decode(ids, skip_special_tokens=True), "stop"

    with env_server(PagesEnv()) as (url, _), ScriptedGenerate(reply) as llm:
        cfg = tmp_path / "http_env.yaml"
        settings = {"url": url, "max_turns": 2, "reward": "sum", "timeout_s": 10, "retries": 1, "backoff_s": 0.05}
        cfg.write_text(json.dumps({"http_env": {**settings, **({"chat_template_kwargs": case.kwargs} if case.kwargs
                                                               else {})}}))
        args = slime_args(["--hf-checkpoint", str(d), "--custom-generate-function-path", PLUGIN,
                           "--rollout-max-response-len", "600", "--n-samples-per-prompt", "2"],
                          custom_config=cfg, sglang_router_port=llm.port, router_policy="consistent_hashing")
        group = [Sample(prompt="browse", index=i, group_index=0) for i in range(2)]
        out = run_group(args, group)

    response = m1 + delta + m2
    for s in out:
        assert s.status == Sample.Status.COMPLETED, s.metadata.get("http_env_episode")
        assert s.tokens == prompt + response
        assert s.response_length == len(response) == len(s.loss_mask) == len(s.rollout_log_probs)
        assert s.loss_mask == [1] * len(m1) + [0] * len(delta) + [1] * len(m2)
        assert s.rollout_log_probs == pytest.approx(lp1 + [0.0] * len(delta) + lp2)
        assert s.reward == pytest.approx(0.75) and not s.remove_sample
    # token in: turn 2 was generated from exactly the ids before it
    assert sorted(map(len, (r["input_ids"] for r in llm.requests))) == [len(prompt)] * 2 + [len(prompt + m1 + delta)] * 2
    assert all(r["input_ids"] in (prompt, prompt + m1 + delta) for r in llm.requests)
    # slime's routing key: each sample's session_id (slime sets a uuid per sample), on both of its turns
    keys = [h.get("x-smg-routing-key") for h in llm.headers]
    assert None not in keys, "a /generate without X-SMG-Routing-Key"
    assert sorted(keys) == sorted([s.session_id for s in out] * 2) and len(set(keys)) == 2


def test_no_routing_key_without_consistent_hashing(tokdirs, tmp_path):
    """slime sends the header only under --router-policy consistent_hashing; so does the plugin."""
    load_slime()
    from slime.utils.types import Sample

    case = CASES[-2]
    d = tokdirs[case.name]
    tok = hf(d)
    ids = tok.encode(case.turn2, add_special_tokens=False)
    with env_server(PagesEnv()) as (url, _), ScriptedGenerate(lambda r: (ids, [-0.1] * len(ids), "21", "stop")) as llm:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(json.dumps({"http_env": {"url": url, "max_turns": 1, "timeout_s": 10}}))
        args = slime_args(["--hf-checkpoint", str(d), "--custom-generate-function-path", PLUGIN,
                           "--rollout-max-response-len", "100"], custom_config=cfg, sglang_router_port=llm.port)
        out = run_group(args, [Sample(prompt="browse", index=0)])
    assert out[0].status == Sample.Status.TRUNCATED and llm.headers and all(
        "x-smg-routing-key" not in h for h in llm.headers)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_plugins_renderer_matches_transformers(case, tokdirs):
    from trainstack_plugins.http_env.chat import ChatTokenizer

    chat, tok = ChatTokenizer(tokdirs[case.name]), hf(tokdirs[case.name])
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": OBS[0]},
            {"role": "assistant", "content": "Click next."}, {"role": "user", "content": OBS[1]}]
    for n in (2, 3, 4):
        for gen in (True, False):
            want = tok.apply_chat_template(conv[:n], tokenize=False, add_generation_prompt=gen, **case.kwargs)
            assert chat.render(conv[:n], gen, **case.kwargs) == want


TEXT = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9 .,:;!?'()-]{0,30}[A-Za-z0-9.]", fullmatch=True)


@pytest.mark.parametrize("case", [c for c in CASES if c.history_prefix is not None], ids=lambda c: c.name)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=TEXT, answer=TEXT, second=TEXT)
def test_where_a_template_keeps_history_the_delta_equals_re_rendering(case, tokdirs, first, answer, second):
    """Property, over observation and answer texts: for a template that renders an earlier answer as the
    model wrote it, prompt + the model's turn + the observation's delta is exactly the template's
    rendering of the whole conversation (the delta is what re-rendering would add, and no more)."""
    from trainstack_plugins.http_env.chat import ChatTokenizer
    from trainstack_plugins.http_env.generate import closing_overlap

    chat, tok = ChatTokenizer(tokdirs[case.name]), hf(tokdirs[case.name])
    eot = next(t for t in ("<|im_end|>", "<|eot_id|>", "<｜end▁of▁sentence｜>", "<|user|>", "[e~[")
               if case.turn1.endswith(t))
    model = chat.encode(case.history_prefix + answer + eot)
    tail = chat.encode(chat.turn_tail({"role": "user", "content": second}, **case.kwargs))
    prompt = chat.encode(chat.render([{"role": "user", "content": first}], True, **case.kwargs))
    whole = tok.apply_chat_template([{"role": "user", "content": first}, {"role": "assistant", "content": answer},
                                     {"role": "user", "content": second}], tokenize=False, add_generation_prompt=True,
                                    **case.kwargs)
    assert chat.decode(prompt + model + tail[closing_overlap(model, tail):]) == whole
