"""Regenerate trainstack's slime-derived data: the model presets, the model-script JSON and the
argument table.

    python -m trainstack.upstream.sync_slime presets [--slime-root PATH | --models-json PATH] [--out conf/model] [--check]
    python -m trainstack.upstream.sync_slime models-json --slime-root PATH [--out PATH] [--check]
    python -m trainstack.upstream.sync_slime args --slime-root PATH [--megatron-root PATH] [--out PATH]
    python -m trainstack.upstream.sync_slime identity [--check]

``presets`` turns every ``scripts/models/<name>.sh`` (read from the packaged
``trainstack/data/slime_models.json`` or re-sourced from a slime checkout) into
``conf/model/<name>.yaml``: the script's flags as argparse dests, typed by the argument table,
plus ``meta``, checkpoint paths and the size-dependent defaults of ``model_meta.MODELS``.
``--check`` writes nothing and exits 1 with a diff when the committed files differ.

``identity`` keeps ``trainstack/data/run_identity.json`` (which dests count in a run_id, each by
name) in step with the argument table: new dests count in the identity until a reviewer moves them
to an excluded group; dests the table lost are dropped.

``args`` needs slime's dependencies (Megatron-LM, sglang, sglang_router) importable; it builds
slime's real parsers in-process and serialises every action (``serialize_parser``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

if TYPE_CHECKING:
    from trainstack.upstream.argtable import ArgSpec, ArgTable

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / "trainstack" / "data"
MODELS_JSON = DATA_DIR / "slime_models.json"
ARGS_JSON = DATA_DIR / "slime_args.json"
IDENTITY_JSON = DATA_DIR / "run_identity.json"
PRESET_DIR = REPO_ROOT / "conf" / "model"

# Presets in conf/model/ that are not generated from slime scripts (owned elsewhere; never touched).
HAND_WRITTEN_PRESETS = {"tiny"}

_SOURCE_SNIPPET = 'source "$1" >/dev/null; printf \'%s\\0\' "${MODEL_ARGS[@]}"'


class SyncError(RuntimeError):
    pass


# =============================================================================================
# models-json: source scripts/models/*.sh in a clean bash
# =============================================================================================


def _clean_env() -> dict[str, str]:
    """A minimal environment: no MODEL_ARGS_* knobs or other user state leaks into the scripts."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C", "LC_ALL": "C"}
    if "HOME" in os.environ:
        env["HOME"] = os.environ["HOME"]
    return env


def source_model_args(script: Path, *, env: Mapping[str, str] | None = None, timeout: float = 30) -> list[str]:
    """Source one model script in ``bash --noprofile --norc`` and return its MODEL_ARGS tokens.

    The script path is passed as a positional argument (``$1``), never interpolated into the
    command string.
    """
    script = Path(script).resolve()
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", _SOURCE_SNIPPET, "sync_slime", str(script)],
        env=dict(env) if env is not None else _clean_env(),
        cwd=str(script.parent),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise SyncError(f"sourcing {script} failed (exit {proc.returncode}): {proc.stderr.decode(errors='replace').strip()}")
    out = proc.stdout.decode()
    if not out:
        return []
    if not out.endswith("\0"):
        raise SyncError(f"unexpected output while sourcing {script}")
    return out[:-1].split("\0")


def tokens_to_pairs(tokens: list[str]) -> list[list[Any]]:
    """``--flag v`` -> [flag, "v"]; ``--flag a b`` -> [flag, [a, b]]; a bare switch -> [flag, None]."""
    pairs: list[list[Any]] = []
    for tok in tokens:
        if tok.startswith("--"):
            pairs.append([tok, []])
        else:
            if not pairs:
                raise SyncError(f"value {tok!r} before any flag")
            pairs[-1][1].append(tok)
    return [[f, None if not vals else (vals[0] if len(vals) == 1 else vals)] for f, vals in pairs]


def _short(commit: str) -> str:
    return commit[:8] if commit else "unknown"


