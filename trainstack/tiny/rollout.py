"""The rollout side of a tiny run is slime's own code (the ``slime/`` submodule), not a copy.

Per rollout the tiny trainer calls what slime's ``RolloutManager.generate`` calls:
``call_rollout_fn(generate_rollout, args, rollout_id, data_source)`` (``--rollout-function-path``,
default ``slime.rollout.sglang_rollout.generate_rollout``) over slime's data source
(``--data-source-path``, default ``RolloutDataSourceWithBuffer`` over ``slime.utils.data.Dataset``),
which runs ``generate_and_rm_group`` per prompt group (the group's samples concurrently),
slime's ``generate`` or the ``--custom-generate-function-path`` plugin, the sample hooks, the
reward hub (``async_rm`` / ``batched_async_rm``), dynamic filters and sample filters; then
``RolloutManager._convert_samples_to_train_data`` (reward post-processing / normalisation,
loss masks, log-probs). Eval is ``generate_rollout(..., evaluation=True)`` (slime's
``eval_rollout``). All generation goes to the tiny SGLang-compatible server (server.py):
slime's own ``http_utils.post`` reaches it in-process (slime_upstream.InProcessClient, JSON
bytes both ways, no socket); plugins with their own HTTP client reach it over HTTP on 127.0.0.1.
Only the training step is the tiny trainer's (train.py, loss.py).

What is substituted on CPU, and why, is in docs/tiny_trainer.md ("slime in the loop").
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

# what the run log names (and the upstream-contract test checks): slime's functions on the rollout path
SLIME_FUNCTIONS = (
    "slime.rollout.sglang_rollout.generate_rollout",
    "slime.rollout.sglang_rollout.generate_and_rm_group",
    "slime.rollout.data_source.RolloutDataSourceWithBuffer",
    "slime.utils.data.Dataset",
    "slime.rollout.rm_hub.async_rm",
    "slime.rollout.sample_hooks.apply_rollout_sample_hooks",
    "slime.ray.rollout.RolloutManager._convert_samples_to_train_data",
    "slime.observability.rollout_metrics.compute_metrics_from_samples",
)


@dataclass
class RolloutResult:
    samples: list  # slime Samples, flattened, in slime's order
    train_data: dict[str, Any]  # RolloutManager._convert_samples_to_train_data's output
    metrics: dict[str, float]  # rollout/* keys


class SlimeRollouts:
    """slime's rollout side, wired to the tiny policy through the tiny SGLang server."""

    def __init__(self, args, model_getter):
        from . import slime_upstream

        root = slime_upstream.load()
        from slime.rollout.base_types import call_rollout_fn
        from slime.utils.eval_config import build_eval_dataset_configs
        from slime.utils.misc import load_function

        from .server import TinySGLangServer

        self.args = args
        self._call = call_rollout_fn
        self._set_rollout_id = _rollout_id_setter()
        self._validate_ids = slime_upstream.upstream_function("validate_rollout_ids", root)
        self._metrics = slime_upstream.upstream_function("compute_metrics_from_samples", root)
        if not args.hf_checkpoint:  # slime loads the tokenizer from --hf-checkpoint: the tiny one's files
            from . import hf_tokenizer

            args.hf_checkpoint = str(hf_tokenizer.write(_tokenizer_cache()))
        self.server = TinySGLangServer(model_getter, seed=args.seed, context_len=args.rollout_max_context_len,
                                       allow_auto_truncate=bool(args.sglang_allow_auto_truncate))
        from slime.utils.async_utils import get_async_loop

        args.sglang_router_ip, args.sglang_router_port = self.server.start(get_async_loop().loop)
        args.rollout_num_engines = 1  # one "engine" behind the "router": the tiny server
        if getattr(args, "rollout_num_gpus", None) is None:  # slime v0.3.0 counts engines as gpus // gpus per engine
            args.rollout_num_gpus = args.rollout_num_gpus_per_engine
        args.sglang_enable_deterministic_inference = True  # slime then sends sampling_seed per group index
        slime_upstream.install_http_client(args, self.server)
        eval_pairs = list(getattr(args, "eval_datasets", None) or [])
        args.eval_datasets = build_eval_dataset_configs(
            args, [{"name": n, "path": p} for n, p in eval_pairs], {}) if eval_pairs and \
            isinstance(eval_pairs[0], tuple) else eval_pairs
        self.data_source = load_function(args.data_source_path)(args)
        self.generate_rollout = load_function(args.rollout_function_path)
        if args.eval_function_path is None:  # slime's argument validation does the same
            args.eval_function_path = args.rollout_function_path
        self.eval_generate_rollout = load_function(args.eval_function_path)
        # RolloutManager is a Ray actor class in a module that imports Ray, wandb and SGLang's engines;
        # its two conversion methods, compiled from slime's source, run here without them. Only the
        # attributes they read are set (its __init__ starts SGLang servers).
        manager_cls = slime_upstream.rollout_manager_class(root)
        self.manager = manager_cls.__new__(manager_cls)
        self.manager.args = args
        self.manager.custom_reward_post_process_func = (
            load_function(args.custom_reward_post_process_path) if args.custom_reward_post_process_path else None)
        self.manager.custom_convert_samples_to_train_data_func = (
            load_function(args.custom_convert_samples_to_train_data_path)
            if args.custom_convert_samples_to_train_data_path else None)
        from trainstack.upstream.versions import identify

        known = identify(root)
        print(f"[tiny] rollout: {known.label if known else 'slime of unknown version'}'s own rollout code "
              f"({len(SLIME_FUNCTIONS)} functions from {root}, found where this checkout keeps them: "
              f"trainstack/tiny/rollout.py SLIME_FUNCTIONS); generation: tiny SGLang-compatible server "
              f"{self.server.url}", file=sys.stderr, flush=True)
        _quiet_progress_bars()

    def __len__(self) -> int:
        return len(self.data_source)

    def generate(self, rollout_id: int) -> RolloutResult:
        """slime's RolloutManager.generate minus Ray: rollout fn -> flatten -> train data."""
        import itertools

        self._set_rollout_id(rollout_id)
        self.server.begin(rollout_id, "train")
        out = self._call(self.generate_rollout, self.args, rollout_id, self.data_source, evaluation=False)
        data = out.samples
        self._validate_ids(data)
        while data and isinstance(data[0], list):
            data = list(itertools.chain.from_iterable(data))
        train_data = self.manager._convert_samples_to_train_data(data)
        metrics = {f"rollout/{k}": float(v) for k, v in (out.metrics or {}).items() if _number(v)}
        metrics.update({f"rollout/{k}": float(v) for k, v in self._metrics(self.args, data).items()
                        if _number(v)})
        metrics.update(failure_metrics(data))
        return RolloutResult(data, train_data, metrics)

    def evaluate(self, rollout_id: int) -> dict[str, float]:
        """slime's RolloutManager.eval: the eval rollout fn, logged with slime's eval keys."""
        self._set_rollout_id(rollout_id)
        self.server.begin(rollout_id, "eval")
        result = self._call(self.eval_generate_rollout, self.args, rollout_id, self.data_source, evaluation=True)
        out: dict[str, float] = {}
        for name, d in result.data.items():
            rewards = d["rewards"]
            out[f"eval/{name}"] = sum(rewards) / max(len(rewards), 1)
            if "truncated" in d:
                out[f"eval/{name}-truncated_ratio"] = sum(d["truncated"]) / max(len(d["truncated"]), 1)
        return out

    def save_state(self) -> dict | None:
        """The data cursor, exactly what slime's ``RolloutDataSource.save`` writes (None without the global
        dataset, as slime)."""
        ds = self.data_source
        if not self.args.rollout_global_dataset:
            return None
        return {"sample_offset": ds.sample_offset, "epoch_id": ds.epoch_id,
                "sample_group_index": ds.sample_group_index, "sample_index": ds.sample_index,
                "metadata": ds.metadata}

    def load(self, rollout_id: int) -> None:
        """slime's ``RolloutDataSource.load`` (reads ``{--load}/rollout/global_dataset_state_dict_{id}.pt``)."""
        self.data_source.load(rollout_id)

    def close(self) -> None:
        import asyncio

        from slime.utils import http_utils
        from slime.utils.async_utils import get_async_loop

        self._stop_fully_async_worker()
        client = http_utils._http_client
        if hasattr(client, "aclose"):
            asyncio.run_coroutine_threadsafe(client.aclose(), get_async_loop().loop).result(timeout=10)
        self.server.stop()


    def _stop_fully_async_worker(self, timeout_s: float = 60.0) -> None:
        """slime's fully-async rollout keeps generating in a thread of its own between rollouts
        (slime/rollout/fully_async_rollout.py:97-100, :128-186) and stops it only at interpreter exit
        (:65-73, atexit), after this server and HTTP client are gone. Stop it here instead: its stop flag,
        then the server drains (queued and new requests end ABORTED, as slime's /abort_request has SGLang
        do) until its in-flight groups are back and the thread has ended; then slime's own stop."""
        import time

        module = sys.modules.get("slime.rollout.fully_async_rollout")
        worker = getattr(module, "_global_worker", None)
        if module is None or worker is None:
            return
        worker.running = False
        deadline = time.monotonic() + timeout_s
        thread = worker.worker_thread
        self.server.drain()
        while thread is not None and thread.is_alive() and time.monotonic() < deadline:
            self.server.drain()  # what was decoding when the last drain came is queued again or done
            thread.join(timeout=0.2)
        module._stop_global_worker()


