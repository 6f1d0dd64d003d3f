"""Every slime dest name written in trainstack's code is a dest of the argument table.

A dest name is a string literal, so a typo or a dest slime renamed is silently never read (or
rendered, checked, counted in the run id). This test reads trainstack/ and plugins/ with `ast` and
collects the literals in the places that name dests:

- constants that list dests: module or class assignments named `*_DESTS`, `INPUT_FILES`,
  `INPUT_DIRS`, `INPUT_ANY`, `NOT_PLUGINS` (dict keys for mappings);
- reads and writes of a run's dests: `<r>.get("d")`, `<r>["d"]`, `"d" in <r>`, `<r>.pop("d")`,
  `<r>.update(d=...)`, `<r> = {"d": ...}` for the receivers that hold dests (`args`, `merged`,
  `run.args`, `spec["args"]`, `ctx`, ...), and `dest == "d"` / `dest in ("d", ...)`;
- the validator's helpers: `ctx.err("d", ..., "other")`, `ctx.key/is_set("d")`, `run.key/source("d")`,
  a helper called as `f(ctx, "d")`, and `for d in ("a", "b"): ... ctx...(d)` loops and comprehensions;
- any function or dataclass of trainstack's with a `dest` parameter or field (`Refusal("d", ...)`,
  `_winning_layer(config, "d")`): the literal passed there;
- attributes of slime's parsed namespace read by name: `getattr(args, "d", ...)`;
- slime flags trainstack spells itself: `*_FLAGS` constants, `load_function(path, "--flag")`,
  `<error>.key == "--flag"`, the tiny trainer's `ConfigError("--flag", ...)` and `err("dest", ...)`.

It fails naming file:line for every name that is not a slime dest (or flag) of the table. Names that
are trainstack's own are allowed only in ALLOWED, each with the reason.
"""
from __future__ import annotations

import ast
import re

import pytest

from conftest import ROOT
from trainstack.upstream.argtable import load_table

SCANNED = [ROOT / "trainstack", ROOT / "plugins"]
CONSTANT = re.compile(r"(_DESTS|^INPUT_(FILES|DIRS|ANY)|^NOT_PLUGINS)$")
FLAG_CONSTANT = re.compile(r"_FLAGS$")
# Expressions whose string keys are slime dests (dotted source text of the receiver).
RECEIVERS = {"args", "merged", "layered", "run.args", "spec.args", "facts.args", "self.args", "stored.args",
             "ctx", "managed", "provenance", "layer_of", "self.table", "load_table()", "at.load_table()",
             "run.provenance", "run.layer_of"}
READS = {"get", "pop", "setdefault", "is_set", "key", "err", "source"}
# `run.key("d")`, `run.source("d")`: ResolvedRun's dest accessors.
RUN_ACCESSORS = {"run": {"key", "source"}, "self.run": {"key", "source"}}
# Local maps of dests under a generic name, per module.
MODULE_RECEIVERS = {"trainstack/config/resolve.py": {"out"}}  # derive_cluster_args: the dests derived from the cluster
COMMON = {"get", "key", "source", "is_set", "err", "__contains__", "__getitem__"}  # by receiver only
NAMESPACES = {"args", "a"}  # slime's parsed argparse namespace in the tiny trainer and plugins
DEST_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
FLAG_NAME = re.compile(r"^--[a-z][a-z0-9-]*$")
# The tiny trainer speaks slime's argv: its errors are keyed by slime flag (`ConfigError("--load", ...)`)
# or by dest through its `err("dest", ...)` helper.
TINY = "trainstack/tiny/"

# Names in dest positions that are trainstack's own, not slime's: (file, name) -> why.
ALLOWED: dict[tuple[str, str], str] = {
    ("trainstack/http_env/cli.py", "--env"): "`trainstack-http-env serve`'s own option (an env settings key), "
                                             "not a slime flag",
    ("trainstack/cli/completion.py", "--shell-completion"): "Hydra's own shell-completion option that `trainstack run` "
                                                        "passes through, not a slime flag",
    ("trainstack/tiny/rollout.py", "eval_datasets"): "an attribute slime's own validation sets from eval_prompt_data "
                                                       "(slime/utils/arguments.py _resolve_eval_datasets), not a CLI dest",
    ("trainstack/tiny/limits.py", "eval_datasets"): "the same attribute slime sets from eval_prompt_data "
                                                     "(slime/utils/arguments.py _resolve_eval_datasets), not a CLI dest",
    ("trainstack/script_import/plan.py", "pythonpath"): "a launch script's PYTHONPATH, imported as "
                                                        "runtime_env.pythonpath (trainstack's setting), not a slime dest",
    ("trainstack/reports/compare.py", "meta"): "a dest namespace's `meta:` block (trainstack's settings beside the dests)",
    ("trainstack/inputs/prepare.py", "meta"): "a dest namespace's `meta:` block (the model's source, not a flag)",
    ("trainstack/config/overrides.py", "meta"): "a dest namespace's `meta:` block (trainstack's settings beside the dests)",
}


