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
        from slime.observability.rollout_data_utils import validate_rollout_id_annotated
        from slime.rollout.base_types import call_rollout_fn
        from slime.rollout.sample_hooks import set_current_rollout_id
        from slime.utils.eval_config import build_eval_dataset_configs
        from slime.utils.misc import load_function

        from .server import TinySGLangServer

        self.args = args
        self._call = call_rollout_fn
        self._set_rollout_id = set_current_rollout_id
        self._validate_ids = validate_rollout_id_annotated
        if not args.hf_checkpoint:  # slime loads the tokenizer from --hf-checkpoint: the tiny one's files
            from . import hf_tokenizer

            args.hf_checkpoint = str(hf_tokenizer.write(_tokenizer_cache()))
        self.server = TinySGLangServer(model_getter, seed=args.seed, context_len=args.rollout_max_context_len)
        from slime.utils.async_utils import get_async_loop

        args.sglang_router_ip, args.sglang_router_port = self.server.start(get_async_loop().loop)
        args.rollout_num_engines = 1  # one "engine" behind the "router": the tiny server
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
        from trainstack.slime_version import checkout_commit

        commit = checkout_commit(root)[0] or "unknown-commit"
        print(f"[tiny] rollout: slime {commit[:8]} ({root}) " + " ".join(SLIME_FUNCTIONS)
              + f"; generation: tiny SGLang-compatible server {self.server.url}", file=sys.stderr, flush=True)

    def __len__(self) -> int:
        return len(self.data_source)

    def generate(self, rollout_id: int) -> RolloutResult:
        """slime's RolloutManager.generate minus Ray: rollout fn -> flatten -> train data."""
        import itertools

        from slime.observability.rollout_metrics import compute_metrics_from_samples

        self._set_rollout_id(rollout_id)
        self.server.begin(rollout_id, "train")
        out = self._call(self.generate_rollout, self.args, rollout_id, self.data_source, evaluation=False)
        data = out.samples
        self._validate_ids(data)
        while data and isinstance(data[0], list):
            data = list(itertools.chain.from_iterable(data))
        train_data = self.manager._convert_samples_to_train_data(data)
        metrics = {f"rollout/{k}": float(v) for k, v in (out.metrics or {}).items() if _number(v)}
        metrics.update({f"rollout/{k}": float(v) for k, v in compute_metrics_from_samples(self.args, data).items()
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

        client = http_utils._http_client
        if hasattr(client, "aclose"):
            asyncio.run_coroutine_threadsafe(client.aclose(), get_async_loop().loop).result(timeout=10)
        self.server.stop()


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

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(tokenizer_json().encode()).hexdigest()[:12]
    return os.path.join(base, "trainstack", f"tiny-tokenizer-{digest}")
