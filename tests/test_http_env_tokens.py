"""Token accounting of a multi-turn episode with a real tokenizer (a byte-level BPE trained here with
the ``tokenizers`` library) and a ChatML chat template: ``tokens``, ``loss_mask`` and
``rollout_log_probs`` line up exactly with what the inference server returned and with the
chat-templated observations, written out by hand below."""
from __future__ import annotations

import pytest

from tests.fakes.http_env import env_server, run_generate, slime_args, write_chatml_bpe
from tests.fakes.http_faults import ScriptedSGLang
from trainstack.http_env.envs import Started, Stepped
from trainstack.tiny.sample import Sample

OBS = ["You are on page one.", "Now on page two.", "Now on page three."]


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    return d, write_chatml_bpe(d, [*OBS, "Click next.", "The answer is 42.", "user assistant"])


class PagesEnv:
    name = "pages"
    default_terminal_hook = None

    async def start(self, task):
        return Started({"turn": 0}, OBS[0])

    async def step(self, handle, action):
        handle["turn"] += 1
        done = handle["turn"] == 3
        return Stepped(None if done else OBS[handle["turn"]], reward=0.25 * handle["turn"], done=done)

    async def close(self, handle):
        return None


def test_tokens_mask_and_logprobs_line_up_with_server_output_and_templated_observations(bpe_dir):
    d, tok = bpe_dir
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids  # noqa: E731
    turns = [enc("Click next.<|im_end|>"), enc("The answer"), enc("The answer is 42.<|im_end|>")]
    texts = ["Click next.", "The answer", "The answer is 42."]
    finishes = ["stop", "length", "stop"]  # turn 2 is cut by the per-turn cap: no <|im_end|> from the model
    logprobs = [[-0.01 * (k + 1) - i for i in range(len(t))] for k, t in enumerate(turns)]
    it = iter(range(3))

    def reply(_req):
        k = next(it)
        return turns[k], logprobs[k], texts[k], finishes[k]

    with env_server(PagesEnv()) as (url, _), ScriptedSGLang(reply) as llm:
        args = slime_args(url, llm.port, d, max_turns=3, max_tokens_per_turn=None, reward="sum")
        out = run_generate(args, Sample(prompt="browse"), {"max_new_tokens": 200, "temperature": 1.0})

    prompt = enc("<|im_start|>user\nYou are on page one.<|im_end|>\n<|im_start|>assistant\n")
    # After a finished turn only the newline closing it is template text; after the cut turn the
    # template's <|im_end|> closes it (mask 0: the model did not write it).
    obs1 = enc("\n<|im_start|>user\nNow on page two.<|im_end|>\n<|im_start|>assistant\n")
    obs2 = enc("<|im_end|>\n<|im_start|>user\nNow on page three.<|im_end|>\n<|im_start|>assistant\n")
    response = turns[0] + obs1 + turns[1] + obs2 + turns[2]
    assert out.status == Sample.Status.COMPLETED, out.metadata
    assert out.tokens == prompt + response
    assert out.response_length == len(response) == len(out.loss_mask) == len(out.rollout_log_probs)
    assert out.loss_mask == [1] * len(turns[0]) + [0] * len(obs1) + [1] * len(turns[1]) + [0] * len(obs2) + \
        [1] * len(turns[2])
    assert out.rollout_log_probs == logprobs[0] + [0.0] * len(obs1) + logprobs[1] + [0.0] * len(obs2) + logprobs[2]
    assert out.response == tok.decode(response, skip_special_tokens=False)
    # token in: each turn was generated from exactly the ids of everything before it
    sent = [r["input_ids"] for r in llm.requests]
    assert sent == [prompt, prompt + turns[0] + obs1, prompt + turns[0] + obs1 + turns[1] + obs2]
    budget = [r["sampling_params"]["max_new_tokens"] for r in llm.requests]
    assert budget == [200, 200 - len(turns[0] + obs1), 200 - len(turns[0] + obs1 + turns[1] + obs2)]
    assert all(r["return_logprob"] is True for r in llm.requests)
    assert out.reward == pytest.approx(0.25 + 0.5 + 0.75)
    per_turn = out.metadata["http_env_episode"]["per_turn"]
    assert [t.get("closing_written_by_model") for t in per_turn] == [1, 0, None]  # <|im_end|> after turn 1 only


def test_an_observation_that_does_not_fit_the_budget_truncates_the_episode(bpe_dir):
    d, tok = bpe_dir
    ids = tok.encode("Click next.<|im_end|>", add_special_tokens=False).ids
    with env_server(PagesEnv()) as (url, _), ScriptedSGLang(lambda _r: (ids, [-1.0] * len(ids), "Click next.",
                                                                       "stop")) as llm:
        out = run_generate(slime_args(url, llm.port, d, max_turns=3, max_tokens_per_turn=None),
                           Sample(prompt="browse"), {"max_new_tokens": len(ids) + 3})
    assert out.status == Sample.Status.TRUNCATED
    assert out.response_length == len(ids) and out.loss_mask == [1] * len(ids)  # ends on the model's turn
    assert "does not fit" in out.metadata["http_env_episode"]["status_reason"]


def test_no_tokenizer_is_an_error_never_a_fallback(tmp_path, bpe_dir):
    from trainstack_plugins.http_env.chat import ChatTokenizer, ChatTokenizerError

    with pytest.raises(ChatTokenizerError, match="tokenizer.json"):
        ChatTokenizer(tmp_path)
    d, tok = bpe_dir
    (tmp_path / "tokenizer.json").write_text((d / "tokenizer.json").read_text())
    with pytest.raises(ChatTokenizerError, match="no chat template"):
        ChatTokenizer(tmp_path)
    args = slime_args("http://127.0.0.1:9", 9, d)
    args.hf_checkpoint = None
    with pytest.raises(ChatTokenizerError, match="no tokenizer"):
        run_generate(args, Sample(prompt="x"))
    del args.http_env
    args.hf_checkpoint = str(d)
    with pytest.raises(ValueError, match="--custom-config-path"):
        run_generate(args, Sample(prompt="x"))


def test_the_tiny_tokenizer_files_match_the_shipped_vocabulary(tmp_path):
    from trainstack_plugins.http_env.chat import ChatTokenizer
    from trainstack.tiny import hf_tokenizer
    from trainstack.tiny.tokenizer import EOS, TinyTokenizer

    d = hf_tokenizer.write(tmp_path)
    assert hf_tokenizer.matches(d) is None
    chat = ChatTokenizer(d)
    text = chat.render([{"role": "user", "content": "3+4"}, {"role": "assistant", "content": "7"},
                        {"role": "user", "content": "+2"}], add_generation_prompt=True)
    assert text == "3+4=7+2="
    assert chat.encode(text + EOS) == TinyTokenizer().encode(text) + [TinyTokenizer().eos_token_id]
    nine = hf_tokenizer.vocab()["9"]
    (d / "tokenizer.json").write_text((d / "tokenizer.json").read_text().replace(f'"9": {nine}', f'"9": {nine + 1}'))
    assert "vocabulary" in hf_tokenizer.matches(d)