def _dotted(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return ""


def _strings(node: ast.AST, keys_only: bool = False) -> list[ast.Constant]:
    if isinstance(node, ast.Dict):
        return [k for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return [n for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def dest_params(trees: list[ast.AST]) -> dict[str, int]:
    """Functions and dataclasses with a `dest` parameter or field: name -> its position."""
    out: dict[str, int] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
                if "dest" in names and node.name not in COMMON:
                    out[node.name] = names.index("dest")
            elif isinstance(node, ast.ClassDef):
                fields = [n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
                if "dest" in fields:
                    out[node.name] = fields.index("dest")
    return out


def _uses(var: str, scope: list[ast.AST]) -> bool:
    """Is `var` passed to a dest reader (a receiver's method or a `f(ctx, ...)` helper) in `scope`?"""
    for root in scope:
        for n in ast.walk(root):
            if isinstance(n, ast.Call) and any(isinstance(a, ast.Name) and a.id == var for a in n.args) and (
                    isinstance(n.func, ast.Attribute) and _dotted(n.func.value) in RECEIVERS
                    or n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == "ctx"
                    or isinstance(n.func, ast.Name) and n.func.id == "getattr" and _dotted(n.args[0]) in NAMESPACES):
                return True
    return False


class Collector(ast.NodeVisitor):
    """(line, name, kind) of every dest-position literal of one module; kind: dest | flag."""

    def __init__(self, rel: str, dest_funcs: dict[str, int] | None = None):
        self.rel = rel
        self.dest_funcs = dest_funcs or {}
        self.found: list[tuple[int, str, str]] = []
        self.tiny = rel.startswith(TINY)

    def receiver(self, node: ast.AST) -> bool:
        text = _dotted(node)
        return (text in RECEIVERS or text.endswith((".args", "['args']", '["args"]'))
                or text in MODULE_RECEIVERS.get(self.rel, set()))

    def add(self, node: ast.Constant, kind: str = "dest") -> None:
        value = str(node.value)
        if kind == "dest" and DEST_NAME.match(value) or kind == "flag" and FLAG_NAME.match(value):
            self.found.append((node.lineno, value, kind))

    def _assigned(self, targets: list[ast.expr], value: ast.expr | None) -> None:
        if value is None:
            return
        for t in targets:
            name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else ""
            if isinstance(value, ast.Dict) and self.receiver(t):  # managed = {"save": ..., ...}
                for c in _strings(value):
                    self.add(c)
            if CONSTANT.search(name):
                for c in _strings(value, keys_only=True):
                    self.add(c)
            elif FLAG_CONSTANT.search(name):
                for c in _strings(value):
                    self.add(c, "flag")

    def visit_Assign(self, node: ast.Assign) -> None:
        self._assigned(node.targets, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._assigned([node.target], node.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            recv = _dotted(func.value)
            if self.receiver(func.value) and func.attr in READS:
                args = node.args if func.attr == "err" else node.args[:1]
                if func.attr == "err":  # err(dest, problem, fix, *others)
                    args = node.args[:1] + node.args[3:]
                for a in args:
                    if isinstance(a, ast.Constant) and isinstance(a.value, str):
                        self.add(a)
            if self.receiver(func.value) and func.attr == "update":
                for kw in node.keywords:
                    if kw.arg:
                        self.add(ast.Constant(kw.arg, lineno=node.lineno))
            if func.attr in RUN_ACCESSORS.get(recv, set()) and node.args:
                a = node.args[0]
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    self.add(a)
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        first = node.args[0] if node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str) else None
        if name == "load_function" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
            self.add(node.args[1], "flag")
        if self.tiny and first is not None and name == "ConfigError" and first.value.startswith("--"):
            self.add(first, "flag")
        if self.tiny and first is not None and name == "err":
            self.add(first)
        if name in self.dest_funcs:
            pos = self.dest_funcs[name]
            args_at = [node.args[pos]] if len(node.args) > pos else []
            args_at += [kw.value for kw in node.keywords if kw.arg == "dest"]
            for a in args_at:
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    self.add(a)
        if (name == "getattr" and isinstance(func, ast.Name) and len(node.args) > 1
                and _dotted(node.args[0]) in NAMESPACES and isinstance(node.args[1], ast.Constant)):
            self.add(node.args[1])
        # a validator helper: f(ctx, "dest", ...)
        if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "ctx":
            for a in node.args[1:]:
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    self.add(a)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.receiver(node.value) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str):
            self.add(node.slice)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if (isinstance(node.left, ast.Constant) and isinstance(node.left.value, str) and len(node.ops) == 1
                and isinstance(node.ops[0], (ast.In, ast.NotIn)) and self.receiver(node.comparators[0])):
            self.add(node.left)
        # dest == "d", dest in ("a", "b")
        right = node.comparators[0]
        if isinstance(node.left, ast.Name) and node.left.id == "dest" and len(node.ops) == 1 and (
                isinstance(right, ast.Constant) or isinstance(right, (ast.Tuple, ast.List, ast.Set))):
            for c in _strings(right):
                self.add(c)
        # error.key == "--flag": an error the trainer keyed by a slime flag
        if (isinstance(node.left, ast.Attribute) and node.left.attr == "key" and len(node.ops) == 1
                and isinstance(node.comparators[0], ast.Constant) and isinstance(node.comparators[0].value, str)
                and node.comparators[0].value.startswith("--")):
            self.add(node.comparators[0], "flag")
        self.generic_visit(node)

    def _loop(self, target: ast.expr, it: ast.expr, scope: list[ast.AST]) -> None:
        if isinstance(target, ast.Name) and isinstance(it, (ast.Tuple, ast.List, ast.Set)) and _uses(target.id, scope):
            for c in _strings(it):
                self.add(c)

    def visit_For(self, node: ast.For) -> None:
        # for d in ("a", "b"): ... ctx.get(d) / f(ctx, d)
        self._loop(node.target, node.iter, list(node.body))
        self.generic_visit(node)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        # [ctx.err(d, ...) for d in ("a", "b") if ctx.is_set(d)]
        for gen in node.generators:
            self._loop(gen.target, gen.iter, [node])
        self.generic_visit(node)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension


GENERATORS = ("trainstack/upstream/sync_slime.py", "trainstack/upstream/model_meta.py", "trainstack/render/golden.py")


def collect() -> list[tuple[str, int, str, str]]:
    modules = {}
    for base in SCANNED:
        for path in sorted(base.rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel in GENERATORS:  # the generators read slime's parsers, not dests
                continue
            modules[rel] = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
    funcs = dest_params(list(modules.values()))
    out = []
    for rel, tree in modules.items():
        c = Collector(rel, funcs)
        c.visit(tree)
        out += [(rel, line, name, kind) for line, name, kind in sorted(set(c.found))]
    return out


def unknown(found: list[tuple[str, int, str, str]]) -> list[str]:
    table = load_table()
    bad = []
    for rel, line, name, kind in found:
        ok = name in table if kind == "dest" else name in table.flag_to_dest
        if not ok and (rel, name) not in ALLOWED:
            bad.append(f"{rel}:{line}: {name!r} is not a slime {kind} of the argument table "
                       f"(slime {table.slime_commit[:8]})")
    return bad


def test_every_dest_name_in_the_code_is_a_slime_dest():
    found = collect()
    assert len(found) > 150, len(found)  # the scan sees the code that names dests
    bad = unknown(found)
    assert not bad, "\n".join(bad)


def test_every_allowance_is_still_needed_and_says_why():
    found = {(rel, name) for rel, _line, name, _kind in collect()}
    for key, why in ALLOWED.items():
        assert why.strip() and key in found, key


@pytest.mark.parametrize("src,name", [
    ("PATH_DESTS = frozenset({'hf_checkpoint', 'critic_lod'})", "critic_lod"),
    ("INPUT_DIRS = ('ref_load', 'critic_load')", "critic_load"),
    ("def f(args):\n    return args.get('rollout_batchsize')", "rollout_batchsize"),
    ("def f(run):\n    return run.args['n_sample_per_prompt']", "n_sample_per_prompt"),
    ("def rule(ctx):\n    return ctx.err('lr', 'p', 'f', 'kl_coeff')", "kl_coeff"),
    ("def rule(ctx):\n    for d in ('lr', 'min_lrr'):\n        ctx.get(d)", "min_lrr"),
    ("def f(merged):\n    return 'use_wandbb' in merged", "use_wandbb"),
    ("PREPARED_DATA_FLAGS = ('--prompt-data', '--promt-data')", "--promt-data"),
    ("def f(errors):\n    return [e for e in errors if e.key != '--custom-config-pth']", "--custom-config-pth"),
    ("def f(args):\n    return args.update(wandb_grup='x')", "wandb_grup"),
    ("def rule(ctx):\n    return [ctx.err(d, 'p', 'f') for d in ('lr', 'use_flash_atn') if ctx.get(d)]", "use_flash_atn"),
    ("def f(a):\n    return getattr(a, 'hiden_dropout', 0.0)", "hiden_dropout"),
    ("REFUSALS = (Refusal('kl_coef', None), Refusal('use_tiss', None))", "use_tiss"),
    ("def f(spec):\n    return spec['args'].get('save_hff')", "save_hff"),
    ("def f(self):\n    return self.spec.args.get('save_hff')", "save_hff"),
    ("def f(dest):\n    return dest == 'save_intervall'", "save_intervall"),
    ("def f(merged):\n    managed = {'save': 1, 'lod': 2}", "lod"),
])
def test_the_scan_catches_a_misspelled_dest(tmp_path, src, name):
    c = Collector("trainstack/example.py", {"Refusal": 0})
    c.visit(ast.parse(src))
    bad = unknown([("trainstack/example.py", line, n, kind) for line, n, kind in c.found])
    assert len(bad) == 1 and repr(name) in bad[0] and bad[0].startswith("trainstack/example.py:"), bad