def git_head(root: Path) -> str:
    try:
        proc = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    except OSError:
        return "unknown"
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def build_models_json(slime_root: Path, *, previous: Mapping[str, Any] | None = None,
                      table: ArgTable | None = None) -> dict[str, Any]:
    """Rebuild the ``slime_models.json`` structure from ``<slime_root>/scripts/models/*.sh``."""
    import re

    from trainstack.upstream.argtable import load_table

    table = table or load_table()
    models_dir = Path(slime_root) / "scripts" / "models"
    scripts = sorted(models_dir.glob("*.sh"), key=lambda p: p.name)
    if not scripts:
        raise SyncError(f"no scripts/models/*.sh under {slime_root}")
    packaged = json.loads(MODELS_JSON.read_text(encoding="utf-8")) if MODELS_JSON.exists() else {}
    prev_meta = {**packaged.get("meta", {}), **(previous or {}).get("meta", {})}
    prev_knobs = dict(packaged.get("meta", {}).get("env_knobs", {}))
    prev_knobs.update({k: d for k, d in (previous or {}).get("meta", {}).get("env_knobs", {}).items() if d})
    models: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    knobs: dict[str, str] = {}
    sourcing: dict[str, list[str]] = {}
    unknown: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    for script in scripts:
        name = script.stem
        text = script.read_text(encoding="utf-8", errors="replace")
        for knob in sorted(set(re.findall(r"\b(MODEL_ARGS_[A-Z0-9_]+)", text))):
            knobs.setdefault(knob, prev_knobs.get(knob, ""))
        src_lines = [ln.strip() for ln in text.splitlines() if re.match(r"^\s*(\w+=\S+\s+)*(source|\.)\s", ln)]
        if src_lines:
            sourcing[name] = src_lines
        try:
            tokens = source_model_args(script)
        except SyncError as e:
            errors[name] = str(e)
            continue
        raw[name] = tokens
        models[name] = tokens_to_pairs(tokens)
        bad = [f for f, _ in models[name] if f not in table.flag_to_dest]
        if bad:
            unknown[name] = bad
    # keep the curated knob descriptions and their order; new knobs (no description yet) go last
    knobs = {k: knobs[k] for k in [k for k in prev_knobs if k in knobs] + sorted(k for k in knobs if k not in prev_knobs)}
    return {
        "meta": {
            "slime_commit": git_head(Path(slime_root)),
            "how": prev_meta.get(
                "how",
                "each scripts/models/<name>.sh sourced in a clean bash (no MODEL_ARGS_* env overrides), MODEL_ARGS "
                "array read back; a token starting with -- is a flag, following non-flag tokens are its value(s) "
                "(string if one, list if several, null for store_true switches)",
            ),
            "env_knobs": knobs,
            "scripts_that_source_others": sourcing,
            "flags_not_in_parser_table": unknown,
            "errors": errors,
        },
        "models": models,
        "raw_argv": raw,
    }


def dump_models_json(doc: Mapping[str, Any]) -> str:
    """The layout of the packaged slime_models.json: meta indented, one [flag, value] pair per line
    under ``models``, one token list per line under ``raw_argv``."""
    def one(x: Any) -> str:
        return json.dumps(x, ensure_ascii=False)

    meta = json.dumps(doc["meta"], indent=2, ensure_ascii=False).replace("\n", "\n  ")
    parts = ["{", f'  "meta": {meta},', '  "models": {']
    names = list(doc["models"])
    for i, name in enumerate(names):
        pairs = doc["models"][name]
        body = ",\n".join(f"      {one(p)}" for p in pairs)
        parts.append(f"    {one(name)}: [\n{body}\n    ]" + ("," if i < len(names) - 1 else ""))
    parts.append("  },")
    parts.append('  "raw_argv": {')
    names = list(doc["raw_argv"])
    for i, name in enumerate(names):
        parts.append(f"    {one(name)}: {one(doc['raw_argv'][name])}" + ("," if i < len(names) - 1 else ""))
    parts.append("  }")
    parts.append("}")
    return "\n".join(parts) + "\n"


# =============================================================================================
# presets: models.json -> conf/model/*.yaml
# =============================================================================================


def _typed(spec: ArgSpec, raw: Any, *, where: str) -> Any:
    kind = spec.value_kind
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "bool":
            return str(raw).lower() in ("1", "true", "yes")
        if kind == "json":
            return json.loads(raw)
    except (TypeError, ValueError) as e:
        raise SyncError(f"{where}: cannot read {raw!r} as {kind}: {e}") from None
    return str(raw)  # str, and custom Megatron converters (moe_layer_freq ...): the exact string


