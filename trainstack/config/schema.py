"""Typed orchestration settings that sit beside the flat `args` namespace.

YAML stays for people; code gets these dataclasses. ``to_typed`` converts a config node and
reports unknown keys (with did-you-mean), wrong types and bad choices as ``ConfigError``s
instead of Hydra/OmegaConf tracebacks.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from trainstack.config.backends import BACKENDS
from trainstack.errors import ConfigError
from trainstack.registry import names as _launcher_names
from trainstack.secrets import is_secret_name

LAUNCHER_NAMES = _launcher_names()  # the `trainstack.launchers` entry points (trainstack/registry.py)

GROUPS = ("model", "algo", "env", "cluster", "experiment")
DEST_NAMESPACES = ("model", "algo", "env", "args")  # flat maps of slime dests (+ `meta`)


@dataclass
class ClusterSpec:
    """Where a run executes: how many nodes/GPUs exist and how they are shared. What only one
    launcher needs (a SLURM partition, a Ray address, a Lium pod) is that launcher's own typed
    settings, written under `cluster.<launcher>:` (trainstack/launch/base.py `Launcher.Settings`)."""

    name: str
    backend: str = "slime"  # slime: slime/train.py; tiny: trainstack's CPU trainer
    launcher: str = "local"
    accelerator: str = "gpu"
    gpu_type: Optional[str] = None
    num_nodes: int = 1
    gpus_per_node: int = 8
    colocate: bool = True  # training and rollout share the GPUs (offload between phases)
    rollout_num_gpus: Optional[int] = None  # GPUs for SGLang engines when not colocated
    has_nvlink: Optional[bool] = None
    # cluster.<launcher>: the selected launcher's settings, checked against its Settings (all fields, defaults filled)
    settings: dict = field(default_factory=dict)

    CHOICES = {
        "backend": tuple(BACKENDS),
        "launcher": LAUNCHER_NAMES,
        "accelerator": ("cpu", "gpu"),
    }
    # keys that were cluster fields before launchers owned their settings: where they live now
    MOVED = {"partition": "cluster.slurm.partition", "account": "cluster.slurm.account",
             "time_min": "cluster.slurm.time_min", "mem_gb": "cluster.slurm.mem_gb",
             "cpus_per_node": "cluster.slurm.cpus_per_node", "ray_address": "cluster.ray_job.address",
             "start_ray_head": "cluster.ray_job.start_head",
             "extra": "the launcher's settings: cluster.slurm.sbatch (sbatch options), cluster.lium.pod (the pod), "
                      "cluster.<launcher>.<key> (what was cluster.extra.launcher.<key>)"}

    @property
    def total_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @classmethod
    def moved_key(cls, rest: str) -> str | None:
        """Where an old cluster key (`rest`: the part after `cluster.`) lives now; None if it never moved."""
        head, _, sub = rest.partition(".")
        if head != "extra" or not sub:
            return cls.MOVED.get(head)
        kind, _, leaf = sub.partition(".")
        new = {"launcher": "cluster.<launcher>", "lium": "cluster.lium.pod", "sbatch": "cluster.slurm.sbatch"}.get(kind)
        return (f"{new}.{leaf}" if leaf else new) if new else f"cluster.slurm.sbatch.{sub}"

    @classmethod
    def extra_keys(cls) -> tuple[str, ...]:
        """Keys of a cluster node that are not fields: one settings block per launcher."""
        return LAUNCHER_NAMES

    @classmethod
    def from_node(cls, node: dict, prefix: str, source_of: typing.Callable[[str], str]):
        """The core fields, then the selected launcher's settings block (`cluster.<launcher>`, or the
        stored `settings` of a spec) checked against that launcher's Settings; moved keys refused
        with where they live now; blocks of other launchers are left alone (a preset may carry several)."""
        node = dict(node)
        errors = [ConfigError(f"{prefix}{k}", "moved to the settings of the launcher that uses it",
                              f"use {cls.MOVED[k]}", value=node.get(k) if k != "extra" else None,
                              source=source_of(f"{prefix}{k}")) for k in list(node) if k in cls.MOVED]
        for k in list(node):
            if k in cls.MOVED:
                node.pop(k)
        blocks = {k: node.pop(k) for k in list(node) if k in LAUNCHER_NAMES}
        stored = node.pop("settings", None)
        core, errs = _fields_to_typed(cls, node, prefix, source_of)
        errors += errs
        if core is None:
            return None, errors
        block = stored if stored is not None else blocks.get(core.launcher)
        key = f"{prefix}{core.launcher}"
        if block is None:
            block = {}
        if not isinstance(block, dict):
            errors.append(ConfigError(key, "must be a mapping of the launcher's settings", f"check {source_of(key)}",
                                      value=block, source=source_of(key)))
            return None, errors
        from trainstack.errors import ConfigErrors
        from trainstack.registry import launcher_class

        try:
            settings_cls = launcher_class(core.launcher).Settings
        except ConfigErrors as err:
            return None, errors + err.errors
        obj, errs = to_typed(settings_cls, block, f"{key}.", source_of)
        if errs or errors:
            return None, errors + errs
        core.settings = dataclasses.asdict(obj)
        return core, []


@dataclass
class PathsSpec:
    """Roots; relative values are taken from the directory trainstack was started in."""

    runs_root: str = "runs"
    models_root: str = "models"
    data_root: str = "data"

    def problems(self) -> list[tuple[str, Any, str, str]]:
        """An empty root would put runs (or data) straight into the working directory."""
        return [(k, getattr(self, k), "is empty", f"set paths.{k} to a directory, e.g. paths.{k}={k.split('_')[0]}")
                for k in ("runs_root", "models_root", "data_root") if not getattr(self, k).strip()]


@dataclass
class SlimeSpec:
    root: Optional[str] = None  # None: trainstack.upstream.slime_root.resolve's default (./slime, else the checkout's submodule)
    megatron_root: Optional[str] = None
    entrypoint: Optional[str] = None  # train.py | train_async.py; default from algo meta

    CHOICES = {"entrypoint": (None, "train.py", "train_async.py")}


@dataclass
class RuntimeEnvSpec:
    env_vars: dict[str, Optional[Union[str, int, float, bool]]] = field(default_factory=dict)  # scalars (null: unset)
    pythonpath: list[str] = field(default_factory=list)


@dataclass
class ResumeSpec:
    """What relaunching an existing run_id does (see docs/resume.md)."""

    # auto: resume if a complete checkpoint exists; never: refuse if one does; must: refuse if none;
    # fresh: start over from zero knowingly (earlier checkpoints moved aside, kept)
    mode: str = "auto"
    allow_changes: list[str] = field(default_factory=list)  # training-relevant dests allowed to differ on resume
    lease_ttl_s: float = 120.0  # one writer per run: a dead holder's lease is taken over after this (>= 3 x (grace_s + 2))
    grace_s: float = 30.0  # after SIGINT/SIGTERM, time for a final checkpoint before the group is killed

    CHOICES = {"mode": ("auto", "never", "must", "fresh")}
    MAX_S = 7 * 86400.0  # longer would block a dead run for a week (and overflow the renewal thread's waits)
    # names that are not dests: start over although checkpoints were recorded (resume.py), move a run to
    # another launcher (binding.py)
    CONSENTS = ("checkpoints", "launcher")

    def problems(self) -> list[tuple[str, Any, str, str]]:
        """(key, value, problem, fix) for values the types alone do not rule out."""
        out: list[tuple[str, Any, str, str]] = []
        for key in ("lease_ttl_s", "grace_s"):
            if getattr(self, key) > self.MAX_S:
                out.append((key, getattr(self, key), f"must be at most {self.MAX_S:.0f} seconds (7 days)",
                            f"use the default ({'120' if key == 'lease_ttl_s' else '30'})"))
        from trainstack.upstream import argtable as at

        table = at.load_table()
        for name in self.allow_changes:
            if name not in table and name not in self.CONSENTS:
                close = table.suggest(name)
                out.append(("allow_changes", name, f"{name!r} is not a slime argument, so it can never change",
                            (f"did you mean {close[0]}? " if close else "") + "name slime dests, e.g. "
                            "resume.allow_changes=[lr,num_rollout] (see `trainstack args --search WORD`)"))
        return out


@dataclass
class TrackingSpec:
    """Metrics identity: TensorBoard files in the run dir; W&B run id derived from run_id."""

    tensorboard: bool = True  # --use-tensorboard with TENSORBOARD_DIR=<run_dir>/tensorboard
    wandb_project: Optional[str] = None  # default for --wandb-project when args.use_wandb=true


@dataclass
class HubSpec:
    """Checkpoints to the Hugging Face Hub in the background, and resume from there (docs/hub.md).
    The token comes from HF_TOKEN or the Hugging Face token cache (`hf auth login`), never from here."""

    repo_id: Optional[str] = None  # <user>/<repo>: turns sync on (one folder per run_id inside it)
    private: bool = True  # when the repo is created
    every: int = 1  # push every Nth complete checkpoint; the run's last checkpoint always
    keep: Optional[int] = None  # checkpoints kept on the Hub's main branch (older ones deleted); null: all
    push_rollouts: bool = False  # slime saves rollout data into the run dir; pushed with the checkpoints
    restore: bool = True  # resume from the Hub when it has a newer complete checkpoint than the run dir
    dry_run_lookup: bool = False  # a dry run reads the Hub's pointer too (else it makes no network call)
    final_timeout_s: float = 600.0  # clean finish: how long the last push may take before the run reports
    retry_max_s: float = 60.0  # failed pushes are retried with backoff up to this interval

    REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")

    @property
    def enabled(self) -> bool:
        return bool(self.repo_id)

    def problems(self) -> list[tuple[str, Any, str, str]]:
        """(key, value, problem, fix) for values the types alone do not rule out."""
        out: list[tuple[str, Any, str, str]] = []
        if self.repo_id is not None and not self.REPO_ID.match(self.repo_id):
            out.append(("repo_id", self.repo_id, "not a Hub repo id", "use <user or org>/<repo name>, e.g. "
                        "hub.repo_id=alice/qwen3-rl-checkpoints"))
        if self.every < 1:
            out.append(("every", self.every, "must be at least 1", "hub.every=1 pushes every checkpoint"))
        if self.keep is not None and self.keep < 1:
            out.append(("keep", self.keep, "must be at least 1 or null", "hub.keep=null keeps every checkpoint"))
        for key in ("final_timeout_s", "retry_max_s"):
            if not 0 < getattr(self, key) <= ResumeSpec.MAX_S:
                out.append((key, getattr(self, key), "must be positive and at most 7 days",
                            f"set hub.{key} to seconds > 0"))
        if self.push_rollouts and not self.enabled:
            out.append(("push_rollouts", True, "rollout data is pushed to hub.repo_id, which is not set",
                        "set hub.repo_id=<user>/<repo>, or drop hub.push_rollouts"))
        if self.enabled:
            from trainstack.extras import missing

            if missing("hub"):
                out.append(("repo_id", self.repo_id, "Hub sync needs the `hub` extra (the huggingface_hub package)",
                            "pip install 'trainstack[hub]'"))
        return out


@dataclass
class EvalSpec:
    """Background evaluation of a run's checkpoints as separate eval-only runs (docs/eval.md): training never
    waits for them. The eval feature (trainstack/evals) reads these from the stored config."""

    every: Optional[int] = None  # evaluate the checkpoint of every rollout count that is a multiple of this; null: off
    overrides: list[str] = field(default_factory=list)  # eval settings of those runs, KEY=VALUE as `trainstack eval`
    launcher: Optional[str] = None  # where they run: null = a local process beside the launcher, else a launcher
    wait_s: float = 600.0  # after the trainer ends: how long the launcher waits for evals still running

    def problems(self) -> list[tuple[str, Any, str, str]]:
        out: list[tuple[str, Any, str, str]] = []
        if self.every is not None and self.every < 1:
            out.append(("every", self.every, "must be at least 1 or null", "eval.every=50 evaluates every 50th rollout's "
                        "checkpoint; eval.every=null turns background evaluation off"))
        if not 0 <= self.wait_s <= ResumeSpec.MAX_S:
            out.append(("wait_s", self.wait_s, f"must be 0..{ResumeSpec.MAX_S:g} seconds",
                        "eval.wait_s=600 waits up to 10 minutes; 0 does not wait"))
        return out


# Top-level keys of the primary config and what they hold.
ROOT_SECTIONS: dict[str, Any] = {
    "cluster": ClusterSpec,
    "paths": PathsSpec,
    "slime": SlimeSpec,
    "runtime_env": RuntimeEnvSpec,
    "resume": ResumeSpec,
    "tracking": TrackingSpec,
    "hub": HubSpec,
    "eval": EvalSpec,
}
ROOT_SCALARS = {"name": Optional[str], "run_id": Optional[str], "dry_run": Union[bool, Literal["short"]],
                "output": Optional[str],
                "objective": Optional[str]}  # objective: what a sweep point returns (trainstack/run/result.py)
ROOT_SCALAR_FIXES = {"dry_run": "dry_run=true (everything), dry_run=short (the verdict and the summary) or "
                                "dry_run=false (launch)"}
ROOT_KEYS = set(ROOT_SECTIONS) | set(ROOT_SCALARS) | set(DEST_NAMESPACES) | {"hydra", "experiment"}


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if type(None) not in typing.get_args(tp):
            return " or ".join(_type_name(a) for a in inner)
        return _type_name(inner[0]) + " or null"
    if origin in (list, dict):
        args = typing.get_args(tp)
        if origin is list and args:
            return f"list of {_type_name(args[0])}"
        if origin is dict and len(args) == 2:
            return f"mapping of {_type_name(args[0])} to {_type_name(args[1])}"
    if tp is float:
        return "finite number"
    return getattr(tp, "__name__", str(tp))


def check_value(tp: Any, value: Any) -> bool:
    """Strict check: YAML/CLI give us real ints/bools/strings, no silent coercion."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:  # Optional[float] and `float | None` alike
        args = typing.get_args(tp)
        if value is None:
            return type(None) in args
        return any(check_value(a, value) for a in args if a is not type(None))
    if tp is Any:
        return True
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(tp))
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:  # NaN and inf are no durations, sizes or rates
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if tp is str:
        return isinstance(value, str)
    if tp in (dict, list):
        return isinstance(value, tp)
    if origin in (list, dict):  # list[str], dict[str, ...]: the elements too
        if not isinstance(value, origin):
            return False
        args = typing.get_args(tp)
        if origin is list:
            return not args or all(check_value(args[0], v) for v in value)
        return len(args) != 2 or all(check_value(args[0], k) and check_value(args[1], v) for k, v in value.items())
    return True


