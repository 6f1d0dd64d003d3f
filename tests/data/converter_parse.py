"""Verdicts of the real parser on the torch_dist conversion argvs trainstack renders (docs/inputs.md,
"The conversion"); the recorded result is tests/data/converter_argv_verdicts.json, which
tests/test_inputs_converter_argv.py checks against what trainstack renders now.

slime's `tools/convert_hf_to_torch_dist.py` parses with Megatron's `parse_args(add_convertion_args)`
(strict: an unknown flag is an error) and then slime's `set_default_megatron_args`. Step 1 renders the
argv of every model preset that has a conversion (`ref_load`), in trainstack's venv; step 2 runs in the
environment of /work/shared/tools/slime-parse (its setup.sh builds it: slime 624b824a, Megatron-LM
1dcf0daf with slime's patches, CPU torch) and parses each argv exactly as the tool does, then checks
that every flag landed on the dest trainstack meant, with the value it meant.

    .venv/bin/python tests/data/converter_parse.py render > /tmp/conv-argvs.json
    SLIME_PARSE_HOME=<DEST> $SLIME_PARSE_HOME/venv/bin/python tests/data/converter_parse.py parse \
        /tmp/conv-argvs.json > tests/data/converter_argv_verdicts.json
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HF, SAVE = "/hf", "/save"


def render() -> dict:
    """preset -> {argv (the tool's flags only), intended {dest: value}} for every preset with a conversion."""
    root = Path(__file__).resolve().parents[2]
    out = {}
    for preset in sorted(p.stem for p in (root / "conf" / "model").glob("*.yaml")):
        item = render_one(preset)
        if item is None:
            print(f"left out: {preset}", file=sys.stderr)  # no conversion (tiny), or no cluster shape composes it
            continue
        out[preset] = item
    return out


def render_one(preset: str) -> dict | None:
    from trainstack.upstream.argtable import load_table
    from trainstack.inputs.prepare import for_run
    from trainstack.render.command import render_dest

    run = _build(preset)
    if run is None:
        return None
    _, conv = for_run(run.config, run.args, run.cluster, "")
    if conv is None:
        return None
    table = load_table()
    flags = list(conv.model_flags)
    dests = {}  # what converter_for rendered, dest by dest
    for dest in (run.config.get("model") or {}):
        spec = table.specs.get(dest)
        if spec is not None and run.args.get(dest) is not None and render_dest(spec, run.args[dest]) \
                and render_dest(spec, run.args[dest])[0] in flags:
            dests[dest] = run.args[dest]
    return {"argv": [*flags, "--hf-checkpoint", HF, "--save", SAVE], "nproc": conv.nproc,
            "intended": {**dests, "hf_checkpoint": HF, "save": SAVE}}


def _build(preset: str):
    """The preset on enough 8-GPU nodes for its parallelism (the conversion's flags do not depend on them)."""
    from trainstack.errors import ConfigErrors
    from trainstack.render.pipeline import build_from_overrides

    for nodes in (1, 16, 128):
        try:
            return build_from_overrides([f"model={preset}", "env=dapo_math", "cluster=local_8xh100",
                                         f"cluster.num_nodes={nodes}", "args.use_dynamic_batch_size=true",
                                         "args.max_tokens_per_gpu=8192"])[0]
        except ConfigErrors:
            pass
    return None


def parse(argvs: dict) -> dict:
    """Megatron's parse_args(add_convertion_args) on each argv, as the tool calls it (in slime-parse's env)."""
    home = Path(os.environ["SLIME_PARSE_HOME"])
    sys.path[:0] = [str(home / "Megatron-LM"), str(home / "slime")]
    sys.path.insert(0, str(home / "slime" / "tools"))
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("RANK", "0")
    from megatron.training.arguments import parse_args

    add_convertion_args = _tool_args(home)
    verdicts = {}
    for preset, item in argvs.items():
        sys.argv = ["convert_hf_to_torch_dist.py", *item["argv"]]
        try:
            ns = parse_args(add_convertion_args)
        except SystemExit as ex:
            verdicts[preset] = {"pass": False, "problem": f"parse_args exited {ex.code}"}
            continue
        wrong = {d: [v, getattr(ns, d, "<missing>")] for d, v in item["intended"].items()
                 if not _same(getattr(ns, d, "<missing>"), v)}
        verdicts[preset] = {"pass": not wrong, "not_as_intended": wrong, "checked": len(item["intended"]),
                            "argv": item["argv"]}
    return {"how": "Megatron-LM 1dcf0daf (slime's patches) parse_args(add_convertion_args) of slime 624b824a "
                   "tools/convert_hf_to_torch_dist.py, in /work/shared/tools/slime-parse's environment; "
                   "tests/data/converter_parse.py", "verdicts": verdicts}


def _tool_args(home: Path):
    """The tool's own add_convertion_args, read from its source (importing the tool needs a GPU stack)."""
    import ast

    src = (home / "slime" / "tools" / "convert_hf_to_torch_dist.py").read_text()
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "add_convertion_args")
    scope: dict = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "convert_hf_to_torch_dist.py", "exec"), scope)  # noqa: S102
    return scope["add_convertion_args"]


def _same(got, meant) -> bool:
    if isinstance(meant, float) or isinstance(got, float):
        try:
            return abs(float(got) - float(meant)) <= 1e-12 * max(1.0, abs(float(meant)))
        except (TypeError, ValueError):
            return False
    if isinstance(meant, str) and isinstance(got, list):  # Megatron's moe_freq_type evaluates `[0]*3+[1]*89`
        return eval(meant, {"__builtins__": {}}) == got  # noqa: S307 (a preset's own expression)
    if isinstance(meant, list):
        return list(got or []) == meant
    return got == meant


if __name__ == "__main__":
    if sys.argv[1] == "render":
        json.dump(render(), sys.stdout, indent=1, sort_keys=True)
    else:
        json.dump(parse(json.loads(Path(sys.argv[2]).read_text())), sys.stdout, indent=1, sort_keys=True)
    print()