def script_to_dests(name: str, pairs: list[list[Any]], table: ArgTable) -> dict[str, Any]:
    """A model script's [flag, value] pairs -> ordered {dest: value} using the argument table."""
    from trainstack.upstream.argtable import APPEND, BOOL_OPTIONAL, STORE_FALSE, STORE_TRUE

    out: dict[str, Any] = {}
    for flag, value in pairs:
        where = f"scripts/models/{name}.sh {flag}"
        dest = table.flag_to_dest.get(flag)
        if dest is None:
            hint = table.suggest(flag)
            raise SyncError(f"{where}: flag is not in slime's argument table" + (f" (did you mean {hint}?)" if hint else ""))
        spec = table.specs[dest]
        if dest in out:
            raise SyncError(f"{where}: dest {dest!r} given twice")
        if spec.kind in (STORE_TRUE, STORE_FALSE, BOOL_OPTIONAL):
            if value is not None:
                raise SyncError(f"{where}: switch given a value {value!r}")
            if spec.kind == STORE_TRUE:
                out[dest] = True
            elif spec.kind == STORE_FALSE:
                out[dest] = False
            else:
                out[dest] = flag != spec.no_flag
            # the flag must be the one the renderer emits for this value
            if spec.kind == STORE_FALSE and flag not in spec.option_strings:
                raise SyncError(f"{where}: {flag} does not belong to {dest}")
            continue
        if value is None:
            raise SyncError(f"{where}: {dest} needs a value")
        if spec.kind == APPEND:
            raise SyncError(f"{where}: append actions are not supported in model scripts")
        if spec.is_list:
            vals = value if isinstance(value, list) else [value]
            out[dest] = [_typed(spec, x, where=where) for x in vals]
        else:
            if isinstance(value, list):
                raise SyncError(f"{where}: {dest} takes one value, got {value!r}")
            out[dest] = _typed(spec, value, where=where)
    return out


def _yaml_scalar(value: Any) -> str:
    import yaml

    if isinstance(value, bool) or value is None:
        return yaml.safe_dump(value).splitlines()[0]
    if isinstance(value, float):
        text = repr(value).lower()
        if "." not in text and "e" in text:
            text = text.replace("e", ".0e", 1)
        return text
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_scalar(x) for x in value) + "]"
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30).rstrip("\n")
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    if text.endswith("..."):
        text = text[:-3].rstrip()
    return text


def preset_values(name: str, pairs: list[list[Any]], table: ArgTable) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict]:
    """-> (meta, architecture dests, checkpoint dests, perf dests)."""
    from trainstack.upstream import model_meta

    try:
        info = model_meta.meta_for(name)
    except KeyError as e:
        raise SyncError(e.args[0]) from None
    arch = script_to_dests(name, pairs, table)
    ckpt = {
        "hf_checkpoint": "${paths.models_root}/" + info["hf_dir"],
        "ref_load": "${paths.models_root}/" + info["hf_dir"] + "_torch_dist",
    }
    perf = dict(info["perf"])
    mla = bool(arch.get("multi_latent_attention"))
    for dest, value in model_meta.MISC.items():
        if dest not in arch and not (mla and dest == "attention_backend"):
            perf[dest] = value
    for dest in list(ckpt) + list(perf):
        if dest not in table.specs:
            raise SyncError(f"model_meta {name}: {dest!r} is not a slime dest")
        if dest in arch:
            raise SyncError(f"model_meta {name}: {dest!r} is already set by the model script")
    if info["params_source"] == "nominal":
        params = info["nominal_params"]
    else:
        params = model_meta.param_count(arch)
    meta: dict[str, Any] = {
        "name": name,
        "hf_repo": info["hf_repo"],
        "revision": info.get("revision", "main"),
        "params": int(params),
        "params_source": info["params_source"],
        "source": f"scripts/models/{name}.sh",
        "family": info["family"],
    }
    return meta, arch, ckpt, perf


