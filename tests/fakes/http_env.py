"""Helpers for the HTTP env tests: a real env server in a thread, slime-shaped args, a counting env."""
from __future__ import annotations

import argparse
import asyncio
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trainstack.http_env.chain_sum import ChainSumEnv
from trainstack.http_env.server import BackgroundServer, make_store
from trainstack.tiny.sample import Sample

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 8, "stop": None, "stop_token_ids": None,
            "skip_special_tokens": True, "no_stop_trim": False, "spaces_between_special_tokens": False}


class CountingEnv(ChainSumEnv):
    """chain_sum that records every action it applied and every episode it opened/closed."""

    def __init__(self, fail_starts: int = 0):
        super().__init__()
        self.applied: list[str] = []
        self.opened = 0
        self.closed = 0
        self.fail_starts = fail_starts

    async def start(self, task: dict):
        if self.fail_starts:
            self.fail_starts -= 1
            raise RuntimeError("browser crashed while opening the episode")
        started = await super().start(task)
        self.opened += 1
        return started

    async def step(self, handle: Any, action: str):
        self.applied.append(action)
        return await super().step(handle, action)

    async def close(self, handle: Any) -> None:
        self.closed += 1


@contextmanager
def env_server(env, *, max_sessions: int = 8, session_ttl_s: float = 60.0, terminal_hook: str | None = None):
    store = make_store(env, max_sessions=max_sessions, session_ttl_s=session_ttl_s, terminal_hook=terminal_hook)
    with BackgroundServer(store) as url:
        yield url, store


def slime_args(env_url: str, generate_port: int, tokenizer: Path | str, **settings) -> argparse.Namespace:
    """What slime hands a custom generate function: args with --custom-config-path keys set."""
    http_env = {"url": env_url, "max_turns": 2, "max_tokens_per_turn": 1, "timeout_s": 5.0, "retries": 2,
                "backoff_s": 0.05, **settings}
    return argparse.Namespace(http_env=http_env, hf_checkpoint=str(tokenizer), sglang_router_ip="127.0.0.1",
                              sglang_router_port=generate_port)


def run_generate(args, sample: Sample, sampling: dict | None = None) -> Sample:
    from trainstack_plugins.http_env.generate import generate

    return asyncio.run(generate(args, sample, dict(sampling or SAMPLING)))


CHATML = ("{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}")


def write_chatml_bpe(out: Path, corpus: list[str]):
    """A real tokenizer made here: byte-level BPE trained on ``corpus`` + a ChatML chat template."""
    import json

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus * 20, trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": "<|im_end|>"}))
    return tok


def digit_answers(tok_ids: dict[str, int], answers: list[str]):
    """A scripted /generate that answers the given characters in turn (one token each, log-prob -0.5)."""
    it = iter(answers)

    def reply(_req: dict):
        ch = next(it)
        return [tok_ids[ch]], [-0.5], ch, "length"

    return reply
