"""`trainstack diff A B`: what differs between two runs or specs, in the resolved config and the argv.

A spec is one of (tried in this order):

1. an override list (any token contains ``=``), e.g. ``"model=qwen3-4B algo.lr=2e-6"``: composed fresh;
   ``default`` (or ``defaults``) is the empty list, i.e. ``python run.py``;
2. a run directory (holds ``config.yaml`` / ``command.json``, docs/run_dir.md);
3. a run id under ``--runs-root`` (default ``./runs``);
4. an experiment name (``conf/experiment/<name>.yaml``): composed fresh as ``experiment=<name>``.

Composed specs use ``--config-dir`` (default: the project's ``conf/``), so a change made inside a
YAML file shows up: the resolved trees are compared, never the override lists.

``--against-defaults`` (one spec): the base is the spec's experiment composed with no other
override (``experiment=<E>``) when it has one, else the default config (``python run.py``). That
is "what makes this run different from the recipe it started from" (Dora's delta-vs-base); for
runs of the default config the two are the same thing.

Exit status like ``diff``: 0 equal, 1 different, 2 bad input.
"""
from __future__ import annotations

import difflib
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainstack.secrets import redact
from trainstack.errors import ConfigError, ConfigErrors
from trainstack.config.resolve import CONF_DIR, Origin
from trainstack.secrets import REDACTED, is_secret_name
from trainstack.run.rundir import RunDir
from trainstack.storage import layout
from trainstack.run.rundir.targets import find_run, run_ids

GROUPS = ("megatron", "sglang", "slime")
DEFAULT_WORDS = ("default", "defaults")
EXIT_EQUAL, EXIT_DIFFERENT = 0, 1


@dataclass
class Side:
    """One side of a diff: a resolved config tree, where each key came from, and the rendered argv."""

    spec: str
    kind: str  # "run" | "composed"
    label: str
    config: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)  # dotted key -> where its value came from
    groups: dict[str, list[str]] = field(default_factory=dict)  # megatron/sglang/slime -> argv tokens
    arg_sources: dict[str, str] = field(default_factory=dict)  # dest -> source
    choices: dict[str, Any] = field(default_factory=dict)
    layer_of: dict[str, str] = field(default_factory=dict)  # dest -> the namespace that set it (model/algo/env/args)
    run_dir: str = ""  # the side's own run directory (its --save/--load live under it)

    def source(self, dotted: str) -> str:
        return self.sources.get(dotted, "")

    def describe(self) -> dict[str, Any]:
        return {"spec": self.spec, "kind": self.kind, "label": self.label, "choices": self.choices}


