"""Composed Hydra config -> ResolvedRun: one flat, typed, absolute map of slime dests.

Precedence of dests, by who said it: command line > experiment > group files (model < algo <
env) > cluster-derived (see merge_layers). Every value remembers where
it came from (a group file, an experiment, the command line, or trainstack's derivation) so
errors can say so.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainstack.upstream import argtable as at
from trainstack.config import meta_schema
from trainstack.errors import ConfigError, ConfigErrors
from trainstack.config.input_identity import excluded_dests
from trainstack.storage import layout
from trainstack.secrets import env_fix, is_secret_name, redact_override, secret_in_value
from trainstack.upstream.slime_root import resolve as resolve_slime_root
from trainstack.upstream.renames import hint_for_dest
from trainstack.upstream.select import activate_for_root
from trainstack.config.schema import (
    DEST_NAMESPACES, EvalSpec, HubSpec, ResumeSpec, TrackingSpec, ROOT_KEYS, ROOT_SCALAR_FIXES, ROOT_SCALARS,
    ROOT_SECTIONS, ClusterSpec, PathsSpec, RuntimeEnvSpec, SlimeSpec, check_value, to_typed, unknown_key_error)

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # a checkout, or site-packages when pip-installed
# The config tree ships inside the package (trainstack/conf: a link to conf/ in a checkout, package
# data in a wheel), so `trainstack run` works from any directory.
CONF_DIR = (Path(__file__).resolve().parents[1] / "conf").resolve()
PRIMARY_CONFIG = "config"  # conf/config.yaml: Hydra's config_name


def _register_conf_resolvers() -> None:
    """conf/'s own interpolations (`${trainstack_prog:}` in its help page) resolve wherever the tree is composed
    and resolved whole (run.py, `Run.compose`, a Hydra harness): registered with the module that names the tree."""
    from trainstack.config.help_page import register_prog

    register_prog()


_register_conf_resolvers()

# Dests whose values are filesystem paths (rendered absolute: Ray workers run in a temp dir).
PATH_DESTS = frozenset({
    "hf_checkpoint", "ref_load", "load", "save", "prompt_data",
    "opd_teacher_load", "custom_config_path", "eval_config", "megatron_config_path", "sglang_config",
    "dump_details", "wandb_dir", "save_hf", "tokenizer_model", "data_path", "save_debug_rollout_data",
})
# nargs lists whose odd positions are paths (`--eval-prompt-data name path [name path ...]`).
PAIRED_PATH_DESTS = frozenset({"eval_prompt_data"})

# Dests that do not change what is learned (resource layout, parallelism, performance knobs, the
# SGLang engines, logging, saved outputs, input paths, run length), each by name with the reason in
# trainstack/data/run_identity.json (trainstack/config/input_identity.py). They are left out of the run_id hash so
# moving a run to more GPUs or renaming a directory keeps its identity (and its checkpoints); a dest
# not listed there, a new one included, counts.
NON_TRAINING_DESTS = excluded_dests()

@lru_cache(maxsize=32)
def _experiment_tree(path: str) -> dict:
    """An experiment file's keys, unresolved (its interpolations point into the full config)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f) or {}
    except OSError:
        return {}


