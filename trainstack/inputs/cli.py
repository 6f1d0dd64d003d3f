"""`trainstack prepare [--plan [--lookup]] OVERRIDES...`: download, transform and convert a config's inputs on this
host now (what every launch does before its trainer), or print the plan."""
from __future__ import annotations

import argparse


def cmd_prepare(ns: argparse.Namespace) -> int:
    from trainstack.errors import ConfigErrors, report_and_exit
    from trainstack.inputs.prepare import for_run, plan, prepare
    from trainstack.pipeline import build_from_overrides

    try:
        run, cmd = build_from_overrides(ns.overrides, ns.config_dir)
        sources, conv = for_run(run.config, run.args, run.cluster, str(cmd.meta.get("slime_commit", "")))
        if ns.plan:
            for item in plan(sources, conv, lookup=ns.lookup):
                print(item.line())
                if item.command and item.state == "convert":
                    print("  conversion: " + " ".join(item.command))
            return 0
        result = prepare(sources, conv)
    except ConfigErrors as err:
        report_and_exit(err)
    for item in result.items:
        print(item.line())
    print(f"prepared in {result.seconds:.2f} s")
    return 0


def add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prepare", help="download, transform and convert a run's inputs (model, datasets, "
                       "torch_dist) into the cache, as a launch does before its trainer")
    p.add_argument("--plan", action="store_true", help="print what would be downloaded and converted (cache only, "
                   "no network)")
    p.add_argument("--lookup", action="store_true", help="with --plan: ask the Hub for the commits and sizes too")
    p.add_argument("--config-dir", default=None, help="another conf/ directory")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for `python run.py`")
    p.set_defaults(func=cmd_prepare)

