"""Which checkpoints an eval covers, and the stored run that evaluates one of them.

The eval run's command is the source run's stored argv (nothing is recomposed) with only the
dests slime's eval-only path needs replaced: `--num-rollout 0` and an `--eval-interval`
(train.py: `num_rollout == 0 and eval_interval is not None` evaluates the loaded model once),
`--load <source save dir> --ckpt-step N --no-load-optim --no-load-rng`, and `--save` in the eval
run's own directory. Paths under the source run dir (TensorBoard, W&B, an HTTP env's settings
file) move to the eval run dir, so the eval never writes into the source run.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from trainstack.errors import ConfigError, ConfigErrors

# dests an eval may override: what is evaluated and how it is scored, never what was trained
EVAL_EXTRA_DESTS = frozenset({"n_samples_per_eval_prompt", "rollout_seed", "custom_rm_path", "rm_type", "reward_key",
                              "custom_generate_function_path", "custom_config_path", "sglang_server_concurrency",
                              "log_passrate", "group_rm"})
# what the source run's argv loses in an eval run: it trains nothing, saves nothing, exports nothing
DROPPED = ("save_interval", "start_rollout_id", "save_hf", "save_debug_rollout_data", "wandb_run_id", "num_epoch",
           "ref_ckpt_step", "finetune")
NAMESPACES = ("args", "env", "algo", "model")
EVAL_OF = "eval_of"  # RunSpec.extra key of an eval run: what it evaluates


@dataclass(frozen=True)
class EvalOf:
    """What an eval run evaluates (stored in its spec's extra["eval_of"])."""

    run_id: str
    run_dir: str
    iteration: int
    overrides: dict[str, Any]
    tag: str  # "" for the source's own eval settings, else a short hash of the overrides

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, spec: Any) -> "EvalOf | None":
        data = (getattr(spec, "extra", None) or {}).get(EVAL_OF)
        if not isinstance(data, dict):
            return None
        try:
            return cls(str(data["run_id"]), str(data["run_dir"]), int(data["iteration"]),
                       dict(data.get("overrides") or {}), str(data.get("tag") or ""))
        except (KeyError, TypeError, ValueError):
            return None


def is_eval_dest(dest: str) -> bool:
    return dest.startswith("eval_") or dest in EVAL_EXTRA_DESTS


def parse_overrides(tokens: Sequence[str]) -> dict[str, Any]:
    """`KEY=VALUE` (KEY a slime dest, optionally under args./env./algo./model.; VALUE YAML) -> {dest: value};
    one ConfigErrors naming every bad token."""
    import yaml

    from trainstack.config.resolve import check_dest_value
    from trainstack.upstream import argtable as at

    table = at.load_table()
    out: dict[str, Any] = {}
    errors: list[ConfigError] = []
    for token in tokens:
        key, eq, text = token.partition("=")
        dest = key.split(".", 1)[1] if key.split(".", 1)[0] in NAMESPACES and "." in key else key
        if not eq or not dest:
            errors.append(ConfigError(token, "not KEY=VALUE", "e.g. args.n_samples_per_eval_prompt=8", source="command line"))
            continue
        spec = table.get(dest)
        if spec is None:
            near = [d for d in table.suggest(dest) if is_eval_dest(d)]
            errors.append(ConfigError(key, "not a slime argument", f"did you mean {', '.join(near)}?" if near else
                                      "eval settings are slime's eval_* dests (trainstack args --search eval)",
                                      source="command line"))
            continue
        if not is_eval_dest(dest):
            errors.append(ConfigError(key, "an eval evaluates the run's checkpoints as they were trained; only eval "
                                      "settings can change", "change eval_* dests, n_samples_per_eval_prompt, the reward "
                                      "(custom_rm_path, rm_type) or rollout_seed; train another run for the rest",
                                      value=text, source="command line"))
            continue
        try:
            value = yaml.safe_load(text) if text else None
        except yaml.YAMLError as ex:
            errors.append(ConfigError(key, f"the value is not YAML ({ex.__class__.__name__})", "quote it, e.g. "
                                      f"{key}='[name, /path/file.jsonl]'", value=text, source="command line"))
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and spec.value_kind == at.STR:
            value = text
        errors += check_dest_value(spec, value, key, "command line")
        out[dest] = value
    if errors:
        raise ConfigErrors(errors)
    return out


def complete_iterations(save_dir: str) -> list[int]:
    """The source run's complete, published checkpoints, oldest first (never an unpublished newer one)."""
    from trainstack.storage.checkpoints import inspect, is_complete, iterations

    latest = inspect(save_dir).latest_complete
    if latest is None:
        return []
    return sorted(n for n in iterations(save_dir) if n <= latest and is_complete(save_dir, n))


def select(available: list[int], iteration: int | None, every: int | None, every_one: bool, run_id: str) -> list[int]:
    """--iter N (that checkpoint), --every K (checkpoints whose rollout count N+1 is a multiple of K, and the
    last), --all, or by default the newest."""
    if not available:
        raise ConfigErrors([ConfigError("RUN", f"run {run_id} has no complete checkpoint to evaluate",
                                        "train it first (with args.save_interval set), or name another run",
                                        value=run_id)])
    if iteration is not None:
        if iteration not in available:
            raise ConfigErrors([ConfigError("--iter", f"run {run_id} has no complete checkpoint at rollout {iteration}",
                                            f"pick one of {', '.join(map(str, available[-12:]))}", value=iteration)])
        return [iteration]
    if every is not None:
        if every < 1:
            raise ConfigErrors([ConfigError("--every", "must be at least 1", "e.g. --every 50", value=every)])
        picked = [n for n in available if (n + 1) % every == 0]
        return picked if available[-1] in picked else picked + [available[-1]]
    return list(available) if every_one else [available[-1]]