def unknown_key_error(key: str, known: typing.Iterable[str], prefix: str, source: str) -> ConfigError:
    close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
    fix = ("did you mean " + " or ".join(f"'{prefix}{c}'" for c in close) + "?") if close else (
        "known keys: " + ", ".join(sorted(known))
    )
    return ConfigError(f"{prefix}{key}", "unknown key", fix, source=source)


def to_typed(cls: type, node: dict, prefix: str, source_of: typing.Callable[[str], str]):
    """Build dataclass ``cls`` from a plain dict; returns (instance or None, errors). A class with a
    ``from_node`` classmethod (ClusterSpec: the launcher's settings) builds itself."""
    if hasattr(cls, "from_node"):
        return cls.from_node(node, prefix, source_of)
    return _fields_to_typed(cls, node, prefix, source_of)


@functools.lru_cache(maxsize=None)
def _hints_and_fields(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field]]:
    """A dataclass's resolved type hints and fields (``get_type_hints`` re-evaluates every
    annotation string on each call: 11 classes x 256 sweep points)."""
    return typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}


def _fields_to_typed(cls: type, node: dict, prefix: str, source_of: typing.Callable[[str], str]):
    hints, fields = _hints_and_fields(cls)
    choices = getattr(cls, "CHOICES", {})
    errors: list[ConfigError] = []
    kwargs = {}
    for key, value in node.items():
        full = f"{prefix}{key}"
        if key not in fields and is_secret_name(key):
            errors.append(ConfigError(full, "secrets must not be put in configs (they end up in saved configs, logs "
                                      "and command lines)", "export it in the launching shell instead (HF_TOKEN=..., "
                                      "or `hf auth login` for the Hugging Face token cache)", value="<redacted>",
                                      source=source_of(full)))
            continue
        if key not in fields:
            errors.append(unknown_key_error(key, fields, prefix, source_of(full)))
            continue
        tp = hints[key]
        if not check_value(tp, value):
            errors.append(ConfigError(full, f"expected {_type_name(tp)}, got {type(value).__name__}",
                                      f"set {full} to a {_type_name(tp)}", value=value, source=source_of(full)))
            continue
        if key in choices and value not in choices[key]:
            opts = ", ".join(str(c) for c in choices[key] if c is not None)
            errors.append(ConfigError(full, "not one of the allowed values", f"use one of: {opts}",
                                      value=value, source=source_of(full)))
            continue
        kwargs[key] = value
    missing = [n for n, f in fields.items() if n not in kwargs and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
    for n in missing:
        if not any(e.key == f"{prefix}{n}" for e in errors):
            errors.append(ConfigError(f"{prefix}{n}", "is required", f"set {prefix}{n}", source=source_of(prefix + n)))
    if errors:
        return None, errors
    obj = cls(**kwargs)
    from trainstack.config.setting_domains import problems_of  # ports, prices, counts, URLs, images: the domains

    for key, value, problem, fix in [*(obj.problems() if hasattr(obj, "problems") else []), *problems_of(obj, prefix)]:
        errors.append(ConfigError(f"{prefix}{key}", problem, fix, value=value, source=source_of(f"{prefix}{key}")))
    return (None, errors) if errors else (obj, [])
