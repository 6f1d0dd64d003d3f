"""Golden files: every experiment's rendered command, on fixed placeholder paths.

`python -m trainstack.render.golden --update` rewrites tests/golden/*.json; the test suite
fails when a config or renderer change alters any of them (review the diff, then update).
"""
from __future__ import annotations

import argparse
import json
import sys

from trainstack.config.resolve import CONF_DIR, PROJECT_ROOT

GOLDEN_DIR = PROJECT_ROOT / "tests" / "golden"
PLACEHOLDER_OVERRIDES = [
    "paths.models_root=/MODELS", "paths.data_root=/DATA", "paths.runs_root=/RUNS",
    "slime.root=/SLIME", "slime.megatron_root=/MEGATRON",
]
ROOT_MARK = "<trainstack>"  # the checkout's path in recorded env values


def experiments() -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def golden_record(experiment: str) -> dict:
    from trainstack.render.pipeline import build_from_overrides

    run, cmd = build_from_overrides([f"experiment={experiment}", *PLACEHOLDER_OVERRIDES])
    entry = cmd.entrypoint if cmd.backend == "slime" else ["python", *cmd.entrypoint[1:]]
    env = {k: v.replace(str(PROJECT_ROOT), ROOT_MARK) for k, v in cmd.redacted_env().items()}
    from trainstack.upstream.argtable import load_table

    table = load_table()
    # Flags trainstack adds on its own (run identity, the save_interval default): deliberate, reviewed here.
    added = {table[d].flag: run.source(d).split(" of ")[0] for d in sorted(run.args)
             if run.args[d] is not None and run.source(d).startswith("trainstack")}
    return {"experiment": experiment, "run_id": run.run_id, "backend": cmd.backend,
            "entrypoint": entry, "argv": cmd.groups, "env": env, "added_by_trainstack": added}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--update", action="store_true", help="rewrite the golden files")
    ns = p.parse_args(argv)
    stale = []
    for exp in experiments():
        path = GOLDEN_DIR / f"{exp}.json"
        text = json.dumps(golden_record(exp), indent=2) + "\n"
        if ns.update:
            GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        elif not path.exists() or path.read_text() != text:
            stale.append(exp)
    if stale:
        print("golden files out of date: " + ", ".join(stale) + " (run `make golden` and review the diff)",
              file=sys.stderr)
        return 1
    print(f"golden files {'written' if ns.update else 'up to date'}: {len(experiments())} recipes in {GOLDEN_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