def render_preset(name: str, pairs: list[list[Any]], table: ArgTable, slime_commit: str) -> str:
    from trainstack.upstream import model_meta

    meta, arch, ckpt, perf = preset_values(name, pairs, table)
    info = model_meta.meta_for(name)
    lines = [
        f"# Generated by `python -m trainstack.upstream.sync_slime presets` from slime scripts/models/{name}.sh"
        " at the commit in trainstack/data/slime_models.json. Do not edit by hand: change"
        " trainstack/upstream/model_meta.py and regenerate.",
    ]
    if info.get("note"):
        lines.append(f"# Note: {info['note']}.")
    lines.append("meta:")
    for k, v in meta.items():
        lines.append(f"  {k}: {_yaml_scalar(v)}")
    lines.append(f"# architecture (slime scripts/models/{name}.sh, as argparse dests)")
    lines += [f"{k}: {_yaml_scalar(v)}" for k, v in arch.items()]
    lines.append("# checkpoints (paths; rendered absolute by trainstack)")
    lines += [f"{k}: {_yaml_scalar(v)}" for k, v in ckpt.items()]
    src = info["perf_source"]
    if src.startswith("upstream"):
        lines.append(f"# model-size-dependent training defaults (from trainstack/upstream/model_meta.py; {src})")
    else:
        lines.append(
            "# model-size-dependent training defaults (from trainstack/upstream/model_meta.py;"
            " trainstack's suggestions, no upstream run script for this model)"
        )
    lines += [f"{k}: {_yaml_scalar(v)}" for k, v in perf.items()]
    return "\n".join(lines) + "\n"


def render_all(models_data: Mapping[str, Any], table: ArgTable | None = None) -> dict[str, str]:
    """{file name: text} for every model in the models JSON."""
    from trainstack.upstream.argtable import load_table

    table = table or load_table()
    commit = models_data.get("meta", {}).get("slime_commit", "unknown")
    out: dict[str, str] = {}
    for name, pairs in models_data["models"].items():
        if name in HAND_WRITTEN_PRESETS:
            raise SyncError(f"slime model {name!r} clashes with a hand-written preset")
        out[f"{name}.yaml"] = render_preset(name, pairs, table, commit)
    return out


def _diff(path: Path, old: str | None, new: str | None) -> str:
    import difflib

    return "".join(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            fromfile=f"{path} (committed)" if old is not None else "/dev/null",
            tofile=f"{path} (generated)" if new is not None else "/dev/null",
        )
    )


def sync_files(expected: Mapping[Path, str], *, check: bool, stale: Iterable[Path] = ()) -> list[str]:
    """Write (or compare) files. Returns the diffs of files that differ."""
    diffs = []
    for path, text in expected.items():
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if old != text:
            diffs.append(_diff(path, old, text))
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    for path in stale:
        diffs.append(_diff(path, path.read_text(encoding="utf-8"), None))
        if not check:
            path.unlink()
    return diffs