# -- redaction and flattening -------------------------------------------------------------------
def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> {dotted.path: leaf}; lists and empty mappings are leaves."""
    out: dict[str, Any] = {}
    if isinstance(tree, dict) and tree:
        for k, v in tree.items():
            out.update(flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = tree
    return out


def argv_flags(tokens: list[str]) -> dict[str, str]:
    """argv tokens of one group -> {flag: value text} (repeated flags joined with ' ; '), secrets redacted."""
    from trainstack.upstream.argtable import load_table
    from trainstack.render.command import flag_spans

    flags = load_table().flag_to_dest
    out: dict[str, str] = {}
    for flag, vals in flag_spans(tokens):
        value = " ".join(vals)
        if value and is_secret_name(flags.get(flag, flag.lstrip("-").replace("-", "_"))):
            value = REDACTED
        out[flag] = f"{out[flag]} ; {value}" if flag in out else value
    return out


def flag_dest(flag: str) -> str:
    from trainstack.upstream.argtable import load_table

    return load_table().flag_to_dest.get(flag, flag.lstrip("-").replace("-", "_"))


# -- loading specs -------------------------------------------------------------------------------
def experiments(conf_dir: Path) -> list[str]:
    return sorted(p.stem for p in (conf_dir / "experiment").glob("*.yaml"))


def load_run_dir(path: Path, spec: str, conf_dir: Path) -> Side:
    import yaml

    rd = RunDir(path)
    try:
        config = yaml.safe_load(rd.file(layout.CONFIG).read_text(encoding="utf-8")) or {}
    except OSError:
        config = {}
    except yaml.YAMLError as ex:
        raise ConfigErrors([ConfigError(spec, f"{rd.file(layout.CONFIG)} is not valid YAML "
                                        f"({str(ex).splitlines()[0]})", "restore the file or diff another run")]) from None
    config.pop("hydra", None)
    command = rd.read(layout.COMMAND, {}) or {}
    provenance = rd.read(layout.PROVENANCE, {}) or {}
    choices = rd.read(layout.CHOICES, {}) or {}
    overrides = rd.read(layout.OVERRIDES) or []
    origin = Origin(choices=choices, overrides=[str(o) for o in overrides], conf_dir=conf_dir)
    config = redact(config)
    sources = {}
    for key in flatten(config):
        head, _, dest = key.partition(".")
        if head in ("model", "algo", "env", "args") and dest in provenance and head == _winning_layer(config, dest):
            sources[key] = provenance[dest]
        else:
            sources[key] = origin.source_of(key) if choices or overrides else ""
    groups = command.get("groups") or {}
    args = rd.read(layout.ARGS, {}) or {}
    won = args if isinstance(args, dict) else {}
    layer_of = {dest: _winning_layer(config, dest, won.get(dest)) for dest in _dests(config)}
    return Side(spec=spec, kind="run", label=f"{path} (run dir)", config=config, sources=sources,
                groups={g: list(groups.get(g) or []) for g in GROUPS}, arg_sources=dict(provenance), choices=choices,
                layer_of=layer_of, run_dir=str(path.resolve()))


def _winning_layer(config: dict, dest: str, value: Any = None) -> str:
    """The namespace whose `dest` won: the one holding the value that won (args.json), else by the order
    args > env > algo > model."""
    holders = [ns for ns in DEST_LAYERS if isinstance(config.get(ns), dict) and dest in config[ns]]
    return next((ns for ns in holders if config[ns][dest] == value), holders[0] if holders else "")


DEST_LAYERS = ("args", "env", "algo", "model")  # the config's namespaces of slime dests


def _dests(config: dict) -> set[str]:
    return {d for ns in DEST_LAYERS if isinstance(config.get(ns), dict) for d in config[ns] if d != "meta"}


def compose_side(overrides: list[str], spec: str, conf_dir: str | None, label: str | None = None) -> Side:
    from trainstack.render.pipeline import build_from_overrides

    run, cmd = build_from_overrides(overrides, conf_dir)
    config = redact(run.config)
    sources = {key: run.origin.source_of(key) for key in flatten(config)}
    for key in sources:
        head, _, dest = key.partition(".")
        if head in ("model", "algo", "env", "args") and run.layer_of.get(dest) == head and dest in run.provenance:
            sources[key] = run.provenance[dest]
    shown = " ".join(overrides) or "(no overrides: python run.py)"
    return Side(spec=spec, kind="composed", label=label or f"{shown} (composed)", config=config, sources=sources,
                groups={g: list(cmd.groups.get(g) or []) for g in GROUPS}, arg_sources=dict(run.provenance),
                choices=dict(run.origin.choices),
                layer_of={d: run.layer_of[d] for d in _dests(config) if d in run.layer_of}, run_dir=run.run_dir)


def load_spec(spec: str, runs_root: str | Path = "runs", config_dir: str | None = None) -> Side:
    """A spec string -> Side (see the module docstring for the lookup order)."""
    conf = Path(config_dir) if config_dir else CONF_DIR
    runs_root = Path(runs_root)
    text = spec.strip()
    if text in DEFAULT_WORDS:
        return compose_side([], spec, config_dir, label="defaults (python run.py, composed)")
    try:
        tokens = shlex.split(text)
    except ValueError as ex:
        raise ConfigErrors([ConfigError(spec, f"cannot split the override list ({ex})", "quote it as one argument: "
                                        "\"model=qwen3-4B algo.lr=2e-6\"")]) from None
    if tokens and any("=" in t for t in tokens):
        return compose_side(tokens, spec, config_dir)
    path = Path(text).expanduser()
    found = find_run(text, runs_root) if text else None
    if found is not None:
        from trainstack.run.rundir.check import require_readable

        require_readable([found])
        return load_run_dir(found, spec, conf)
    if text and path.is_dir():
        raise ConfigErrors([ConfigError(spec, f"{path} is a directory but not a run directory (none of "
                                        f"{', '.join(layout.RUN_MARKERS)})", "give a run directory, a run id, an "
                                        "experiment name or a quoted override list")])
    if text in experiments(conf):
        return compose_side([f"experiment={text}"], spec, config_dir, label=f"experiment={text} (composed)")
    ids, exps = run_ids(runs_root), experiments(conf)
    near = difflib.get_close_matches(text, ids + exps, n=3, cutoff=0.5)
    fix = f"did you mean {', '.join(near)}?" if near else (
        f"known run ids under {runs_root}: {', '.join(ids[:8]) or '(none)'}; experiments: {', '.join(exps)}")
    raise ConfigErrors([ConfigError(spec or "''", f"not a run id (under {runs_root}), a run directory, an experiment "
                                    "or an override list", fix + " (use --runs-root for another runs directory)")])


def base_side(side: Side, config_dir: str | None) -> Side:
    """What --against-defaults compares with: the spec's experiment alone, else the default config."""
    exp = side.choices.get("experiment")
    if exp:
        return compose_side([f"experiment={exp}"], f"experiment={exp}", config_dir,
                            label=f"experiment={exp} (its base, composed)")
    return compose_side([], "defaults", config_dir, label="defaults (python run.py, composed)")


