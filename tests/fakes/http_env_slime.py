"""The HTTP-env plugin driven by slime's own rollout code (``slime.rollout.sglang_rollout``), on CPU.

- ``slime_args``: the args Namespace built by slime's own argument parser (its
  ``get_slime_extra_args_provider``), plus the few SGLang-side values slime's parser takes from
  SGLang's ``ServerArgs``/``RouterArgs`` (not installable on CPU) set by hand, and slime's handling
  of ``--custom-config-path`` (top-level YAML keys become ``args.<key>``).
- ``ScriptedGenerate``: a minimal SGLang-compatible ``POST /generate`` whose replies a test
  scripts; it records every request body and its headers.
- ``byte_tokenizer``: a real Hugging Face tokenizer directory for a chat template: byte-level
  BPE (any text round-trips), the template's special tokens as single ids, loadable by
  ``transformers.AutoTokenizer`` (slime's ``GenerateState`` loads it) and by the plugin.
- ``run_group``: ``generate_and_rm_group`` with a fresh ``GenerateState``, as slime calls it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

import pytest

SPECIAL = re.compile(r"<\|[^|<>\s]+\|>|<｜[^｜]+｜>|\[gMASK\]|<sop>|</?think>|\]~!b\[|\]~b\]|\[e~\[")


def load_slime() -> None:
    """Import slime from the submodule; outside CI a missing submodule skips, in CI it fails."""
    from trainstack.tiny import slime_upstream

    try:
        slime_upstream.load()
    except slime_upstream.SlimeMissing as e:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"slime's source is missing ({e}); `git submodule update --init slime` (CI fills it)")


def slime_args(argv: list[str], custom_config: Path | None = None, **sglang: Any) -> argparse.Namespace:
    """``args`` as slime's parser builds it from ``argv``."""
    load_slime()
    import yaml
    from slime.utils.arguments import get_slime_extra_args_provider

    parser = argparse.ArgumentParser()
    get_slime_extra_args_provider()(parser)
    args = parser.parse_args(["--rollout-batch-size", "1", "--rollout-num-gpus", "1", *argv,
                              *(["--custom-config-path", str(custom_config)] if custom_config else [])])
    # SGLang's parser (ServerArgs/RouterArgs, GPU-only) gives these; the values are its defaults.
    for key, value in {"sglang_router_ip": "127.0.0.1", "sglang_router_port": None, "sglang_server_concurrency": 512,
                       "sglang_dp_size": None, "router_policy": "cache_aware",
                       "sglang_enable_deterministic_inference": False, **sglang}.items():
        setattr(args, key, value)
    if args.custom_config_path:  # slime_validate_args does exactly this (slime/utils/arguments.py)
        with open(args.custom_config_path) as f:
            for k, v in (yaml.safe_load(f) or {}).items():
                setattr(args, k, v)
    return args


def run_group(args: argparse.Namespace, samples: list, evaluation: bool = False) -> list:
    """One group through slime's ``generate_and_rm_group`` (concurrently, as slime runs it)."""
    from slime.rollout.sglang_rollout import GenerateState, generate_and_rm_group
    from slime.utils.misc import SingletonMeta

    SingletonMeta._instances.pop(GenerateState, None)  # a fresh state for these args (slime: one per process)

    async def go():
        state = GenerateState(args)
        return await generate_and_rm_group(args, samples, sampling_params=state.sampling_params.copy(),
                                           evaluation=evaluation)

    try:
        return asyncio.run(go())
    finally:
        SingletonMeta._instances.pop(GenerateState, None)


class ScriptedGenerate:
    """``POST /generate`` answering ``reply(request) -> (token ids, log-probs, text, finish type)``."""

    def __init__(self, reply: Callable[[dict], tuple[list[int], list[float], str, str]]):
        self.reply = reply
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.requests.append(req)
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                ids, lps, text, finish = outer.reply(req)
                body = json.dumps({"text": text, "output_ids": ids, "meta_info": {
                    "finish_reason": {"type": finish}, "completion_tokens": len(ids),
                    "output_token_logprobs": [[lp, i, None] for lp, i in zip(lps, ids)]}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def __enter__(self) -> "ScriptedGenerate":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def byte_tokenizer(out: Path, template: str, *, bos: str | None = None, eos: str | None = None,
                   extra_special: tuple[str, ...] = ()) -> Path:
    """A tokenizer directory for ``template``: byte-level BPE without merges (every text round-trips
    exactly) plus the template's special tokens (``<|...|>``, ``<｜...｜>``, ...) as single ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = sorted(set(SPECIAL.findall(template)) | {t for t in (bos, eos, *extra_special) if t})
    tok.add_special_tokens(specials)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template,
                              "model_max_length": 1 << 20}
    if bos:
        config["bos_token"] = bos
    if eos:
        config["eos_token"] = eos
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False))
    return out