def tag_of(overrides: dict[str, Any]) -> str:
    if not overrides:
        return ""
    return hashlib.sha256(json.dumps(overrides, sort_keys=True, default=str).encode()).hexdigest()[:6]


def eval_run_id(source_id: str, iteration: int, tag: str) -> str:
    tail = f"-eval-{iteration}" + (f"-{tag}" if tag else "")
    return source_id[:128 - len(tail)] + tail


def _move(value: Any, old: str, new: str) -> Any:
    """Every path under `old` moved under `new` (strings, lists and dicts, recursively)."""
    if isinstance(value, str):
        return new + value[len(old):] if value == old or value.startswith(old + "/") else value
    if isinstance(value, list):
        return [_move(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _move(v, old, new) for k, v in value.items()}
    return value


def _argv_with(groups: dict[str, list[str]], values: dict[str, Any]) -> dict[str, list[str]]:
    """The stored argv groups with each dest in `values` replaced (None: removed), everything else as stored."""
    from trainstack.render.command import flag_spans, render_dest
    from trainstack.upstream import argtable as at

    table = at.load_table()
    out: dict[str, list[str]] = {}
    for group, tokens in groups.items():
        kept: list[str] = []
        for flag, vals in flag_spans(list(tokens)):
            if table.flag_to_dest.get(flag) not in values:
                kept += [flag, *vals]
        out[group] = kept
    for dest, value in values.items():
        spec = table[dest]
        out.setdefault(spec.group, [])
        out[spec.group] += render_dest(spec, value)
    return out


def eval_spec(source: Any, iteration: int, overrides: dict[str, Any], runs_root: str | Path,
              launcher: str | None = None) -> Any:
    """The stored run that evaluates `source`'s checkpoint `iteration` (a RunSpec, not yet written)."""
    from trainstack.config.schema import HubSpec
    from trainstack.run.spec import make_provenance

    tag = tag_of(overrides)
    run_id = eval_run_id(source.run_id, iteration, tag)
    run_dir = str((Path(runs_root) / run_id).resolve())
    old = source.run_dir.rstrip("/")
    args = dict(source.args)
    eval_args = {**{k: v for k, v in overrides.items()}}
    if eval_args.get("eval_interval", args.get("eval_interval")) is None:
        eval_args["eval_interval"] = 1  # slime's eval-only path needs one; its value does not matter then
    data = eval_args.get("eval_prompt_data", args.get("eval_prompt_data"))
    if not data and not eval_args.get("eval_config", args.get("eval_config")):
        raise ConfigErrors([ConfigError("eval_prompt_data", f"run {source.run_id} has no eval data, so there is "
                                        "nothing to evaluate", "name a set: trainstack eval RUN "
                                        "env.eval_prompt_data='[name, /path/to/eval.jsonl]'", value=None)])
    load = args.get("save") or str(Path(old) / "checkpoints")
    eval_args.update(num_rollout=0, load=load, ckpt_step=iteration, save=str(Path(run_dir) / "checkpoints"),
                     no_load_optim=True, no_load_rng=True)
    eval_args.update({d: None for d in DROPPED})
    moved = {k: v for k, v in _move(args, old, run_dir).items()}
    moved.update({k: v for k, v in eval_args.items()})
    new_args = {k: v for k, v in moved.items() if v is not None}
    command = _move(dict(source.command), old, run_dir)
    command["groups"] = _argv_with(_move(source.command.get("groups") or {}, old, run_dir), eval_args)
    command["run_id"] = run_id
    env = dict(command.get("env") or {})
    if env.get("WANDB_RUN_ID"):  # the eval's own W&B run, never the source's
        from trainstack.config.run_ids import wandb_run_id

        env["WANDB_RUN_ID"] = wandb_run_id(run_id)
    command["env"] = env
    config = _move(dict(source.config), old, run_dir)
    config["run_id"] = run_id
    config.pop("eval", None)  # an eval run starts no evals of its own
    sources = dict(source.arg_sources)
    sources.update({d: "trainstack eval (command line)" if d in overrides else "trainstack eval: eval-only run"
                    for d in eval_args})
    of = EvalOf(source.run_id, old, iteration, dict(overrides), tag)
    return dataclasses.replace(
        source, run_id=run_id, name=f"{source.name}-eval", run_dir=run_dir, launcher=launcher or source.launcher,
        command=command, args=new_args, arg_sources=sources, config=config,
        resume=dataclasses.replace(source.resume, mode="auto"),  # an eval run never has checkpoints to require
        overrides=[*source.overrides, *(f"eval:{k}={v}" for k, v in overrides.items())],
        provenance=make_provenance(source.provenance.slime_commit, source.provenance.cwd),
        extra={EVAL_OF: of.to_json()}, hub=HubSpec())