# -- the diff ------------------------------------------------------------------------------------
def _differ(x: Any, y: Any) -> bool:
    return x != y or type(x) is not type(y) and not _num_eq(x, y)


def effective(side: Side) -> dict[str, tuple[str, Any]]:
    """dest -> (the key that set it, e.g. `env.num_rollout`, and the value that won): what the argv renders,
    so the config part and the argv part say the same (an `args.num_rollout=4` beside `env.num_rollout:
    350` is one change, 350 -> 4, not two)."""
    return {d: (f"{ns}.{d}", (side.config.get(ns) or {}).get(d)) for d, ns in side.layer_of.items() if ns}


def own_path(value: Any, side: Side) -> str | None:
    """`value` with the side's own run directory taken out (`<run dir>/checkpoints`), or None when it names
    no path under it: such paths differ between any two runs and say nothing."""
    if not side.run_dir or not isinstance(value, str):
        return None
    parts = [p for p in value.split(" ; ")]
    if not all(p == side.run_dir or p.startswith(side.run_dir.rstrip("/") + "/") for p in parts):
        return None
    return " ; ".join("<run dir>" + p[len(side.run_dir.rstrip("/")):] for p in parts)


def diff_sides(a: Side, b: Side, hide_own: bool = True) -> dict[str, Any]:
    """Config (slime dests by the value that won, other keys as the tree has them) and argv by group; with
    `hide_own`, a path under each side's own run directory that differs only by that directory (--save,
    --load) is named in "own_run_dir" instead (`trainstack diff --paths` shows them)."""
    fa = {k: v for k, v in flatten(a.config).items() if not _is_dest_key(k)}
    fb = {k: v for k, v in flatten(b.config).items() if not _is_dest_key(k)}
    changed, added, removed, own = [], [], [], []
    ea, eb = effective(a), effective(b)
    for dest in sorted(set(ea) | set(eb), key=lambda d: (eb.get(d) or ea[d])[0]):
        if dest in ea and dest in eb:
            (ka, va), (kb, vb) = ea[dest], eb[dest]
            if not _differ(va, vb):
                continue
            if hide_own and own_path(va, a) is not None and own_path(va, a) == own_path(vb, b):
                own.append(kb)
                continue
            changed.append({"key": kb, "a": va, "b": vb, "source_a": a.arg_sources.get(dest) or a.source(ka),
                            "source_b": b.arg_sources.get(dest) or b.source(kb)})
        elif dest in eb:
            added.append({"key": eb[dest][0], "b": eb[dest][1], "source_b": b.arg_sources.get(dest) or b.source(
                eb[dest][0])})
        else:
            removed.append({"key": ea[dest][0], "a": ea[dest][1], "source_a": a.arg_sources.get(dest) or a.source(
                ea[dest][0])})
    for key in sorted(set(fa) | set(fb)):
        if key in fa and key in fb:
            if _differ(fa[key], fb[key]):
                changed.append({"key": key, "a": fa[key], "b": fb[key], "source_a": a.source(key),
                                "source_b": b.source(key)})
        elif key in fb:
            added.append({"key": key, "b": fb[key], "source_b": b.source(key)})
        else:
            removed.append({"key": key, "a": fa[key], "source_a": a.source(key)})
    for part in (changed, added, removed):
        part.sort(key=lambda d: d["key"])
    argv: dict[str, Any] = {}
    for g in GROUPS:
        ga, gb = argv_flags(a.groups.get(g, [])), argv_flags(b.groups.get(g, []))
        d: dict[str, list] = {"changed": [], "added": [], "removed": []}
        for flag in list(dict.fromkeys([*ga, *gb])):
            dest = flag_dest(flag)
            if flag in ga and flag in gb:
                if ga[flag] != gb[flag]:
                    if hide_own and own_path(ga[flag], a) is not None and own_path(ga[flag], a) == own_path(gb[flag], b):
                        own.append(flag)
                        continue
                    d["changed"].append({"flag": flag, "a": ga[flag], "b": gb[flag],
                                         "source_a": a.arg_sources.get(dest, ""), "source_b": b.arg_sources.get(dest, "")})
            elif flag in gb:
                d["added"].append({"flag": flag, "b": gb[flag], "source_b": b.arg_sources.get(dest, "")})
            else:
                d["removed"].append({"flag": flag, "a": ga[flag], "source_a": a.arg_sources.get(dest, "")})
        argv[g] = d
    equal = not (changed or added or removed or own) and not any(v for d in argv.values() for v in d.values())
    return {"a": a.describe(), "b": b.describe(), "equal": equal,
            "config": {"changed": changed, "added": added, "removed": removed}, "argv": argv,
            "own_run_dir": list(dict.fromkeys(own))}