def _rollout_id_setter():
    """slime's `set_current_rollout_id` (the rollout id its sample hooks read); a slime before sample hooks
    (v0.3.x, no `slime.rollout.sample_hooks`) has nothing to set."""
    try:
        from slime.rollout.sample_hooks import set_current_rollout_id
    except ModuleNotFoundError as e:
        if e.name != "slime.rollout.sample_hooks":
            raise
        return lambda rollout_id: None
    return set_current_rollout_id


def _quiet_progress_bars() -> None:
    """slime's eval draws a tqdm bar with `disable=False` given explicitly, which TQDM_DISABLE (train.py sets
    it) cannot turn off: under TQDM_DISABLE its bars are disabled whatever the call says."""
    import os

    import slime.rollout.sglang_rollout as sglang_rollout

    bar = sglang_rollout.tqdm
    if not os.environ.get("TQDM_DISABLE") or getattr(bar, "quiet", False):
        return

    def quiet(*args, **kwargs):
        return bar(*args, **{**kwargs, "disable": True})

    quiet.quiet = True  # type: ignore[attr-defined]
    sglang_rollout.tqdm = quiet


def failure_metrics(samples) -> dict[str, float]:
    """``rollout/failed_frac``: the share of samples that ended ``failed`` or ``aborted`` (slime logs no such
    key; the failure stop in train.py reads this one)."""
    from slime.utils.types import Sample

    bad = (Sample.Status.FAILED, Sample.Status.ABORTED)
    n = max(len(samples), 1)
    return {"rollout/failed_frac": sum(s.status in bad for s in samples) / n,
            "rollout/aborted_frac": sum(s.status == Sample.Status.ABORTED for s in samples) / n}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _tokenizer_cache() -> str:
    """Where the tiny tokenizer's HF files go when the run names no --hf-checkpoint (written once). The name
    carries a hash of the vocabulary: trainstack versions with other vocabularies on one machine would
    otherwise rewrite one directory under each other's running trainers."""
    import hashlib

    from .hf_tokenizer import tokenizer_json

    from trainstack.storage.user_cache import base

    digest = hashlib.sha256(tokenizer_json().encode()).hexdigest()[:12]
    return os.path.join(base(), "trainstack", f"tiny-tokenizer-{digest}")
