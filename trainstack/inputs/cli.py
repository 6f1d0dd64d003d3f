"""`trainstack prepare [--plan [--lookup]] OVERRIDES...`: download, transform and convert a config's inputs on this
host now (what every launch does before its trainer), or print the plan."""
from __future__ import annotations

import argparse


def cmd_prepare(ns: argparse.Namespace) -> int:
    from trainstack.errors import ConfigErrors, report_and_exit
    from trainstack.inputs.prepare import for_run, plan, prepare
    from trainstack.render.pipeline import build_from_overrides

    try:
        run, cmd = build_from_overrides(ns.overrides, ns.config_dir)
        sources, conv = for_run(run.config, run.args, run.cluster, str(cmd.meta.get("slime_commit", "")))
        if ns.plan:
            items = plan(sources, conv, lookup=ns.lookup)
            for item in items:
                print(item.line())
                if item.command and item.state == "convert":
                    print("  conversion: " + " ".join(item.command))
            if not items:
                print(nothing_to_prepare(run))
            return 0
        result = prepare(sources, conv)
    except ConfigErrors as err:
        report_and_exit(err)
    for item in result.items:
        print(item.line())
    print(f"prepared in {result.seconds:.2f} s" if result.items else nothing_to_prepare(run))
    return 0


def nothing_to_prepare(run) -> str:
    """What `prepare` says for a run with no Hub inputs (the CPU default): why, and where its data comes from."""
    hook = (run.meta.get("env") or {}).get("prepare")
    made = (f"; its data files come from the env's data hook ({hook}), which every launch runs before the trainer"
            if hook else "; its inputs are the paths its config names")
    return (f"nothing to download or convert for {run.run_id}: it names no Hub model or dataset (model.meta.hf_repo, "
            f"env.meta.data){made}")


def add_prepare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prepare", help="download, transform and convert a run's inputs (model, datasets, "
                       "torch_dist) into the cache, as a launch does before its trainer")
    p.add_argument("--plan", action="store_true", help="print what would be downloaded and converted (cache only, "
                   "no network)")
    p.add_argument("--lookup", action="store_true", help="with --plan: ask the Hub for the commits and sizes too")
    p.add_argument("--config-dir", default=None, help="another conf/ directory")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for `python run.py`")
    p.set_defaults(func=cmd_prepare)

