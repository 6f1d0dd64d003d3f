"""`trainstack slime sync --slime-root PATH`: the argument table, model presets and run-identity review of
any slime checkout, built on this machine (CPU, seconds) into the user cache, where later runs find it.

    trainstack slime sync --slime-root ~/src/slime            # -> ~/.cache/trainstack/slime/<fingerprint>/
    trainstack slime sync --slime-root ~/src/slime --name v0.3.2
    trainstack slime list                                     # the tables trainstack has, and where

The table comes from slime's own parser code in that checkout (``trainstack.upstream.build``); the run
that names the checkout (`slime.root`) then uses it, because the checkout's argument files match it
(``trainstack.upstream.versions``). What is written, under ``<cache>/slime/<fingerprint>/``:

- ``slime_args.json``: the table (the packaged layout, so `git diff --no-index` against
  ``trainstack/data/slime_args.json`` is the review of a pin upgrade);
- ``changes.txt``: the dests added, removed and renamed against the packaged pin;
- ``slime_models.json`` and ``conf/model/<name>.yaml``: the presets of its ``scripts/models/*.sh``
  (use them with ``--config-dir <dir>/conf``; a model without ``trainstack/upstream/model_meta.py``
  sizes is listed and left out);
- ``run_identity.json``: which of its dests count in a run_id (the packaged review carried over, new
  dests counted).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def fingerprint(sources: dict[str, str | None]) -> str:
    from trainstack.upstream.identity import blob_id

    return blob_id(json.dumps(sorted(sources.items())).encode())[:12]


def changes(doc: dict[str, Any]) -> list[str]:
    """What the built table adds, removes and renames against the packaged pin's."""
    from trainstack.upstream.argtable import TABLE_PATH, ArgTable, load_table
    from trainstack.upstream.renames import _renamed_to

    pin = load_table(str(TABLE_PATH))
    mine = ArgTable(doc)
    gone = sorted(d for d in pin.dests() if d not in mine)
    added = sorted(d for d in mine.dests() if d not in pin)
    renamed = {}
    pin_records: dict[str, dict] = {}
    for a in pin.raw_arguments:
        pin_records.setdefault(a["dest"], a)
    for d in gone:
        new = _renamed_to(pin_records[d], mine, {a["dest"]: a for a in pin.raw_arguments})
        if new:
            renamed[d] = new
    out = [f"against the packaged pin (slime {pin.meta.get('slime_version') or pin.slime_commit[:8]}): "
           f"{len(added)} dests added, {len(gone)} removed ({len(renamed)} of them renamed)"]
    out += [f"renamed  {mine[new].flag}  (the pin's {pin[old].flag})" for old, new in sorted(renamed.items())]
    out += [f"added    {mine[d].flag}" for d in added if d not in renamed.values()]
    out += [f"removed  {pin[d].flag}" for d in gone if d not in renamed]
    return out


def sync(slime_root: Path, name: str | None = None, out_root: Path | None = None) -> tuple[Path, list[str]]:
    """Build and write everything for the checkout; returns (its directory, notes to print)."""
    from trainstack.upstream import build, sync_slime, versions
    from trainstack.upstream.argtable import ArgTable

    doc = build.build(slime_root)
    commit = doc["meta"].get("slime_commit") or "unknown"
    meta: dict[str, Any] = {}
    for k, v in doc["meta"].items():
        meta[k] = v
        if k == "slime_commit":
            meta["slime_version"] = name or (commit[:8] if commit != "unknown" else
                                             fingerprint(doc["meta"]["slime_sources"]))
    doc["meta"] = meta
    target = (out_root or versions.cache_dir()) / fingerprint(doc["meta"]["slime_sources"])
    target.mkdir(parents=True, exist_ok=True)
    (target / "slime_args.json").write_text(sync_slime.dump_args_json(doc), encoding="utf-8")
    notes = changes(doc)
    (target / "changes.txt").write_text("\n".join(notes) + "\n", encoding="utf-8")
    table = ArgTable(doc)
    identity_prev = json.loads(sync_slime.IDENTITY_JSON.read_text(encoding="utf-8"))
    ident, new, _ = sync_slime.build_identity_json(table.dests(), commit, identity_prev)
    (target / "run_identity.json").write_text(sync_slime.dump_identity_json(ident), encoding="utf-8")
    if new:
        notes.append(f"{len(new)} new dests count in the run_id ({target / 'run_identity.json'})")
    notes += _presets(slime_root, table, target)
    return target, notes


def _presets(slime_root: Path, table: Any, target: Path) -> list[str]:
    from trainstack.upstream import sync_slime

    if not (slime_root / "scripts" / "models").is_dir():
        return ["no scripts/models/ in the checkout: no presets"]
    models = sync_slime.build_models_json(slime_root, table=table)
    (target / "slime_models.json").write_text(sync_slime.dump_models_json(models), encoding="utf-8")
    left_out = dict(models["meta"]["errors"])
    left_out.update({k: f"flags not in its table: {v}" for k, v in models["meta"]["flags_not_in_parser_table"].items()})
    conf = target / "conf" / "model"
    conf.mkdir(parents=True, exist_ok=True)
    written = 0
    for model, pairs in models["models"].items():
        if model in left_out:
            continue
        try:
            text = sync_slime.render_preset(model, pairs, table, models["meta"]["slime_commit"])
        except sync_slime.SyncError as e:
            left_out[model] = str(e)
            continue
        (conf / f"{model}.yaml").write_text(text, encoding="utf-8")
        written += 1
    notes = [f"{written} model presets in {conf} (use them with --config-dir {target / 'conf'})"]
    notes += [f"preset left out: {m}: {why}" for m, why in sorted(left_out.items())]
    return notes


def cmd_sync(ns: argparse.Namespace) -> int:
    from trainstack.upstream.build import BuildError
    from trainstack.upstream.select import has_checkout

    root = Path(ns.slime_root).expanduser().resolve()
    if not has_checkout(root):
        print(f"trainstack: --slime-root {root}: no slime checkout there (no slime/__init__.py)\n"
              "  fix   : give the directory that holds train.py and the slime/ package", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        target, notes = sync(root, ns.name, Path(ns.out).expanduser() if ns.out else None)
    except BuildError as e:
        print(f"trainstack: {e}", file=sys.stderr)
        return 2
    for line in notes:
        print(line)
    print(f"trainstack: slime table for {root} -> {target / 'slime_args.json'} ({time.perf_counter() - start:.1f} s); "
          f"runs whose slime.root has this content use it")
    return 0


def cmd_list(ns: argparse.Namespace) -> int:
    from trainstack.upstream.versions import known_tables

    for k in known_tables():
        print(f"{k.label:32s} {k.origin:9s} {k.path}")
    return 0


def add_commands(sub: Any) -> None:
    p = sub.add_parser("slime", help="the slime versions trainstack knows; build the table of another checkout")
    ssub = p.add_subparsers(dest="slime_command", required=True)
    s = ssub.add_parser("sync", help="build the argument table, presets and identity review of a slime checkout "
                        "into the user cache (CPU, seconds)")
    s.add_argument("--slime-root", required=True, help="the slime checkout (the directory with train.py)")
    s.add_argument("--name", help="what to call this version (default: its short commit)")
    s.add_argument("--out", help="write under this directory instead of the user cache (the cache is what runs read)")
    s.set_defaults(func=cmd_sync)
    s = ssub.add_parser("list", help="the tables trainstack has: packaged, and built by sync")
    s.set_defaults(func=cmd_list)