def _generated_header(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().startswith("# Generated by `python -m trainstack.upstream.sync_slime presets`")
    except OSError:
        return False


def cmd_presets(ns: argparse.Namespace) -> int:
    out_dir = Path(ns.out)
    expected: dict[Path, str] = {}
    if ns.slime_root:
        previous = json.loads(MODELS_JSON.read_text(encoding="utf-8")) if MODELS_JSON.exists() else None
        data = build_models_json(Path(ns.slime_root), previous=previous)
        _raise_on_models_errors(data)
        expected[MODELS_JSON] = dump_models_json(data)
    else:
        data = json.loads(Path(ns.models_json or MODELS_JSON).read_text(encoding="utf-8"))
    for fname, text in render_all(data).items():
        expected[out_dir / fname] = text
    stale = [
        p for p in sorted(out_dir.glob("*.yaml"))
        if p not in expected and p.stem not in HAND_WRITTEN_PRESETS and _generated_header(p)
    ]
    diffs = sync_files(expected, check=ns.check, stale=stale)
    if ns.check:
        if diffs:
            sys.stdout.write("".join(diffs))
            print(f"sync_slime: {len(diffs)} generated file(s) out of date; run "
                  "`python -m trainstack.upstream.sync_slime presets` and commit the result", file=sys.stderr)
            return 1
        print(f"sync_slime: {len(expected)} generated file(s) up to date")
        return 0
    print(f"sync_slime: wrote {len(diffs)} of {len(expected)} file(s); removed {len(stale)} stale preset(s)")
    return 0


def _raise_on_models_errors(data: Mapping[str, Any]) -> None:
    meta = data["meta"]
    problems = [f"{k}: {v}" for k, v in meta["errors"].items()]
    problems += [f"{k}: flags not in slime's argument table: {v}" for k, v in meta["flags_not_in_parser_table"].items()]
    if problems:
        raise SyncError("model scripts could not be read:\n  " + "\n  ".join(problems))


def cmd_models_json(ns: argparse.Namespace) -> int:
    out = Path(ns.out)
    previous = json.loads(out.read_text(encoding="utf-8")) if out.exists() else None
    data = build_models_json(Path(ns.slime_root), previous=previous)
    diffs = sync_files({out: dump_models_json(data)}, check=ns.check)
    if ns.check and diffs:
        sys.stdout.write("".join(diffs))
        return 1
    _raise_on_models_errors(data)
    print(f"sync_slime: {len(data['models'])} model scripts -> {out}" + (" (unchanged)" if not diffs else ""))
    return 0


# =============================================================================================
# args: serialise slime's real parsers
# =============================================================================================

PARSER_LABELS = {
    "pre": "pre-parse (phase 0)",
    "sglang": "sglang (phase 1, allow_abbrev=True, parse_known_args; skipped when --debug-train-only or --load-debug-rollout-data)",
    "megatron": "megatron+slime (phase 2, allow_abbrev=False, parse_known_args)",
}
FIELDS = [
    "option_strings", "dest", "source", "parser", "argparse_group", "action", "type", "default",
    "choices", "nargs", "const", "required", "metavar",
    "slime_overrides_default (only where slime changed a Megatron default)", "megatron_default (same)",
]


def _jsonable(value: Any) -> Any:
    """argparse values -> JSON: enums/objects as str(), tuples as lists."""
    import enum

    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, float) and value != value:  # NaN
            return str(value)
        return value
    if isinstance(value, enum.Enum):
        return str(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_jsonable(x) for x in value]
        return sorted(items, key=str) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, dict):
        return {str(k): _jsonable(x) for k, x in value.items()}
    return str(value)


def _type_name(t: Any) -> str | None:
    if t is None:
        return None
    if isinstance(t, type) and t.__module__ == "builtins":
        return t.__name__
    mod = getattr(t, "__module__", None)
    qual = getattr(t, "__qualname__", None) or getattr(t, "__name__", None)
    if mod and qual:
        return f"{mod}.{qual}"
    return type(t).__name__ if qual is None else str(qual)


def _group_titles(parser: argparse.ArgumentParser) -> dict[int, str]:
    titles: dict[int, str] = {}
    for group in parser._action_groups:
        for action in group._group_actions:
            titles.setdefault(id(action), group.title or "")
    for group in parser._mutually_exclusive_groups:
        container = getattr(group, "_container", None)
        for action in group._group_actions:
            titles.setdefault(id(action), getattr(container, "title", None) or "")
    return titles


