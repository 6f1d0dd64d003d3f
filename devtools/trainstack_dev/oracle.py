"""The slime parse oracle: trainstack's verdict on an override list, next to slime's recorded one.

`make oracle` (a developer machine with slime's real parser, see docs/validation.md) renders the
corpus in ``scripts/oracle/corpus.py``, runs every argv through slime's real `parse_args` and
records the verdicts in ``tests/oracle/slime_parse_oracle.json``. CI has no slime: it re-renders
each entry with :func:`judge` and checks the argv did not drift and that trainstack accepts
exactly what slime accepted (tests/test_slime_oracle.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from trainstack.config.resolve import PROJECT_ROOT
from trainstack.render.golden import PLACEHOLDER_OVERRIDES, ROOT_MARK  # machine-independent paths, as in goldens

CHECKOUT = Path(__file__).resolve().parents[2]  # devtools/ lives only in a checkout, beside tests/
ORACLE_PATH = CHECKOUT / "tests" / "oracle" / "slime_parse_oracle.json"


@dataclass
class Judgement:
    """What trainstack makes of one override list."""

    overrides: list[str]
    accepted: bool  # resolved, validated and rendered
    rules: list[str] = field(default_factory=list)  # validator rules that refused it
    error_keys: list[str] = field(default_factory=list)
    argv: list[str] | None = None  # rendered even when a rule refused it (None: not renderable)
    env: dict[str, str] = field(default_factory=dict)
    intended: dict[str, Any] = field(default_factory=dict)  # dest -> value trainstack means
    launch_files: dict[str, str] = field(default_factory=dict)  # files the launch writes that the argv names


def _normalise(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace(str(PROJECT_ROOT), ROOT_MARK)
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    return value


def as_parsed(spec: Any, value: Any) -> Any:
    """The value argparse makes of the rendered tokens: strings for untyped flags (`8998` -> '8998')."""
    from trainstack.render.command import format_value
    from trainstack.upstream import argtable as at

    if isinstance(value, list):
        return [as_parsed(spec, v) for v in value]
    if spec.value_kind == at.STR and not isinstance(value, (bool, dict)):
        return format_value(value)
    return value


def judge(overrides: Sequence[str], skip: frozenset[str] = frozenset()) -> Judgement:
    """Compose, resolve, validate (rule by rule) and render; never raises ConfigErrors. `skip`
    names rules to leave out (the mutation test disables each rule in turn)."""
    from trainstack.errors import ConfigErrors
    from trainstack.render.pipeline import compose

    try:
        cfg, origin = compose([*PLACEHOLDER_OVERRIDES, *overrides])
    except ConfigErrors as err:
        return Judgement(list(overrides), False, ["resolve"], sorted({e.key for e in err.errors}))
    return judge_composed(cfg, origin, overrides, skip)


def judge_composed(cfg: Any, origin: Any, overrides: Sequence[str], skip: frozenset[str] = frozenset()) -> Judgement:
    """judge() from a config Hydra already composed (the per-dest oracle composes each base once)."""
    from trainstack.config.resolve import resolve
    from trainstack.errors import ConfigErrors
    from trainstack.render.command import render
    from trainstack.rules.validate import RULES, Ctx
    from trainstack.upstream.argtable import load_table

    try:
        run = resolve(cfg, origin)
    except ConfigErrors as err:
        return Judgement(list(overrides), False, ["resolve"], sorted({e.key for e in err.errors}))
    ctx = Ctx(run)
    rules: list[str] = []
    keys: set[str] = set()
    for rule in RULES:
        if rule.__name__ in skip or f"{rule.__module__}.{rule.__name__}" in skip:
            continue
        errs = rule(ctx)
        if errs:
            rules.append(rule.__name__)
            keys.update(e.key for e in errs)
    cmd = render(run)
    table = load_table()
    intended = {d: as_parsed(table[d], v) for d, v in run.args.items() if v is not None}
    from trainstack.rules.switch_rules import NONE_READ_AS_FALSE

    for d in NONE_READ_AS_FALSE & {d for d, v in intended.items() if v is False}:
        intended[d] = None  # no flag renders false: slime holds its default None, which Megatron reads as false
    for d in [d for d, v in intended.items() if v is False and table[d].is_switch and table[d].default is None
              and not table[d].true_flag and not table[d].false_flag]:
        intended[d] = None  # a removed option kept as a no-op (no flag at all): false renders nothing, as meant
    from trainstack import hooks

    files: dict[str, str] = {}
    for written_by in hooks.get(hooks.LAUNCH_FILES):  # a feature's files that the argv names (an env's YAML)
        files.update(written_by(run.config, run.args))
    return Judgement(list(overrides), not rules, rules, sorted(keys), _normalise(cmd.argv),
                     _normalise(cmd.redacted_env()), _normalise(intended), files)


def load_oracle(path: Path = ORACLE_PATH) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_oracle(path: Path, meta: dict, entries: list[dict]) -> None:
    """An oracle file: the meta on one line, then one entry per line (diffs of a re-recording stay readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write('{"meta": ' + json.dumps(meta, sort_keys=True) + ',\n "entries": [\n')
        f.write(",\n".join("  " + json.dumps(e, sort_keys=True) for e in entries))
        f.write("\n]}\n")
