"""slime's post-parse rules (slime.md §2.2) as far as the tiny backend needs them, plus refusals.

Everything wrong is collected into one ``ConfigErrors`` so the user fixes it in one go.
Derived values (eval_datasets, eps_clip_high, gbs from --num-steps-per-rollout, the
load/ref_load resolution) are written onto ``args`` exactly as slime would.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Mapping

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.storage.checkpoints import TRACKER
from trainstack.upstream.argtable import load_table

from . import flags as F
from .cli import ParsedArgv, parse_argv, usage


def main_parse(argv: list[str] | None = None) -> ParsedArgv:
    """Parse + validate; used by the trainer entrypoint."""
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(usage())
        sys.exit(0)
    from trainstack.upstream.select import activate_for_root

    from .slime_upstream import slime_root

    activate_for_root(slime_root())  # the argv is parsed with the table of the slime this trainer imports
    parsed = parse_argv(argv)
    validate(parsed, env=os.environ)
    return parsed


def _flag(dest: str) -> str:
    return load_table().specs[dest].flag


def validate(parsed: ParsedArgv, env: Mapping[str, str] = os.environ) -> None:
    a, explicit = parsed.args, parsed.explicit
    errs: list[ConfigError] = []

    def err(dest: str, problem: str, fix: str = "", value: Any = None, **related: Any) -> None:
        errs.append(ConfigError(_flag(dest) if dest in load_table().specs else dest, problem, fix,
                                value=value, source="command line", related=related))

    refused = F.refusals_for(explicit, a)
    for r, v in refused:
        err(r.dest, f"not supported by the tiny backend: {r.why}", r.fix, value=v)
    parsed.ignored = [_flag(d) for d in F.ignored_dests(explicit, {r.dest for r, _ in refused})]

    if a.custom_config_path:  # slime: top-level YAML keys become args.<key>
        import yaml

        try:
            with open(a.custom_config_path, encoding="utf-8") as f:
                extra = yaml.safe_load(f) or {}
            for k, v in extra.items():
                setattr(a, k, v)
        except OSError as e:
            err("custom_config_path", f"cannot read: {e}", value=a.custom_config_path)

    # architecture
    for d in ("num_layers", "hidden_size", "num_attention_heads"):
        if getattr(a, d) is None:
            err(d, "required by the tiny model", "pass the Megatron model size flags (conf/model/tiny.yaml)")
    if a.hidden_size and a.num_attention_heads and a.hidden_size % a.num_attention_heads:
        err("hidden_size", "must be divisible by --num-attention-heads", value=a.hidden_size,
            num_attention_heads=a.num_attention_heads)
    if a.group_query_attention and a.num_attention_heads and a.num_query_groups and \
            (a.num_query_groups <= 0 or a.num_attention_heads % a.num_query_groups):
        err("num_query_groups", "must divide --num-attention-heads (the Qwen3 model's key/value heads)",
            value=a.num_query_groups, num_attention_heads=a.num_attention_heads)
    if a.kv_channels is not None and (a.kv_channels <= 0 or a.kv_channels % 2):
        err("kv_channels", "must be a positive even number (the head size; rotary embeddings rotate halves)",
            value=a.kv_channels)
    elif a.kv_channels is None and a.hidden_size and a.num_attention_heads and \
            (a.hidden_size // a.num_attention_heads) % 2:
        err("num_attention_heads", "gives an odd head size (hidden_size / heads); rotary embeddings need an even one",
            "pass --kv-channels EVEN, or change the head count", value=a.num_attention_heads)
    if a.ffn_hidden_size is None and a.hidden_size:
        a.ffn_hidden_size = 4 * a.hidden_size
    if a.max_position_embeddings is None:
        a.max_position_embeddings = a.seq_length or 64
    if a.seq_length is None:
        a.seq_length = a.max_position_embeddings

    # batch arithmetic (slime rule 20 + trainstack's up-front checks)
    if a.rollout_batch_size is None:
        err("rollout_batch_size", "is required (slime's only required flag)", "pass --rollout-batch-size N")
    elif a.rollout_batch_size <= 0:
        err("rollout_batch_size", "must be positive", value=a.rollout_batch_size)
    if a.n_samples_per_prompt is None or a.n_samples_per_prompt <= 0:
        err("n_samples_per_prompt", "must be positive", value=a.n_samples_per_prompt)
    if a.rollout_batch_size and a.n_samples_per_prompt and a.rollout_batch_size > 0 and a.n_samples_per_prompt > 0:
        total = a.rollout_batch_size * a.n_samples_per_prompt
        if a.num_steps_per_rollout is not None:
            derived = total // a.num_steps_per_rollout
            if "global_batch_size" in explicit and a.global_batch_size != derived:
                err("global_batch_size", "must equal rollout_batch_size * n_samples_per_prompt // num_steps_per_rollout",
                    value=a.global_batch_size, derived=derived)
            a.global_batch_size = derived
        if a.global_batch_size is None:
            err("global_batch_size", "is required (gbs counts samples)", f"e.g. --global-batch-size {total}")
        elif a.global_batch_size <= 0 or total % a.global_batch_size:
            err("global_batch_size", "must divide rollout_batch_size * n_samples_per_prompt",
                f"use a divisor of {total}", value=a.global_batch_size,
                rollout_batch_size=a.rollout_batch_size, n_samples_per_prompt=a.n_samples_per_prompt)
        else:
            a.num_steps_per_rollout = total // a.global_batch_size
    if a.over_sampling_batch_size is None:
        a.over_sampling_batch_size = a.rollout_batch_size

    # data
    if a.num_rollout is None and a.num_epoch is None:
        err("num_rollout", "one of --num-rollout / --num-epoch is required")
    if a.num_epoch is not None and not a.rollout_global_dataset and a.num_rollout is None:
        err("num_epoch", "needs the global dataset", "drop --disable-rollout-global-dataset or use --num-rollout")
    if a.rollout_global_dataset and not a.prompt_data:
        err("prompt_data", "is required", "pass --prompt-data FILE.jsonl")
    elif a.rollout_global_dataset and not os.path.exists(a.prompt_data):
        err("prompt_data", "file does not exist", "create it (python -m trainstack.tiny.arithmetic --out DIR)",
            value=a.prompt_data)
    if not a.rollout_global_dataset and a.rollout_function_path == F._DEFAULT_ROLLOUT_FN:
        err("rollout_global_dataset", "slime's generate_rollout asserts the global dataset "
            "(sglang_rollout.py:641, `assert args.rollout_global_dataset`)",
            "drop --disable-rollout-global-dataset (or pass a --rollout-function-path that needs no dataset)")
    if a.rollout_max_context_len is not None:  # slime arguments.py:2027-2035
        if a.rollout_max_prompt_len is None:
            a.rollout_max_prompt_len = a.rollout_max_context_len - 1
        elif a.rollout_max_prompt_len > a.rollout_max_context_len - 1:
            err("rollout_max_prompt_len", f"must be below --rollout-max-context-len {a.rollout_max_context_len} "
                "so at least one token is generated (slime asserts it)", value=a.rollout_max_prompt_len)
    if a.rollout_temperature is None or a.rollout_temperature <= 0:
        err("rollout_temperature", "must be > 0 (slime #2297)", value=a.rollout_temperature)
    if a.rollout_max_response_len is None or a.rollout_max_response_len <= 0:
        err("rollout_max_response_len", "is required and must be positive", value=a.rollout_max_response_len)

    # eval datasets (slime rule 1)
    a.eval_datasets = []
    if a.eval_prompt_data:
        vals = list(a.eval_prompt_data)
        if len(vals) == 1:
            vals = ["aime", vals[0]]
        if len(vals) % 2:
            err("eval_prompt_data", "takes NAME PATH pairs (odd count given)", value=a.eval_prompt_data)
        else:
            for name, path in zip(vals[0::2], vals[1::2]):
                if not os.path.exists(path):
                    err("eval_prompt_data", f"eval file for {name!r} does not exist", value=path)
                a.eval_datasets.append((name, path))
    if a.eval_interval is not None and not a.eval_datasets:
        err("eval_interval", "needs eval datasets", "add --eval-prompt-data NAME PATH")
    if a.save_interval is not None and not a.save:
        err("save_interval", "needs --save", "add --save DIR")

    # KL / reward rules (slime rules 3, 7, 8, 11)
    if a.use_kl_loss:
        if not a.ref_load:
            err("ref_load", "--use-kl-loss needs the reference model: --ref-load is not set",
                "create one with `python -m trainstack.tiny.init_model --save DIR ...` and pass --ref-load DIR")
        elif not os.path.exists(a.ref_load):
            err("ref_load", "--use-kl-loss needs the reference model, but the directory does not exist",
                "create it with `python -m trainstack.tiny.init_model --save DIR ...`", value=a.ref_load)
    if a.advantage_estimator in ("reinforce_plus_plus", "reinforce_plus_plus_baseline") and not a.normalize_advantages:
        err("normalize_advantages", f"{a.advantage_estimator} needs --normalize-advantages (slime rule)",
            "add --normalize-advantages")
    if a.eps_clip_high is None:
        a.eps_clip_high = a.eps_clip
    if a.eval_reward_key is None:
        a.eval_reward_key = a.reward_key
    if a.hf_checkpoint:  # the tiny model's "HF dir": tokenizer.json + chat template for custom generate functions
        from .hf_tokenizer import matches

        problem = matches(a.hf_checkpoint)
        if problem:
            err("hf_checkpoint", f"{problem}; the tiny model has no other tokenizer",
                "write the tiny tokenizer there: python -m trainstack.tiny.hf_tokenizer --out DIR", value=a.hf_checkpoint)
    if not a.custom_rm_path and not a.rm_type and not a.custom_generate_function_path:
        err("rm_type", "no reward: set --custom-rm-path or --rm-type (or a --custom-generate-function-path that "
            "sets sample.reward)", "e.g. --custom-rm-path trainstack.tiny.arithmetic.reward")
    if a.use_wandb and not a.wandb_group:
        err("wandb_group", "--use-wandb needs --wandb-group (slime crashes without it)", "add --wandb-group NAME")
    if a.use_tensorboard and not a.tb_project_name and not env.get("TENSORBOARD_DIR"):
        err("tb_project_name", "--use-tensorboard needs --tb-project-name or env TENSORBOARD_DIR")
    if a.max_position_embeddings:  # every prompt + response fits the model (limits.py)
        from .limits import problems as length_problems

        for dest, problem, fix, value in length_problems(a):
            err(dest, problem, fix, value=value)

    # load resolution (slime rule 5)
    a.resume = bool(a.load) and os.path.isfile(os.path.join(a.load, TRACKER)) and not _is_release(a.load)
    if not a.resume:
        a.no_load_optim = True
        a.no_load_rng = True
        a.finetune = True
        if not (a.load and os.path.isfile(os.path.join(a.load, TRACKER))):
            a.load = a.ref_load  # slime: not a Megatron checkpoint -> initial weights from --ref-load
        if a.ref_ckpt_step is not None:
            a.ckpt_step = a.ref_ckpt_step
        if a.start_rollout_id is None:
            a.start_rollout_id = 0
    if errs:
        raise ConfigErrors(errs)


def _is_release(path: str) -> bool:
    try:
        with open(os.path.join(path, TRACKER), encoding="utf-8") as f:
            return f.read().strip() == "release"
    except (OSError, ValueError):  # unreadable, or not text: not a release checkpoint
        return False