@lru_cache(maxsize=64)
def _override_keys(overrides: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for o in overrides:
        if "=" not in o:
            continue
        key, _ = o.split("=", 1)
        out[key.lstrip("+~")] = redact_override(o.lstrip("+"))
    return out


def config_dirs(hydra_node: Any) -> list[str]:
    """The file config sources of a composed config's `hydra` node, in Hydra's search order."""
    try:
        sources = hydra_node.runtime.config_sources or []
        return [str(s.path) for s in sources if s.schema == "file" and s.path]
    except Exception:  # a node without runtime info (a stored config): the packaged conf/ only
        return []


@lru_cache(maxsize=256)
def _located(dirs: tuple[str, ...], conf_dir: str, group: str, opt: str) -> tuple[str, str]:
    """(how to name it, its path) of `<group>/<opt>.yaml`: the first search dir that has it (Hydra's
    rule); `conf/...` for the packaged tree."""
    rel = f"{group}/{opt}.yaml"
    for d in dirs:
        path = os.path.join(d, rel)
        if os.path.isfile(path):
            return (f"conf/{rel}", path) if os.path.realpath(d) == os.path.realpath(conf_dir) else (path, path)
    return f"conf/{rel}", os.path.join(conf_dir, rel)


def is_experiment_source(source: str) -> bool:
    """A provenance naming an experiment file (packaged, or in a --config-dir)."""
    head = source.split(" (", 1)[0]
    return head.startswith("conf/experiment/") or (head.endswith(".yaml") and "/experiment/" in head
                                                    and not head.startswith("command line"))


def is_group_file_source(source: str) -> bool:
    """A provenance naming a model/algo/env file (packaged, or in a --config-dir)."""
    import re

    head = source.split(" (", 1)[0]
    return bool(re.search(r"(^|/)(model|algo|env)/[^/]+\.yaml$", head)) and not head.startswith("command line")


@dataclass
class Origin:
    """What Hydra knows about how the config was made."""

    choices: dict[str, str | None] = field(default_factory=dict)  # group -> option
    overrides: list[str] = field(default_factory=list)  # task overrides as given (after our rewrite)
    cwd: str = field(default_factory=os.getcwd)
    conf_dir: Path = CONF_DIR
    # Hydra's file config sources in search order (the packaged conf/, then --config-dir ones): a group
    # option or an experiment is attributed to the file Hydra took it from
    search_dirs: list[str] = field(default_factory=list)

    @classmethod
    def from_hydra(cls, hydra_node: Any, cwd: str | None = None) -> "Origin":
        """Choices and overrides as written (an override's `${...}` is resolved, and reported, later)."""
        from omegaconf import OmegaConf

        def raw(node: Any) -> Any:
            return OmegaConf.to_container(node, resolve=False) if node is not None else None

        choices: dict[str, Any] = raw(hydra_node.runtime.choices) or {}
        return cls(choices={k: v for k, v in choices.items() if not k.startswith("hydra")},
                   overrides=[str(o) for o in raw(hydra_node.overrides.task) or []],
                   cwd=cwd or hydra_node.runtime.cwd or os.getcwd(), search_dirs=config_dirs(hydra_node))

    def override_keys(self) -> dict[str, str]:
        """dotted key -> the override text, as the user would recognise it (made once per list of
        overrides: source_of asks for every dest of a run)."""
        return dict(_override_keys(tuple(self.overrides)))

    def group_file(self, group: str) -> str:
        """The file a group's option came from: `conf/<group>/<opt>.yaml` when it is a packaged one,
        else its path in the --config-dir that holds it."""
        opt = self.choices.get(group)
        if not opt:
            return ""
        return _located(tuple(self.search_dirs), str(self.conf_dir), group, str(opt))[0]

    def experiment_sets(self, dotted: str) -> bool:
        exp = self.choices.get("experiment")
        if not exp:
            return False
        path = _located(tuple(self.search_dirs), str(self.conf_dir), "experiment", str(exp))[1]
        node: Any = _experiment_tree(path)
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    def source_of(self, dotted: str) -> str:
        """Where the value at ``dotted`` came from: command line > experiment > group file > primary."""
        ov = _override_keys(tuple(self.overrides))
        if dotted in ov:
            return f"command line `{ov[dotted]}`"
        if self.experiment_sets(dotted):
            return self.group_file("experiment")
        head = dotted.split(".", 1)[0]
        if head in self.choices and self.choices.get(head):
            return self.group_file(head)
        return "conf/config.yaml"


@dataclass
class ResolvedRun:
    """Everything needed to render and launch one slime run."""

    name: str
    run_id: str
    args: dict[str, Any]  # dest -> value, None meaning "not emitted"
    provenance: dict[str, str]  # dest -> where it came from
    cluster: ClusterSpec
    paths: PathsSpec
    slime: SlimeSpec
    runtime_env: RuntimeEnvSpec
    entrypoint: str
    meta: dict[str, dict]  # model/algo/env meta blocks
    origin: Origin
    config: dict  # the whole resolved config tree (plain containers), for saving and diffing
    run_dir: str = ""
    resume: ResumeSpec = field(default_factory=ResumeSpec)
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    hub: HubSpec = field(default_factory=HubSpec)
    eval: EvalSpec = field(default_factory=EvalSpec)  # background evaluation (the evals feature reads it)
    warnings: list[str] = field(default_factory=list)
    layer_of: dict[str, str] = field(default_factory=dict)  # dest -> model | algo | env | args

    def source(self, dest: str) -> str:
        return self.provenance.get(dest, "slime default")

    @property
    def inputs(self) -> dict[str, Any]:
        """Input paths and content fingerprints (the resume plan compares them; trainstack/config/input_identity.py)."""
        from trainstack.config.input_identity import inputs_of

        return inputs_of(self.args)

    def key(self, dest: str) -> str:
        """How the user addresses a dest: the namespace it was set in, else args."""
        return f"{self.layer_of.get(dest, 'args')}.{dest}"


def absolute(path: str, cwd: str) -> str:
    if not isinstance(path, str) or "://" in path:
        return path
    p = Path(os.path.expanduser(path))
    if p.is_absolute():
        return str(p)
    try:
        return os.path.realpath(Path(cwd) / p)  # a symlink loop stays as written: the host checks name it
    except (ValueError, OSError):  # a NUL byte: the path checks name it
        return os.path.abspath(Path(cwd) / p)


def check_dest_value(spec: at.ArgSpec, value: Any, key: str, source: str) -> list[ConfigError]:
    """Type, nargs and choices of one dest value, as slime's argparse would judge the rendered token."""
    if value is None:
        return []
    bad = lambda problem, fix: [ConfigError(key, problem, fix, value=value, source=source)]  # noqa: E731
    if spec.is_switch:
        if not isinstance(value, bool):
            return bad(f"{spec.flag} is a switch: expected true or false", f"set {key}=true or {key}=false")
        can_set = spec.true_flag if value else spec.false_flag
        if can_set is None and spec.default is not value and not (value is False and spec.default is None):
            return bad(f"slime has no flag that sets {spec.dest} to {str(value).lower()} (its default is "
                       f"{spec.default!r})", f"remove {key}")
        return []
    values = value if isinstance(value, list) else [value]
    if spec.kind == at.APPEND and spec.nargs is not None and isinstance(value, list):
        for occurrence in value:  # normalised to one list per repeated flag
            n = len(occurrence) if isinstance(occurrence, list) else 1
            if n == 0 or (spec.nargs.isdigit() and n != int(spec.nargs)):
                return bad(f"each {spec.flag} takes {spec.nargs if spec.nargs.isdigit() else 'one or more'} "
                           f"value(s); got {n}", f"write {key}=[[v1, ...], [v1, ...]], one list per {spec.flag}")
        values = [v for occ in value for v in (occ if isinstance(occ, list) else [occ])]
    if spec.is_list:
        if not isinstance(value, list):
            return bad(f"{spec.flag} takes a list", f"write {key}=[a,b]")
        if spec.nargs == "+" and not value:
            return bad(f"{spec.flag} needs at least one value", f"give values or set {key}=null")
        if spec.kind != at.APPEND and spec.nargs is not None and spec.nargs.isdigit() and len(value) != int(spec.nargs):
            return bad(f"{spec.flag} takes exactly {spec.nargs} values, got {len(value)} (argparse refuses other counts)",
                       f"write {key}=[{', '.join(['v'] * int(spec.nargs))}]")
    elif isinstance(value, list) and spec.value_kind not in (at.JSON, at.ANY):
        return bad(f"{spec.flag} takes one value, not a list", f"give a single {spec.value_kind}")
    if spec.value_kind == at.JSON:
        try:
            json.dumps(value)
        except TypeError:
            return bad("not JSON-serialisable", "give a mapping/list of plain values")
        return []
    for v in values:
        kind = spec.value_kind
        ok = {
            at.INT: isinstance(v, int) and not isinstance(v, bool),
            at.FLOAT: isinstance(v, (int, float)) and not isinstance(v, bool),
            at.STR: isinstance(v, (str, int, float)) and not isinstance(v, bool),
            at.BOOL: isinstance(v, bool),
            at.ANY: not isinstance(v, dict),
        }.get(kind, True)
        if not ok:
            return bad(f"{spec.flag} expects {kind}, got {type(v).__name__}", f"set {key} to a {kind}")
        if isinstance(v, float) and not math.isfinite(v):
            return bad(f"{spec.flag} must be a finite number, not {v}", f"set {key} to a finite value")
        if isinstance(v, str) and v.startswith("-") and (spec.is_list or spec.kind == at.APPEND):
            return bad(f"{spec.flag} takes several tokens and argparse reads a value starting with '-' as a flag",
                       f"write the value of {key} without a leading '-'")
        if kind == at.BOOL and v is False and not spec.is_list:
            return bad(f"{spec.flag} uses argparse type=bool, which reads any value as true",
                       f"remove {key} (its default is {spec.default!r})")
    choices = spec.choice_values()
    if choices is not None:
        for v in values:
            if v not in choices:
                return bad(f"{spec.flag} must be one of: {', '.join(map(str, choices))}",
                           f"pick one of the allowed values for {key}")
    return []


def _plain(node: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(node, resolve=True) if node is not None else None


def derive_cluster_args(cluster: ClusterSpec, layered: dict[str, Any]) -> tuple[dict[str, Any], list[ConfigError]]:
    """actor/rollout GPU layout from the cluster, unless the user set it in args."""
    out: dict[str, Any] = {}
    errors: list[ConfigError] = [
        ConfigError(f"cluster.{k}", "must be at least 1", f"set cluster.{k} to the cluster's {what}", value=v)
        for k, what, v in (("num_nodes", "node count", cluster.num_nodes),
                           ("gpus_per_node", "GPUs per node", cluster.gpus_per_node))
        if not isinstance(v, int) or v < 1]
    if errors:  # everything below divides by them
        return out, errors
    train_only = bool(layered.get("debug_train_only"))
    rollout_only = bool(layered.get("debug_rollout_only"))
    out["actor_num_nodes"] = cluster.num_nodes
    out["actor_num_gpus_per_node"] = cluster.gpus_per_node
    if cluster.colocate and not train_only:
        out["colocate"] = True
        if cluster.gpus_per_node < 8:  # slime#2012: engines bind to the head IP otherwise
            out["num_gpus_per_node"] = cluster.gpus_per_node
    elif not train_only and not rollout_only:
        rollout = cluster.rollout_num_gpus
        if rollout is None and isinstance(layered.get("rollout_num_gpus"), int):  # args.rollout_num_gpus=N
            rollout = layered["rollout_num_gpus"]
        if rollout is None:
            errors.append(ConfigError(
                "cluster.rollout_num_gpus", "training and rollout are on separate GPUs (cluster.colocate=false) "
                "but nothing says how many GPUs the SGLang engines get",
                "set cluster.rollout_num_gpus=N, or cluster.colocate=true", related={"cluster.colocate": False}))
        elif cluster.num_nodes == 1 and not 0 < rollout < cluster.gpus_per_node:
            errors.append(ConfigError(
                "cluster.rollout_num_gpus", f"on one node with {cluster.gpus_per_node} GPUs, {rollout} rollout GPUs "
                "leave none (or a negative number) for training", f"use 1..{cluster.gpus_per_node - 1}, or "
                "cluster.colocate=true", value=rollout))
        elif cluster.num_nodes == 1:
            out["actor_num_gpus_per_node"] = cluster.gpus_per_node - rollout
            out["rollout_num_gpus"] = rollout
        elif not 0 < rollout < cluster.total_gpus:
            errors.append(ConfigError(
                "cluster.rollout_num_gpus", f"{rollout} rollout GPUs leave none of the cluster's {cluster.total_gpus} "
                "for training", f"use 1..{cluster.total_gpus - 1}, or cluster.colocate=true", value=rollout))
        elif rollout % cluster.gpus_per_node == 0:
            out["actor_num_nodes"] = cluster.num_nodes - rollout // cluster.gpus_per_node
            out["rollout_num_gpus"] = rollout
        else:
            # slime places actor + rollout one-GPU bundles sorted by node (ray/placement_group.py:47-48, :84-88)
            # and gives the trainer the first actor_num_nodes x actor_num_gpus_per_node of them (:101, :118, :126): the
            # trainer's GPUs fill the first nodes and part of the next, the engines take the rest (12 of 2 x 8)
            out["actor_num_nodes"] = 1
            out["actor_num_gpus_per_node"] = cluster.total_gpus - rollout
            out["rollout_num_gpus"] = rollout
    return out, errors


def normalise_append(spec: at.ArgSpec, value: Any) -> Any:
    """An append action that takes values (`--router-prefill URL [PORT]`, repeated) holds one list per
    occurrence in slime's namespace: `[url1, url2]` is written as `[[url1], [url2]]`."""
    if spec.kind == at.APPEND and value is not None and not isinstance(value, list):
        value = [value]  # one occurrence: `args.router_prefill=URL`
    if spec.kind != at.APPEND or spec.nargs is None or not isinstance(value, list):
        return value
    return [v if isinstance(v, list) else [v] for v in value]


DEST_LAYERS = ("model", "algo", "env", "args")


def source_rank(source: str) -> int:
    """Who said it: the command line beats an experiment file beats the group files."""
    if source.startswith("command line"):
        return 3
    if is_experiment_source(source):
        return 2
    return 1


def merge_layers(layers: dict[str, dict[str, Any]], origin: Origin
                 ) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """One value per dest, by who said it (command line > experiment > group files), whichever
    namespace it was written under; within a rank the later layer wins (model < algo < env < args).
    The provenance of a dest that replaced another value says what it replaced."""
    merged: dict[str, Any] = {}
    provenance: dict[str, str] = {}
    layer_of: dict[str, str] = {}
    rank_of: dict[str, int] = {}
    said_by: dict[str, str] = {}  # the winning source, before " (over ...)" notes
    for ns in DEST_LAYERS:
        for dest, value in layers.get(ns, {}).items():
            source = origin.source_of(f"{ns}.{dest}")
            rank = max(source_rank(source), 2 if ns == "args" else 1)
            if dest in merged and rank < rank_of[dest]:
                provenance[dest] += f" (over {value!r} from {source})"
                continue
            note = f" (over {merged[dest]!r} from {said_by[dest]})" if dest in merged and merged[dest] != value else ""
            merged[dest], said_by[dest], provenance[dest] = value, source, source + note
            layer_of[dest], rank_of[dest] = ns, rank
    return merged, provenance, layer_of


def is_train_only(args: dict[str, Any]) -> bool:
    """slime skips its SGLang parser (and engines) for these runs (`_pre_parse_mode`)."""
    return bool(args.get("debug_train_only")) or args.get("load_debug_rollout_data") is not None


def drop_preset_sglang_dests(merged: dict[str, Any], provenance: dict[str, str], table: at.ArgTable) -> list[str]:
    """In a train-only run slime never parses `--sglang-*`/`--router-*` flags, so a model preset's
    engine defaults would be rendered and silently ignored: leave them out. Values the user set
    (command line, experiment, args) stay and are refused by the validator."""
    if not is_train_only(merged):
        return []
    dropped = [d for d, v in merged.items() if v is not None and d in table and table[d].group == "sglang"
               and is_group_file_source(provenance.get(d, ""))]
    for d in dropped:
        merged[d] = None
        provenance[d] += " (not emitted: train-only runs skip SGLang)"
    return dropped


def config_hash(args: dict[str, Any], extra: dict[str, Any], roots: dict[str, str] | None = None) -> str:
    """The run_id digest: every training-relevant dest; input paths by where they are: relative to
    paths.data_root / paths.models_root when under one (the same run wherever a machine keeps its
    data and models), else in full (docs/resume.md, identity)."""
    from trainstack.config.input_identity import INPUT_DESTS, identity_path

    relevant = {k: v for k, v in args.items()
                if v is not None and k not in NON_TRAINING_DESTS}
    for dest in INPUT_DESTS:
        if isinstance(args.get(dest), str):
            relevant[dest] = identity_path(args[dest], roots or {})
    blob = json.dumps({"args": relevant, **extra}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:8]


MAX_RUN_ID = 128  # a directory name, a W&B run name and a SLURM job name

# Megatron asserts `save_interval is not None` whenever `--save` is given, and trainstack always
# manages --save. The default bounds the work a crash loses: upstream's usual 20 rollouts, but at
# least ~10 checkpoints over a short run (slime also saves after the last rollout).
DEFAULT_SAVE_INTERVAL = 20
SAVES_PER_RUN = 10


def default_save_interval(args: dict[str, Any]) -> int:
    """save_interval when the user set none: min(20, num_rollout // 10), at least 1."""
    if args.get("release_train"):  # slime saves every step with --release-train and defaults the interval to 1
        return 1
    n = args.get("num_rollout")
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return max(1, min(DEFAULT_SAVE_INTERVAL, n // SAVES_PER_RUN))
    return DEFAULT_SAVE_INTERVAL


# Dests trainstack owns: what a run loads and where it saves are its identity (the resume plan
# reads exactly what the trainer loads). Each with the way to do what the user wanted.
MANAGED_DESTS = {
    "save": "checkpoints always go to <paths.runs_root>/<run_id>/checkpoints; set paths.runs_root to move them",
    "load": "a run resumes from its own checkpoints; to start from other weights use model.ref_load=DIR "
            "(slime loads it when the run has no checkpoint yet)",
    "ckpt_step": "a run resumes from its latest complete checkpoint; to start from an older one, start a new run "
                 "with model.ref_load=<dir of that checkpoint>",
    "start_rollout_id": "a resume continues where the checkpoint ends (slime derives it); raise env.num_rollout "
                        "to train longer",
}


def resolve(cfg: Any, origin: Origin) -> ResolvedRun:
    """Turn a composed config into a ResolvedRun or raise ConfigErrors listing every problem.

    Steps, each a function of its own: the plain tree -> typed sections and dest layers -> one
    value per dest (precedence, cluster derivation) -> dest checks (types, secrets, managed dests)
    -> absolute paths -> identity (name, run_id, run dir) -> trainstack-managed dests."""
    tree = plain_tree(cfg)
    activate_for_root(resolve_slime_root((tree.get("slime") or {}).get("root"), origin.cwd))  # its table
    typed, layers, meta = typed_sections(tree, origin)
    cluster: ClusterSpec = typed["cluster"]
    merged, provenance, layer_of = merge_dests(layers, cluster, origin)
    check_dests(merged, provenance, layer_of, tree, origin)
    absolute_dest_paths(merged, origin.cwd)
    paths: PathsSpec = typed["paths"]
    paths = PathsSpec(**{k: absolute(getattr(paths, k), origin.cwd) for k in ("runs_root", "models_root", "data_root")})
    slime: SlimeSpec = typed["slime"]
    slime = SlimeSpec(root=resolve_slime_root(slime.root, origin.cwd),
                      megatron_root=absolute(slime.megatron_root, origin.cwd) if slime.megatron_root else None,
                      entrypoint=slime.entrypoint)
    entrypoint = slime.entrypoint or meta.get("algo", {}).get("entrypoint") or "train.py"
    runtime_env: RuntimeEnvSpec = typed["runtime_env"]
    runtime_env = RuntimeEnvSpec(env_vars={str(k): None if v is None else str(v)  # null: removed (render)
                                           for k, v in runtime_env.env_vars.items()},
                                 pythonpath=[absolute(p, origin.cwd) for p in runtime_env.pythonpath])
    name, run_id = run_identity(tree, merged, entrypoint, cluster, origin, meta, paths)
    run_dir = str(Path(paths.runs_root) / run_id)
    tracking: TrackingSpec = typed["tracking"]
    hub: HubSpec = typed["hub"]
    add_managed_dests(merged, provenance, layer_of, run_id, run_dir, name, tracking, hub,
                      meta.get("env", {}).get("http_env"))
    return ResolvedRun(name=name, run_id=run_id, args=merged, provenance=provenance, cluster=cluster,
                       paths=paths, slime=slime, runtime_env=runtime_env, entrypoint=entrypoint, meta=meta,
                       origin=origin, config=tree, run_dir=run_dir, layer_of=layer_of,
                       resume=typed["resume"], tracking=tracking, hub=hub, eval=typed["eval"])


def plain_tree(cfg: Any) -> dict[str, Any]:
    """The composed config as plain containers; a broken ${...} names its key, never a traceback."""
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(cfg, dict):  # already plain (a stored tree, or a caller that converted once)
        return {k: v for k, v in cfg.items() if k != "hydra"}
    try:
        tree: dict[str, Any] = _to_plain_without_hydra(cfg)
    except OmegaConfBaseException as ex:
        key = getattr(ex, "full_key", "") or "config"
        raise ConfigErrors([ConfigError(str(key), f"cannot resolve: {str(getattr(ex, 'msg', ex)).splitlines()[0]}",
                                        "fix the interpolation or set the value it points to")]) from None
    return tree


def _to_plain_without_hydra(cfg: Any) -> dict[str, Any]:
    """`OmegaConf.to_container(cfg, resolve=True)` minus the `hydra` node, which is never converted:
    in a sweep every point's config still holds it, and resolving it cost as much as the rest."""
    from omegaconf import Container, DictConfig, OmegaConf
    from omegaconf.basecontainer import BaseContainer
    from omegaconf.errors import InterpolationResolutionError
    from omegaconf.omegaconf import SCMode

    if not isinstance(cfg, DictConfig) or cfg._is_none() or cfg._is_missing() or cfg._is_interpolation() \
            or "hydra" not in cfg:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    out: dict[str, Any] = {}
    for key in cfg.keys():  # as BaseContainer._to_content converts each key of a DictConfig
        if key == "hydra":
            continue
        node: Any = cfg._get_child(key, throw_on_missing_value=False)
        try:
            node = node._dereference_node()
        except InterpolationResolutionError as ex:
            cfg._format_and_raise(key=key, value=None, cause=ex)
        out[str(key)] = (BaseContainer._to_content(node, resolve=True, throw_on_missing=False, enum_to_str=False,
                                                   structured_config_mode=SCMode.DICT)
                         if isinstance(node, Container) else node._value())
    return out


def typed_sections(tree: dict[str, Any], origin: Origin
                   ) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, dict]]:
    """Root keys and scalars checked, typed sections built, dest namespaces split into layers and
    meta blocks (unknown dests refused with a did-you-mean)."""
    stray = tree.get("experiment")
    if isinstance(stray, dict) and stray:  # an experiment file without `# @package _global_`
        exp = origin.choices.get("experiment")
        raise ConfigErrors([ConfigError(
            "experiment", f"conf/experiment/{exp}.yaml has no `# @package _global_` line, so its keys landed under "
            f"experiment.* ({', '.join(sorted(map(str, stray))[:6])}) and would be silently ignored",
            "make `# @package _global_` the first line of the file", value=exp)])
    table = at.load_table()
    errors: list[ConfigError] = []
    for key in tree:
        if key not in ROOT_KEYS:
            errors.append(unknown_key_error(key, ROOT_KEYS - {"hydra"}, "", origin.source_of(key)))
    for key in ("run_id", "name"):  # `run_id: 123` in a file is a name, like run_id=123 on the command line
        if isinstance(tree.get(key), int) and not isinstance(tree[key], bool):
            tree[key] = str(tree[key])
    for key, tp in ROOT_SCALARS.items():
        if key in tree and not check_value(tp, tree[key]):
            errors.append(ConfigError(key, f"wrong type ({type(tree[key]).__name__})",
                                      ROOT_SCALAR_FIXES.get(key, f"set {key} correctly"),
                                      value=tree[key], source=origin.source_of(key)))
    if isinstance(tree.get("objective"), str):  # a sweep's objective: METRIC[:TAKE] (config/objective.py)
        from trainstack.config.objective import Objective

        try:
            Objective.parse(tree["objective"])
        except ConfigErrors as err:
            errors += err.errors
    typed: dict[str, Any] = {}
    for section, cls in ROOT_SECTIONS.items():
        node = tree.get(section) or {}
        if not isinstance(node, dict):
            errors.append(ConfigError(section, "must be a mapping", f"check {origin.source_of(section)}"))
            continue
        obj, errs = to_typed(cls, node, f"{section}.", origin.source_of)
        typed[section] = obj
        errors += errs
    layers: dict[str, dict[str, Any]] = {}
    meta: dict[str, dict] = {}
    for ns in DEST_NAMESPACES:
        node = tree.get(ns) or {}
        if not isinstance(node, dict):
            errors.append(ConfigError(ns, "must be a mapping of slime dests", f"check {origin.source_of(ns)}"))
            continue
        node = dict(node)
        meta[ns], meta_errors = meta_schema.check(ns, node.pop("meta", None), origin.source_of)
        errors += meta_errors
        for dest in list(node):
            if dest not in table:
                cand = table.suggest(dest)
                errors.append(ConfigError(
                    f"{ns}.{dest}", "not a slime argument (slime would silently ignore it)",
                    hint_for_dest(dest, table, f"{ns}.") or at.did_you_mean(cand, f"{ns}.")
                    or "see `trainstack args --search WORD` for slime's dests",
                    source=origin.source_of(f"{ns}.{dest}")))
                node.pop(dest)
        layers[ns] = node
    if errors or typed.get("cluster") is None or typed.get("paths") is None:
        raise ConfigErrors(errors)
    return typed, layers, meta


def merge_dests(layers: dict[str, dict[str, Any]], cluster: ClusterSpec, origin: Origin
                ) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """One value per dest: precedence by who said it, then values derived from the cluster where
    nobody said anything, engine defaults dropped in train-only runs, append values normalised."""
    table = at.load_table()
    merged, provenance, layer_of = merge_layers(layers, origin)
    derived, errors = derive_cluster_args(cluster, merged)
    if errors:
        raise ConfigErrors(errors)
    for dest, value in derived.items():
        if dest not in merged:
            merged[dest] = value
            layer_of[dest] = "args"
            provenance[dest] = (f"derived from cluster={cluster.name} "
                                f"(conf/cluster/{origin.choices.get('cluster')}.yaml)")
    drop_preset_sglang_dests(merged, provenance, table)
    for dest in merged:
        merged[dest] = normalise_append(table[dest], merged[dest])
    return merged, provenance, layer_of


def secret_paths(node: Any, prefix: str) -> list[str]:
    """Dotted paths of secret-named keys holding a value, at any depth (lists, maps, JSON dests)."""
    out: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if is_secret_name(str(k)) and v not in (None, "", [], {}) and not isinstance(v, bool):
                out.append(path)
            else:
                out += secret_paths(v, path)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += secret_paths(v, f"{prefix}[{i}]")
    elif isinstance(node, str) and secret_in_value(node):  # a secret's value, a URL's password, a JSON string
        out.append(prefix)
    return out


def check_dests(merged: dict[str, Any], provenance: dict[str, str], layer_of: dict[str, str], tree: dict[str, Any],
                origin: Origin) -> None:
    """Types and choices against slime's table; no secret anywhere in the config; no managed dest."""
    table = at.load_table()
    errors: list[ConfigError] = []
    for dest, value in merged.items():
        errors += check_dest_value(table[dest], value, f"{layer_of[dest]}.{dest}", provenance[dest])
    for dest, value in merged.items():
        found = ([dest] if is_secret_name(dest) and value not in (None, "", [], {}) and not isinstance(value, bool)
                 else secret_paths(value, dest))
        for path in found:
            errors.append(ConfigError(f"{layer_of[dest]}.{path}", "secrets must not be put in configs (they end up "
                                      "in saved configs, logs and command lines)", env_fix(path),
                                      value="<redacted>", source=provenance[dest].split(" (over ")[0]))
    for section in (k for k in tree if k not in DEST_NAMESPACES):
        for path in secret_paths(tree[section], section):
            errors.append(ConfigError(path, "secrets must not be put in configs (they end up in saved configs, "
                                      "logs and command lines)", env_fix(path), value="<redacted>",
                                      source=origin.source_of(path.split("[")[0])))
    for dest, fix in MANAGED_DESTS.items():
        if dest in merged:  # null too: `args.save=null` would not turn saving off
            errors.append(ConfigError(f"{layer_of[dest]}.{dest}", "is managed by trainstack (the resume plan must "
                                      "read exactly what the trainer loads)", fix, value=merged[dest],
                                      source=provenance[dest]))
    if errors:
        raise ConfigErrors(errors)


def absolute_dest_paths(merged: dict[str, Any], cwd: str) -> None:
    """Every path dest absolute (Ray workers and SLURM jobs run in other directories)."""
    for dest in list(merged):
        v = merged[dest]
        if v is None:
            continue
        if dest in PATH_DESTS:
            merged[dest] = absolute(v, cwd)
        elif dest in PAIRED_PATH_DESTS and isinstance(v, list):
            merged[dest] = [absolute(x, cwd) if i % 2 == 1 or len(v) == 1 else x for i, x in enumerate(v)]


def run_identity(tree: dict[str, Any], merged: dict[str, Any], entrypoint: str, cluster: ClusterSpec,
                 origin: Origin, meta: dict[str, dict], paths: PathsSpec) -> tuple[str, str]:
    """(name, run_id): run_id is given, or `<name>-<hash of the training-relevant config>`. An HTTP
    env's settings (env.meta.http_env: turns, reward, ...) change what is trained; where its server
    runs and the client's timeouts do not."""
    name = tree.get("name") or "-".join(str(origin.choices.get(g) or g) for g in ("model", "algo", "env"))
    extra: dict[str, Any] = {"entrypoint": entrypoint, "backend": cluster.backend}
    from trainstack import hooks

    for contribute in hooks.get(hooks.IDENTITY):  # e.g. env.meta.http_env's training settings
        extra.update(contribute(meta))
    digest = config_hash(merged, extra, {"data_root": paths.data_root, "models_root": paths.models_root})
    run_id = tree.get("run_id") or f"{name}-{digest}"
    # a derived run id's faults are its name's: say so, with the fix that applies there
    key, what = ("run_id", "") if tree.get("run_id") else ("name", f" (the run id is derived from it: `{name}-{digest}`)")
    value = run_id if key == "run_id" else name
    bad_chars = set(run_id) - set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    if bad_chars:
        raise ConfigErrors([ConfigError(key, f"contains {''.join(sorted(bad_chars))!r}{what}; run ids name "
                                        "directories, W&B runs and SLURM jobs", f"set {key} to letters, digits, '.', "
                                        "'_' and '-'" + ("" if key == "run_id" else ", or give run_id=... yourself"),
                                        value=value, source=origin.source_of(key))])
    if run_id in (".", "..") or len(run_id) > MAX_RUN_ID:
        limit = MAX_RUN_ID if key == "run_id" else MAX_RUN_ID - len(digest) - 1
        raise ConfigErrors([ConfigError(key, f"'{str(value)[:40]}' cannot name a run directory (it must not be '.' "
                                        f"or '..', and at most {limit} characters)", f"set {key} to at most {limit} "
                                        "letters, digits, '.', '_' and '-'", value=str(value)[:200],
                                        source=origin.source_of(key))])
    return name, run_id


def add_managed_dests(merged: dict[str, Any], provenance: dict[str, str], layer_of: dict[str, str], run_id: str,
                      run_dir: str, name: str, tracking: TrackingSpec, hub: HubSpec, http_env: Any = None) -> None:
    """Run identity, managed by trainstack: --load = --save = the run's checkpoint dir (the tracker
    decides resume), a save interval, TensorBoard in the run dir, one W&B run per run_id, and an
    HTTP env's settings file (--custom-config-path) in the run dir."""
    managed: dict[str, Any] = {"save": str(Path(run_dir) / "checkpoints"), "load": str(Path(run_dir) / "checkpoints"),
                               "save_interval": default_save_interval(merged)}
    if tracking.tensorboard:
        managed["use_tensorboard"] = True
    if merged.get("use_wandb"):
        managed.update(wandb_group=name, wandb_random_suffix=False, wandb_dir=str(Path(run_dir) / "wandb"))
        if tracking.wandb_project:
            managed["wandb_project"] = tracking.wandb_project
    if hub.push_rollouts:  # slime dumps every rollout into the run dir; the Hub sync pushes the files
        managed["save_debug_rollout_data"] = str(Path(run_dir) / layout.ROLLOUT_DATA / layout.ROLLOUT_DATA_FILE)
    for dest, value in managed.items():
        if dest not in merged or dest in ("save", "load"):
            merged[dest] = value
            provenance[dest] = (f"trainstack default (min({DEFAULT_SAVE_INTERVAL}, num_rollout // {SAVES_PER_RUN}); "
                                "set args.save_interval to change)" if dest == "save_interval"
                                else "hub.push_rollouts=true (rollout data into the run dir)"
                                if dest == "save_debug_rollout_data" else f"trainstack: run identity of {run_id}")
            layer_of[dest] = "args"

    if http_env and "custom_config_path" not in merged:  # the HTTP env generate function's settings file
        merged["custom_config_path"] = str(Path(run_dir) / layout.HTTP_ENV_CONFIG)
        provenance["custom_config_path"] = "trainstack: env.meta.http_env, written into the run dir at each launch"
        layer_of["custom_config_path"] = "args"