def _is_dest_key(key: str) -> bool:
    """A slime dest under model/algo/env/args (compared by the value that won: `effective`); their `meta`
    blocks and an empty namespace (`args: {}`) are no dests and are left to the tree, or out."""
    head, _, rest = key.partition(".")
    return head in DEST_LAYERS and not rest.startswith("meta.") and rest != "meta"


def _num_eq(x: Any, y: Any) -> bool:
    return isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool) \
        and not isinstance(y, bool) and float(x) == float(y)


def _fmt(v: Any) -> str:
    if isinstance(v, str):
        return v if v else "''"
    return json.dumps(v, default=str)


def format_text(result: dict[str, Any], width: int | None = None) -> str:
    """The diff for people: config, then argv by group, each entry `~ key: A -> B   [where each came from]`,
    folded to `width` (the terminal's; whole lines in a pipe)."""
    from trainstack.terminal.tables import fold

    lines = [f"--- A: {result['a']['label']}", f"+++ B: {result['b']['label']}"]
    if result["equal"]:
        lines.append("no differences (resolved config and slime argv are identical)")
        return "\n".join(lines) + "\n"

    def entry(text: str) -> None:
        lines.extend(fold(text, width, "  ", "      "))

    def where(sa: str, sb: str) -> str:
        src = sa if sa == sb else f"{sa or '?'} -> {sb or '?'}"
        return f"   [{src}]" if src else ""

    c = result["config"]
    n = len(c["changed"]) + len(c["added"]) + len(c["removed"])
    if n:
        lines.append(f"config: {len(c['changed'])} changed, {len(c['added'])} added, {len(c['removed'])} removed")
    for d in c["changed"]:
        entry(f"~ {d['key']}: {_fmt(d['a'])} -> {_fmt(d['b'])}" + where(d["source_a"], d["source_b"]))
    for d in c["added"]:
        entry(f"+ {d['key']}: {_fmt(d['b'])}" + (f"   [{d['source_b']}]" if d["source_b"] else ""))
    for d in c["removed"]:
        entry(f"- {d['key']}: {_fmt(d['a'])}" + (f"   [{d['source_a']}]" if d["source_a"] else ""))
    for g in GROUPS:
        d = result["argv"][g]
        n = sum(len(v) for v in d.values())
        if not n:
            continue
        lines.append(f"{g} argv: {len(d['changed'])} changed, {len(d['added'])} added, {len(d['removed'])} removed")
        for e in d["changed"]:
            entry(f"~ {e['flag']} {e['a'] or '(switch)'} -> {e['b'] or '(switch)'}" + where(e["source_a"], e["source_b"]))
        for e in d["added"]:
            entry(f"+ {e['flag']} {e['b']}".rstrip() + (f"   [{e['source_b']}]" if e["source_b"] else ""))
        for e in d["removed"]:
            entry(f"- {e['flag']} {e['a']}".rstrip() + (f"   [{e['source_a']}]" if e["source_a"] else ""))
    own = result.get("own_run_dir") or []
    if own:
        lines += fold(f"({len(own)} hidden: {', '.join(own)} name each run's own directory, which always differs; "
                      "--paths shows them)", width, "", "  ")
    return "\n".join(lines) + "\n"


def run_diff(a: str, b: str | None, runs_root: str = "runs", config_dir: str | None = None,
             against_defaults: bool = False, as_json: bool = False, out=None, paths: bool = False) -> int:
    """The `trainstack diff` command; returns the exit status (ConfigErrors propagate for exit 2)."""
    out = out or sys.stdout
    if against_defaults and b is not None:
        raise ConfigErrors([ConfigError("--against-defaults", "takes one spec (it is compared with its base)",
                                        "drop B, or drop --against-defaults to compare A with B")])
    if not against_defaults and b is None:
        raise ConfigErrors([ConfigError("B", "missing: diff needs two specs",
                                        "give two specs, or one with --against-defaults")])
    if against_defaults:
        side_b = load_spec(a, runs_root, config_dir)
        side_a = base_side(side_b, config_dir)
    else:  # both specs checked, every problem reported at once
        sides, errors = [], []
        for spec in (a, b):
            try:
                sides.append(load_spec(spec, runs_root, config_dir))  # type: ignore[arg-type]
            except ConfigErrors as err:
                errors += err.errors
        if errors:
            raise ConfigErrors(errors)
        side_a, side_b = sides
    result = diff_sides(side_a, side_b, hide_own=not paths)
    if as_json:
        out.write(json.dumps(result, indent=2, default=str) + "\n")
    else:
        from trainstack.terminal.tables import output_width

        out.write(format_text(result, output_width(out)))
    return EXIT_EQUAL if result["equal"] else EXIT_DIFFERENT
