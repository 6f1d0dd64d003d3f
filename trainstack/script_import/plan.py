"""The script's dests -> an experiment: the closest presets and only the deltas.

Presets are chosen by the lines the experiment would need: a dest the script sets that the presets
do not (or set otherwise) is one line, a dest a preset sets that the script does not is a `null`
line and counts double (a `null` undoes a preset, the thing a port by hand does most). The model is
the one whose `scripts/models/*.sh` the script sources, when trainstack ships it. GPU layout flags
become `cluster:` settings when trainstack derives exactly those flags from them, else they are
written as they are. What trainstack manages (checkpoint dirs, secrets) is taken out and said.
"""
from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainstack.script_import.flags import Parsed, same
from trainstack.script_import.shell import DIRECT, Mark, Reading, Text
from trainstack.upstream import argtable as at

GROUPS = ("model", "algo", "env")
CLUSTER_DESTS = ("actor_num_nodes", "actor_num_gpus_per_node", "colocate", "rollout_num_gpus", "num_gpus_per_node")
CHECKPOINT_DESTS = ("load", "save")
# dests trainstack refuses in a config (resolve.MANAGED_DESTS): a run resumes from its own checkpoints
DROPPED_MANAGED = ("ckpt_step", "start_rollout_id")
# runtime env trainstack sets itself (render.runtime_env): PYTHONPATH from slime.megatron_root, NVLS from the cluster
MANAGED_ENV = ("PYTHONPATH", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_NVLS_ENABLE", "PYTHONUNBUFFERED")
NULL_WEIGHT = 2


@dataclass(frozen=True)
class Preset:
    group: str
    name: str
    dests: dict[str, Any]
    meta: dict[str, Any]


@dataclass
class Plan:
    """An experiment, as a mapping to write, and what was decided on the way."""

    name: str
    choices: dict[str, str | None]  # model/algo/env/cluster -> option (None: no preset)
    experiment: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    nulls: list[str] = field(default_factory=list)  # namespaced keys written as null
    overrides: list[str] = field(default_factory=list)  # namespaced keys written with a value
    env: "ScriptEnv | None" = None  # the script's runtime env, for the comparison


def _load_yaml(path: Path) -> dict:
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


@lru_cache(maxsize=16)
def presets(group: str, dirs: tuple[str, ...]) -> tuple[Preset, ...]:
    """The options of a group, first directory first (a later directory's same-named file is hidden)."""
    seen: dict[str, Preset] = {}
    for d in dirs:
        for path in sorted((Path(d) / group).glob("*.yaml")):
            if path.stem in seen:
                continue
            try:
                data = _load_yaml(path)
            except Exception:  # noqa: BLE001 - an unreadable preset is not a candidate (composition reports it)
                continue
            if not isinstance(data, dict):
                continue
            meta = data.pop("meta", None) or {}
            seen[path.stem] = Preset(group, path.stem, data, meta if isinstance(meta, dict) else {})
    return tuple(seen.values())


def models_of(reading: Reading, dirs: tuple[str, ...]) -> list[str]:
    """The model presets made from the `scripts/models/<name>.sh` files the script sources (a file may
    source another: `qwen3.5-35B-A3B-vl.sh` sources `qwen3.5-35B-A3B.sh`), those trainstack ships."""
    by_source = {str(p.meta.get("source")): p.name for p in presets("model", dirs)}
    names = {p.name for p in presets("model", dirs)}
    out: list[str] = []
    for path in reading.sourced:
        if path.parent.name == "models":
            name = by_source.get(f"scripts/models/{path.name}") or (path.stem if path.stem in names else None)
            if name and name not in out:
                out.append(name)
    return out


def _layer(chosen: list[Preset | None]) -> dict[str, tuple[Any, str]]:
    out: dict[str, tuple[Any, str]] = {}
    for p in chosen:
        if p is not None:
            for dest, value in p.dests.items():
                out[dest] = (value, p.group)
    return out


def _cost(layer: dict[str, tuple[Any, str]], wanted: dict[str, Any], skip: set[str], train_only: bool,
          table: at.ArgTable) -> tuple[int, int]:
    lines = nulls = 0
    for dest, (value, _) in layer.items():
        if dest in skip or value is None or dest not in table:
            continue
        if train_only and table[dest].group == "sglang":
            continue  # trainstack leaves a preset's engine flags out of train-only runs
        if dest in wanted:
            lines += not same(table[dest], value, wanted[dest])
        else:
            nulls += 1
    lines += sum(1 for d in wanted if d not in layer or layer[d][0] is None)
    return lines + NULL_WEIGHT * nulls, nulls


def choose(wanted: dict[str, Any], models: list[str], dirs: tuple[str, ...], skip: set[str]
           ) -> tuple[dict[str, Preset | None], tuple[int, int]]:
    """The model/algo/env options (or none) with the fewest experiment lines; the model among `models`
    (the sourced ones) when there are any."""
    table = at.load_table()
    train_only = bool(wanted.get("debug_train_only")) or wanted.get("load_debug_rollout_data") is not None
    options: dict[str, list[Preset | None]] = {g: [None, *(p for p in presets(g, dirs) if not p.meta.get("http_env"))]
                                               for g in GROUPS}  # an HTTP env brings its server and settings file
    if models:
        options["model"] = [p for p in presets("model", dirs) if p.name in models]
    best: tuple[tuple, dict[str, Preset | None]] | None = None
    for combo in itertools.product(*(options[g] for g in GROUPS)):
        score, nulls = _cost(_layer(list(combo)), wanted, skip, train_only, table)
        key = (score, nulls, sum(p is None for p in combo), [p.name if p else "" for p in combo])
        if best is None or key < best[0]:
            best = (key, dict(zip(GROUPS, combo)))
    assert best is not None
    return best[1], best[0][:2]


# --- the GPU layout ------------------------------------------------------------------------------
def cluster_settings(wanted: dict[str, Any]) -> dict[str, Any] | None:
    """cluster.num_nodes/gpus_per_node/colocate/rollout_num_gpus from which trainstack derives the
    script's actor/rollout flags (resolve.derive_cluster_args), or None when no setting does."""
    table = at.load_table()
    nodes = wanted.get("actor_num_nodes", table["actor_num_nodes"].default)
    gpn = wanted.get("actor_num_gpus_per_node", table["actor_num_gpus_per_node"].default)
    rollout = wanted.get("rollout_num_gpus")
    if not all(isinstance(v, int) and v > 0 for v in (nodes, gpn)):
        return None
    train_only = bool(wanted.get("debug_train_only"))
    if wanted.get("colocate") or train_only or wanted.get("debug_rollout_only"):
        return {"num_nodes": nodes, "gpus_per_node": gpn, "colocate": bool(wanted.get("colocate")) and not train_only}
    if not isinstance(rollout, int) or rollout < 1:
        return None
    if rollout % gpn == 0 and (nodes > 1 or gpn >= 8):
        return {"num_nodes": nodes + rollout // gpn, "gpus_per_node": gpn, "colocate": False,
                "rollout_num_gpus": rollout}
    if nodes == 1:
        return {"num_nodes": 1, "gpus_per_node": gpn + rollout, "colocate": False, "rollout_num_gpus": rollout}
    return None


def derived(settings: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    from trainstack.config.resolve import derive_cluster_args
    from trainstack.config.schema import ClusterSpec

    spec = ClusterSpec(name="import", **settings)
    out, errors = derive_cluster_args(spec, {k: v for k, v in wanted.items() if k not in CLUSTER_DESTS})
    return {} if errors else out


def cluster_preset(settings: dict[str, Any], dirs: tuple[str, ...]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The `ray_job` slime cluster preset closest to the settings, the settings it lacks, and the
    layout settings the run ends up with."""
    best: tuple[tuple, str, dict[str, Any], dict[str, Any]] | None = None
    for d in dirs:
        for path in sorted((Path(d) / "cluster").glob("*.yaml")):
            try:
                data = _load_yaml(path)
            except Exception:  # noqa: BLE001
                continue
            if data.get("backend") != "slime" or data.get("launcher") != "ray_job":
                continue
            have = {k: data.get(k, v) for k, v in _CLUSTER_DEFAULTS.items()}
            diff = {k: v for k, v in settings.items() if have[k] != v}
            key = (len(diff), path.stem)
            if best is None or key < best[0]:
                best = (key, path.stem, diff, {**have, **settings})
    if best is None:
        return "local_8xh100", dict(settings), {**_CLUSTER_DEFAULTS, **settings}
    return best[1], best[2], best[3]


_CLUSTER_DEFAULTS = {"num_nodes": 1, "gpus_per_node": 8, "colocate": True, "rollout_num_gpus": None}


# --- values as the experiment file holds them ------------------------------------------------------
def relative_path(dest: str, value: Any) -> bool:
    from trainstack.config.resolve import PAIRED_PATH_DESTS, PATH_DESTS

    def rel(v: Any) -> bool:
        return isinstance(v, str) and bool(v) and not v.startswith(("/", "~")) and "://" not in v

    if dest in PATH_DESTS:
        return rel(value)
    if dest in PAIRED_PATH_DESTS and isinstance(value, list):
        return any(rel(v) for i, v in enumerate(value) if i % 2 == 1)
    return False


def in_checkout(value: str, slime_root: Path | None) -> str | None:
    """`value` relative to the slime checkout the script was read in, when it is a path inside it
    (`${SCRIPT_DIR}/...` of an example: the checkout on the machine that runs it is another)."""
    if slime_root is None or not value.startswith("/"):
        return None
    rel = os.path.relpath(os.path.normpath(value), slime_root)
    return None if rel == ".." or rel.startswith("../") else rel


def yaml_value(dest: str, value: Any, slime_root: Path | None = None) -> Any:
    """A value as the experiment writes it: `${` escaped (OmegaConf would resolve it), a relative path
    or one inside the script's slime checkout under ${slime.root} (where slime's `python3 train.py`
    runs from)."""
    from trainstack.config.resolve import PAIRED_PATH_DESTS, PATH_DESTS

    def esc(v: Any) -> Any:
        if isinstance(v, str):
            return v.replace("${", "\\${")
        if isinstance(v, list):
            return [esc(x) for x in v]
        if isinstance(v, dict):
            return {k: esc(x) for k, x in v.items()}
        return v

    def under_slime(v: Any) -> Any:
        if not isinstance(v, str) or not v or v.startswith("~") or "://" in v:
            return esc(v)
        rel = in_checkout(v, slime_root) if v.startswith("/") else v
        return esc(v) if rel is None else "${slime.root}/" + esc(rel)

    if dest in PATH_DESTS:
        return under_slime(value)
    if dest in PAIRED_PATH_DESTS and isinstance(value, list):
        return [under_slime(v) if i % 2 == 1 or len(value) == 1 else esc(v) for i, v in enumerate(value)]
    if dest == "pythonpath" and isinstance(value, list):
        return [under_slime(v) for v in value]
    return esc(value)


def experiment_name(path: Path) -> str:
    stem = re.sub(r"^run[-_]", "", path.stem)
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip(".-") or "imported"


def describe_marks(marks: frozenset[Mark]) -> str:
    base: set[Mark] = set()
    for m in marks:
        base |= set(m.because) if m.kind == "branch" else {m}
    tests = sorted((m for m in marks if m.kind == "branch"), key=lambda m: m.line)
    head = f"chosen by {tests[0].describe()}, which depends on " if tests else "depends on "
    names = sorted({m.what for m in base if m.kind in ("env", "default")})
    hint = f" (give {' '.join(f'--env {n}=...' for n in names)} to import another value)" if names else ""
    return head + ", ".join(m.describe() for m in sorted(base, key=lambda m: (m.line, m.what))) + hint


def make(reading: Reading, parsed: Parsed, name: str, dirs: tuple[str, ...]) -> Plan:
    """The experiment for a script whose argv `parsed` holds (no problems left in it)."""
    from trainstack.secrets import is_secret_name

    table = at.load_table()
    notes: list[str] = []
    wanted: dict[str, Any] = {}
    for dest, flag in parsed.flags.items():
        if dest in CHECKPOINT_DESTS or dest in DROPPED_MANAGED:
            continue
        if is_secret_name(dest):
            env = "WANDB_API_KEY" if dest.startswith("wandb") else dest.upper()
            notes.append(f"{flag.option} (line {flag.line}) left out: trainstack keeps secrets out of configs and "
                         f"command lines; export {env}=... in the launching shell (the trainer gets it from there)")
            continue
        wanted[dest] = flag.value
    for dest, flag in parsed.unknown.items():
        if is_secret_name(dest):
            env = "WANDB_API_KEY" if dest.startswith("wandb") else dest.upper()
            notes.append(f"{flag.option} (line {flag.line}) left out: export {env}=... in the launching shell "
                         "instead (trainstack forwards it to the trainer)")
    _checkpoint_notes(parsed, notes)
    for dest in DROPPED_MANAGED:
        if dest in parsed.flags:
            f = parsed.flags[dest]
            from trainstack.config.resolve import MANAGED_DESTS

            notes.append(f"{f.option} {f.value} (line {f.line}) left out: {MANAGED_DESTS[dest]}")
    settings = cluster_settings(wanted)
    skip = set(CLUSTER_DESTS)
    chosen, _ = choose(wanted, models_of(reading, dirs), dirs, skip)
    layer = _layer(list(chosen.values()))
    experiment: dict[str, Any] = {}
    plan = Plan(name, {g: (p.name if p else None) for g, p in chosen.items()}, experiment, notes)
    where = _namespaces(dirs)
    blocks: dict[str, dict[str, Any]] = {ns: {} for ns in (*GROUPS, "args")}
    train_only = bool(wanted.get("debug_train_only"))
    for dest, value in wanted.items():
        if dest in skip:
            continue
        have = layer.get(dest)
        if have is not None and have[0] is not None and same(table[dest], have[0], value):
            continue
        ns = have[1] if have is not None else where.get(dest, "args")
        blocks[ns][dest] = yaml_value(dest, value, reading.slime_root)
        plan.overrides.append(f"{ns}.{dest}")
    for dest, (value, group) in layer.items():
        if dest in wanted or dest in skip or value is None:
            continue
        if train_only and dest in table and table[dest].group == "sglang":
            continue
        blocks[group][dest] = None
        plan.nulls.append(f"{group}.{dest}")
    cluster_name, cluster_block = _cluster(wanted, settings, blocks["args"], notes, dirs)
    plan.choices["cluster"] = cluster_name
    for dest, flag in parsed.flags.items():
        if dest in wanted and any(m.kind not in DIRECT for m in flag.marks):
            notes.append(f"{flag.option} {' '.join(flag.tokens)} (line {flag.line}): {describe_marks(flag.marks)}")
        if dest in wanted and relative_path(dest, flag.value):
            notes.append(f"{flag.option} {' '.join(flag.tokens)} is relative: written under ${{slime.root}} (slime's "
                         "`python3 train.py` runs in its checkout)")
        elif dest in wanted and yaml_value(dest, flag.value, reading.slime_root) != yaml_value(dest, flag.value):
            notes.append(f"{flag.option} {' '.join(flag.tokens)} is in the slime checkout the script was read from: "
                         "written under ${slime.root}")
    _meta_blocks(chosen, blocks, wanted, notes)
    experiment["defaults"] = [{f"override /{g}": plan.choices[g]} for g in (*GROUPS, "cluster")]
    experiment["name"] = name
    if cluster_block:
        experiment["cluster"] = cluster_block
    plan.env = script_env(reading.launch.runtime_env_json, notes)
    runtime, slime = runtime_block(plan.env, notes, reading.slime_root)
    entry = reading.launch.entrypoint
    default_entry = (chosen["algo"].meta.get("entrypoint") if chosen["algo"] else None) or "train.py"
    if entry != default_entry:
        slime["entrypoint"] = entry
    if slime:
        experiment["slime"] = slime
    for ns in (*GROUPS, "args"):
        if blocks[ns]:
            experiment[ns] = blocks[ns]
    if runtime:
        experiment["runtime_env"] = runtime
    return plan


def _checkpoint_notes(parsed: Parsed, notes: list[str]) -> None:
    load, save = parsed.flags.get("load"), parsed.flags.get("save")
    given = [f for f in (load, save) if f is not None] + [parsed.unknown[d] for d in CHECKPOINT_DESTS
                                                          if d in parsed.unknown]
    if given:
        said = " and ".join(f"{f.option} {' '.join(f.tokens)}" for f in given)
        notes.append(f"{said} (line {given[0].line}): trainstack loads and saves the run's own checkpoints, "
                     "<paths.runs_root>/<run_id>/checkpoints, so a relaunch resumes")
    if load is not None and (save is None or not same(None, load.value, save.value)):
        ref = parsed.flags.get("ref_load")
        notes.append(f"--load {load.value} is not where the script saves: a new run starts from --ref-load "
                     f"({ref.value if ref else 'not set'}) until it has a checkpoint of its own; to start from "
                     f"{load.value}, set model.ref_load to it")


def _cluster(wanted: dict[str, Any], settings: dict[str, Any] | None, args: dict[str, Any], notes: list[str],
             dirs: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """cluster: preset and settings; actor/rollout flags trainstack would not derive go into args."""
    table = at.load_table()
    name, block, final = cluster_preset(settings or {}, dirs)
    layout = derived(final, wanted)
    for dest in CLUSTER_DESTS:
        want, got = wanted.get(dest), layout.get(dest)
        if want is None and got is None:
            continue
        if want is not None and got is not None and same(table[dest], want, got):
            continue
        if want is None:
            if dest == "num_gpus_per_node":
                notes.append(f"--num-gpus-per-node {got} is added by trainstack for colocated runs on fewer than 8 "
                             "GPUs per node (slime#2012: the engines would bind to the head node's address)")
            elif not same(table[dest], got, table[dest].default):
                args[dest] = None
            continue
        args[dest] = want
    return name, block


def _namespaces(dirs: tuple[str, ...]) -> dict[str, str]:
    """dest -> the group most of whose presets set it (a delta is written where a reader looks for it);
    a dest few presets set goes under args."""
    share: dict[str, tuple[float, str]] = {}
    for g in GROUPS:
        options = [p for p in presets(g, dirs) if p.name != "tiny"]  # the CPU model sets what no GPU model does
        counts: dict[str, int] = {}
        for p in options:
            for dest in p.dests:
                counts[dest] = counts.get(dest, 0) + 1
        for dest, n in counts.items():
            frac = n / max(1, len(options))
            if frac >= 0.1 and frac > share.get(dest, (0.0, ""))[0]:
                share[dest] = (frac, g)
    return {dest: g for dest, (_, g) in share.items()}


def _meta_blocks(chosen: dict[str, Preset | None], blocks: dict[str, dict[str, Any]], wanted: dict[str, Any],
                 notes: list[str]) -> None:
    """A preset's downloads (model.meta.hf_repo, env.meta.data) name its own paths: once the script's
    paths replace them, nothing is downloaded."""
    model, env = chosen.get("model"), chosen.get("env")
    if model is not None and model.meta.get("hf_repo") and any(d in blocks["model"] or d in blocks["args"]
                                                             for d in ("hf_checkpoint", "ref_load")):
        blocks["model"]["meta"] = {"hf_repo": None}
        notes.append(f"model.meta.hf_repo: null: the script's checkpoint paths are used as they are ({model.meta['hf_repo']} "
                     "is not downloaded)")
    if env is not None and env.meta.get("data") and any(d in blocks["env"] or d in blocks["args"]
                                                         for d in ("prompt_data", "eval_prompt_data")):
        blocks["env"]["meta"] = {"data": []}
        notes.append("env.meta.data: []: the script's data paths are used as they are (nothing is downloaded)")


@dataclass
class ScriptEnv:
    """What the script's `--runtime-env-json` gives the trainer, as far as import knows it."""

    vars: dict[str, str] = field(default_factory=dict)  # known, not secret (PYTHONPATH apart)
    pythonpath: list[str] = field(default_factory=list)  # its PYTHONPATH entries but Megatron's
    megatron_root: str | None = None


DEFAULT_MEGATRON = "/root/Megatron-LM"


def script_env(text: Text | None, notes: list[str]) -> ScriptEnv:
    """The script's runtime env: variables, PYTHONPATH (Megatron's checkout, plugin directories)."""
    import json

    from trainstack.secrets import is_secret_name

    out = ScriptEnv()
    if text is None:
        return out
    if any(m.kind == "cmd" for m in text.unknown):
        notes.append("--runtime-env-json comes from a command import does not run: its variables are not imported; "
                     "set runtime_env.env_vars yourself")
        return out
    try:
        env = json.loads(text.text).get("env_vars") or {}
    except (ValueError, AttributeError):
        notes.append("--runtime-env-json is not JSON import can read: its variables are not imported")
        return out
    unknown = bool(text.unknown)
    for key, value in sorted(env.items()):
        value = str(value)
        if is_secret_name(key):
            notes.append(f"runtime env {key} left out: export it in the launching shell (never in a config)")
        elif "$" in value and unknown:
            notes.append(f"runtime env {key}={value} not imported: its value comes from the launching shell")
        elif key == "PYTHONPATH":
            for entry in (e.rstrip("/") for e in value.split(":") if e):
                if entry.endswith("/Megatron-LM"):
                    out.megatron_root = entry
                elif "$" not in entry:
                    out.pythonpath.append(entry)
        else:
            out.vars[key] = value
    if out.pythonpath:
        notes.append(f"runtime env PYTHONPATH: {':'.join(out.pythonpath)} written as runtime_env.pythonpath "
                     "(trainstack builds PYTHONPATH from slime.megatron_root and it)")
    return out


def runtime_block(env: ScriptEnv, notes: list[str], slime_root: Path | None = None
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(runtime_env:, slime:) entries for what trainstack does not set the same way itself."""
    block: dict[str, Any] = {}
    slime: dict[str, Any] = {}
    extra = {k: v.replace("${", "\\${") for k, v in env.vars.items()
             if k not in MANAGED_ENV or (k in ("CUDA_DEVICE_MAX_CONNECTIONS", "PYTHONUNBUFFERED") and v != "1")}
    if "NCCL_NVLS_ENABLE" in env.vars:
        notes.append(f"runtime env NCCL_NVLS_ENABLE={env.vars['NCCL_NVLS_ENABLE']} not imported: trainstack sets it "
                     "from cluster.has_nvlink")
    if extra:
        block["env_vars"] = extra
    if env.pythonpath:
        block["pythonpath"] = yaml_value("pythonpath", list(env.pythonpath), slime_root)
    if env.megatron_root and env.megatron_root != DEFAULT_MEGATRON:
        slime["megatron_root"] = env.megatron_root
        notes.append(f"slime.megatron_root: {env.megatron_root} (the script's PYTHONPATH)")
    return block, slime


def search_dirs(conf_dir: Path, config_dir: Path | None) -> tuple[str, ...]:
    dirs = [str(conf_dir)]
    if config_dir is not None and os.path.realpath(config_dir) != os.path.realpath(conf_dir):
        dirs.append(str(config_dir))
    return tuple(dirs)