def serialize_parser(
    parser: argparse.ArgumentParser,
    *,
    source: str | Callable[[argparse.Action], str],
    parser_label: str,
    group_title: str | None = None,
    baseline_defaults: Mapping[int, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every action of ``parser`` as the records of ``slime_args.json`` (pure; no imports of slime).

    ``source``: a fixed source name or a function action -> source name. ``group_title`` overrides
    the argparse group title. ``baseline_defaults``: id(action) -> default before slime's provider
    ran; where the default changed the record gets ``slime_overrides_default``/``megatron_default``.
    Help and version actions are skipped.
    """
    titles = _group_titles(parser)
    records = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        rec: dict[str, Any] = {
            "option_strings": list(action.option_strings),
            "dest": action.dest,
            "source": source(action) if callable(source) else source,
            "parser": parser_label,
            "argparse_group": group_title if group_title is not None else titles.get(id(action), ""),
            "action": type(action).__name__,
            "type": _type_name(action.type),
            "default": _jsonable(action.default),
            "choices": None if action.choices is None else _jsonable(list(action.choices)),
            "nargs": action.nargs,
            "const": _jsonable(action.const),
            "required": bool(action.required),
            "metavar": _jsonable(action.metavar),
        }
        if baseline_defaults is not None and id(action) in baseline_defaults:
            before = baseline_defaults[id(action)]
            if _jsonable(before) != rec["default"]:
                rec["slime_overrides_default"] = True
                rec["megatron_default"] = _jsonable(before)
        records.append(rec)
    return records


def _capture_parsers(fn: Callable[[], Any]) -> list[argparse.ArgumentParser]:
    """Run ``fn`` while recording every parser whose parse_known_args is called."""
    seen: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_known_args

    def spy(self: argparse.ArgumentParser, *a: Any, **kw: Any) -> tuple[argparse.Namespace, list[str]]:
        seen.append(self)
        return original(self, *a, **kw)

    from unittest import mock

    with mock.patch.object(argparse.ArgumentParser, "parse_known_args", spy):  # restored on exit, even on errors
        fn()
    return seen


def build_slime_parsers(slime_root: Path, megatron_root: Path | None = None) -> dict[str, Any]:
    """Build slime's three parsers in-process (needs megatron, sglang, sglang_router importable).

    Returns {"pre": parser, "sglang": parser, "sglang_sources": fn, "megatron": parser,
    "megatron_sources": fn, "baseline_defaults": {...}}.
    """
    old_path = list(sys.path)
    for p in (megatron_root, slime_root):
        if p is not None and str(p) not in sys.path:
            sys.path.insert(0, str(p))
    old_argv = sys.argv
    sys.argv = ["train.py"]
    try:
        from megatron.training.arguments import add_megatron_arguments
        from sglang.srt.server_args import ServerArgs
        from sglang_router.launch_router import RouterArgs
        from slime.backends.sglang_utils.arguments import add_sglang_arguments
        from slime.utils import arguments as slime_arguments

        # phase 0: the parser _pre_parse_mode() builds and parses
        pre = _capture_parsers(slime_arguments._pre_parse_mode)[0]

        # phase 1: SGLang parser, as sglang_parse_args() builds it
        sgl = argparse.ArgumentParser(add_help=False)
        add_sglang_arguments(sgl)
        router_probe = argparse.ArgumentParser(add_help=False)
        RouterArgs.add_cli_args(router_probe, use_router_prefix=True, exclude_host_port=True)
        router_dests = {a.dest for a in router_probe._actions}
        server_probe = argparse.ArgumentParser(add_help=False)
        ServerArgs.add_cli_args(server_probe)
        server_dests = {"sglang_" + a.dest for a in server_probe._actions}

        def sglang_source(action: argparse.Action) -> str:
            if action.dest in router_dests:
                return "sglang_router"
            if action.dest in server_dests:
                return "sglang"
            return "slime(sglang-parser)"

        # phase 2: Megatron's parser + slime's provider, as megatron parse_args() builds it
        meg = argparse.ArgumentParser(description="Megatron-LM Arguments", allow_abbrev=False)
        meg = add_megatron_arguments(meg)
        baseline = {id(a): a.default for a in meg._actions}
        meg = slime_arguments.get_slime_extra_args_provider()(meg)

        def megatron_source(action: argparse.Action) -> str:
            return "megatron" if id(action) in baseline else "slime"
    except ImportError:
        sys.path[:] = old_path
        raise
    finally:
        sys.argv = old_argv
    return {
        "pre": pre,
        "sglang": sgl,
        "sglang_sources": sglang_source,
        "megatron": meg,
        "megatron_sources": megatron_source,
        "baseline_defaults": baseline,
    }


def build_args_json(parsers: Mapping[str, Any], *, slime_commit: str, previous_meta: Mapping[str, Any] | None = None) -> dict:
    """Assemble the ``slime_args.json`` document from built parsers (see ``build_slime_parsers``)."""
    arguments = []
    arguments += serialize_parser(parsers["megatron"], source=parsers["megatron_sources"],
                                  parser_label=PARSER_LABELS["megatron"],
                                  baseline_defaults=parsers["baseline_defaults"])
    arguments += serialize_parser(parsers["sglang"], source=parsers["sglang_sources"], parser_label=PARSER_LABELS["sglang"])
    arguments += serialize_parser(parsers["pre"], source="slime(pre-parse)", parser_label=PARSER_LABELS["pre"],
                                  group_title="pre-parse (_pre_parse_mode)")
    counts: dict[str, int] = {}
    for a in arguments:
        counts[a["source"]] = counts.get(a["source"], 0) + 1
    counts["total"] = len(arguments)
    meg_opts = {o for a in arguments if a["parser"] == PARSER_LABELS["megatron"] for o in a["option_strings"]}
    sgl_opts = {o for a in arguments if a["parser"] == PARSER_LABELS["sglang"] for o in a["option_strings"]}
    meg_dests = {a["dest"] for a in arguments if a["parser"] == PARSER_LABELS["megatron"]}
    sgl_dests = {a["dest"] for a in arguments if a["parser"] == PARSER_LABELS["sglang"]}
    meta = dict(previous_meta or {})
    meta.update({
        "slime_commit": slime_commit,
        "counts": counts,
        "option_strings_in_both_parsers": sorted(meg_opts & sgl_opts),
        "dests_in_both_parsers": sorted(meg_dests & sgl_dests),
        "fields": FIELDS,
    })
    return {"meta": meta, "arguments": arguments}


def dump_args_json(doc: Mapping[str, Any]) -> str:
    """The layout of the packaged slime_args.json: compact, one action per line."""
    def one(x: Any) -> str:
        return json.dumps(x, ensure_ascii=False, separators=(",", ":"))

    return '{"meta":' + one(doc["meta"]) + ',"arguments":[\n' + ",\n".join(one(a) for a in doc["arguments"]) + "\n]}\n"


def cmd_args(ns: argparse.Namespace) -> int:
    slime_root = Path(ns.slime_root).resolve()
    megatron_root = Path(ns.megatron_root).resolve() if ns.megatron_root else None
    out = Path(ns.out)
    previous_meta = json.loads(out.read_text(encoding="utf-8")).get("meta") if out.exists() else None
    try:
        parsers = build_slime_parsers(slime_root, megatron_root)
    except ImportError as e:
        print(f"sync_slime args: cannot import slime's parser dependencies ({e}); install Megatron-LM "
              "(or pass --megatron-root), sglang and sglang-router", file=sys.stderr)
        return 2
    doc = build_args_json(parsers, slime_commit=git_head(slime_root), previous_meta=previous_meta)
    diffs = sync_files({out: dump_args_json(doc)}, check=ns.check)
    if ns.check and diffs:
        sys.stdout.write("".join(diffs))
        return 1
    print(f"sync_slime: {doc['meta']['counts']['total']} actions -> {out}; next: `python -m trainstack.upstream.sync_slime "
          "identity` (which new dests count in the run_id), `help`, `presets`, and docker/Dockerfile's SLIME_COMMIT")
    return 0


HELP_JSON = ARGS_JSON.parent / "slime_help.json"


def build_help_json(parsers: Mapping[str, Any], *, slime_commit: str) -> dict:
    """dest -> the help text of the action trainstack emits for it, as slime's parsers define it."""
    from trainstack.upstream.argtable import load_table

    table = load_table()
    helps: dict[str, str] = {}
    for key in ("megatron", "sglang", "pre"):
        for action in parsers[key]._actions:
            text = action.help
            if not text or text == argparse.SUPPRESS or action.dest not in table:
                continue
            if action.option_strings and table[action.dest].flag not in action.option_strings \
                    and action.dest in helps:
                continue  # keep the help of the flag trainstack emits
            try:
                text = text % {**vars(action), "prog": "train.py", "default": action.default}
            except (KeyError, TypeError, ValueError):
                pass
            helps[action.dest] = " ".join(str(text).split())
    return {"meta": {"slime_commit": slime_commit}, "help": dict(sorted(helps.items()))}


def cmd_help(ns: argparse.Namespace) -> int:
    try:
        parsers = build_slime_parsers(Path(ns.slime_root).resolve(),
                                      Path(ns.megatron_root).resolve() if ns.megatron_root else None)
    except ImportError as e:
        print(f"sync_slime help: cannot import slime's parser dependencies ({e}); install Megatron-LM "
              "(or pass --megatron-root), sglang and sglang-router", file=sys.stderr)
        return 2
    commit = json.loads(ARGS_JSON.read_text(encoding="utf-8"))["meta"]["slime_commit"]
    doc = build_help_json(parsers, slime_commit=commit)
    text = json.dumps(doc, ensure_ascii=False, indent=0, sort_keys=True) + "\n"
    diffs = sync_files({Path(ns.out): text}, check=ns.check)
    if ns.check and diffs:
        sys.stdout.write("".join(diffs))
        return 1
    print(f"sync_slime: help for {len(doc['help'])} dests -> {ns.out}")
    return 0


# =============================================================================================
# identity: which dests count in a run_id, each by name
# =============================================================================================


def build_identity_json(dests: Iterable[str], slime_commit: str, previous: Mapping[str, Any]
                        ) -> tuple[dict[str, Any], list[str], list[str]]:
    """(document, new dests, dropped dests): the previous classification carried over for every
    dest of the table; a new dest counts in the identity (a reviewer may move it to a group)."""
    table = set(dests)
    excluded = {name: {"why": g["why"], "dests": sorted(set(g["dests"]) & table)}
                for name, g in previous.get("excluded", {}).items()}
    known = set(previous.get("identity", [])).union(*(set(g["dests"]) for g in previous.get("excluded", {}).values()))
    taken = set().union(*(set(g["dests"]) for g in excluded.values()))
    doc = {"meta": {**previous.get("meta", {}), "slime_commit": slime_commit},
           "excluded": excluded, "identity": sorted(table - taken)}
    return doc, sorted(table - known), sorted(known - table)


def dump_identity_json(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def cmd_identity(ns: argparse.Namespace) -> int:
    from trainstack.upstream.argtable import ArgTable

    table = ArgTable(json.loads(Path(ns.table).read_text(encoding="utf-8")))
    previous = json.loads(Path(ns.out).read_text(encoding="utf-8")) if Path(ns.out).exists() else {}
    doc, new, dropped = build_identity_json(table.dests(), table.slime_commit, previous)
    diffs = sync_files({Path(ns.out): dump_identity_json(doc)}, check=ns.check)
    for d in new:
        print(f"sync_slime identity: new dest {d} counts in the run_id; if it does not change what is learned, move "
              f"it to a group of 'excluded' in {Path(ns.out).name}")
    for d in dropped:
        print(f"sync_slime identity: {d} is no longer a slime dest; dropped")
    if ns.check and diffs:
        sys.stdout.write("".join(diffs))
        return 1
    return 0


# =============================================================================================
# CLI
# =============================================================================================


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainstack.upstream.sync_slime", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    pr = sub.add_parser("presets", help="regenerate conf/model/*.yaml from slime's model scripts")
    src = pr.add_mutually_exclusive_group()
    src.add_argument("--slime-root", help="slime checkout: re-source scripts/models/*.sh (also rewrites slime_models.json)")
    src.add_argument("--models-json", help=f"models JSON to read (default: {MODELS_JSON.relative_to(REPO_ROOT)})")
    pr.add_argument("--out", default=str(PRESET_DIR), help="preset directory (default: conf/model)")
    pr.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff if files are out of date")
    pr.set_defaults(fn=cmd_presets)

    mj = sub.add_parser("models-json", help="rebuild slime_models.json by sourcing scripts/models/*.sh")
    mj.add_argument("--slime-root", required=True)
    mj.add_argument("--out", default=str(MODELS_JSON))
    mj.add_argument("--check", action="store_true")
    mj.set_defaults(fn=cmd_models_json)

    for name, fn, out, what in (("args", cmd_args, ARGS_JSON, "slime_args.json (every argparse action)"),
                                ("help", cmd_help, HELP_JSON, "slime_help.json (each dest's help text)")):
        sp = sub.add_parser(name, help=f"rebuild {what} from slime's real parsers (needs Megatron + SGLang)")
        sp.add_argument("--slime-root", required=True)
        sp.add_argument("--megatron-root", help="Megatron-LM checkout to put on sys.path")
        sp.add_argument("--out", default=str(out))
        sp.add_argument("--check", action="store_true")
        sp.set_defaults(fn=fn)
    ide = sub.add_parser("identity", help="keep run_identity.json (dests in / out of the run_id) in step with the table")
    ide.add_argument("--table", default=str(ARGS_JSON), help="argument table (default: the packaged one)")
    ide.add_argument("--out", default=str(IDENTITY_JSON))
    ide.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff if the file is out of date")
    ide.set_defaults(fn=cmd_identity)
    return p


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return ns.fn(ns)
    except SyncError as e:
        print(f"sync_slime: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
