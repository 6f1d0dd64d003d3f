"""`trainstack export RUN [--iter N] [--to DIR | --hub REPO] [--force]`."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def add_export(sub: Any) -> None:
    from trainstack.config.userconfig import RUNS_ROOT_ENV, default_runs_root

    p = sub.add_parser("export", help="a checkpoint as a Hugging Face model directory (CPU: the tiny model's Qwen3; "
                       "slime: its torch_dist -> HF converter), to a directory or a Hub repo")
    p.add_argument("run", help="a run id (under --runs-root) or a run directory")
    p.add_argument("--iter", type=int, help="the checkpoint of this rollout id (default: the newest complete one)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--to", help="the output directory (default: <run dir>/exports/iter_NNNNNNN)")
    where.add_argument("--hub", metavar="REPO", help="push the export to this Hub model repo (<user>/<repo>) with the "
                       "Hub client of trainstack's sync (token: HF_TOKEN or `hf auth login`)")
    p.add_argument("--private", action=argparse.BooleanOptionalAction, default=True,
                   help="with --hub: create the repo private (default) or public")
    p.add_argument("--force", action="store_true", help="write into a non-empty --to directory")
    p.add_argument("--json", action="store_true", help="the export's record as JSON on stdout")
    p.add_argument("--runs-root", default=default_runs_root(),
                   help=f"where run ids are looked up (default ${RUNS_ROOT_ENV}, else ./runs)")
    p.set_defaults(func=cmd_export)


def cmd_export(ns: argparse.Namespace) -> int:
    from trainstack.errors import ConfigError, ConfigErrors, RuntimeFailure, report_and_exit, report_failure_and_exit
    from trainstack.export import plan as P
    from trainstack.export.write import write
    from trainstack.run import spec as runspec
    from trainstack.run.rundir.targets import bad_target, find_run
    from trainstack.storage.layout import EXPORTS, iter_name

    tmp = None
    try:
        run_dir = find_run(ns.run, ns.runs_root)
        if run_dir is None:
            raise ConfigErrors([bad_target(ns.run, ns.runs_root)])
        spec = runspec.load(run_dir)
        if ns.hub:
            from trainstack.config.schema import HubSpec

            if not HubSpec.REPO_ID.match(ns.hub):
                raise ConfigErrors([ConfigError("--hub", "not a Hub repo id", "use <user or org>/<repo name>",
                                                value=ns.hub)])
            tmp = tempfile.TemporaryDirectory(prefix="trainstack-export-")
            out: Path = Path(tmp.name) / "model"
        else:
            out = Path(ns.to) if ns.to else Path(spec.run_dir) / EXPORTS
        ex = P.plan(spec, ns.iter, out, ns.force)
        if not ns.to and not ns.hub:
            ex = P.plan(spec, ex.iteration, out / iter_name(ex.iteration), ns.force)
        if spec.cluster.backend != "tiny":
            P.converter_argv(ex)  # refused before anything runs when the converter cannot be told enough
    except ConfigErrors as err:
        report_and_exit(err, command="export")
    t0 = time.monotonic()
    try:
        path = write(ex)
        record: dict[str, Any] = json.loads((path / P.PROVENANCE).read_text())
        if ns.hub:
            record["hub"] = _push(path, ns.hub, ns.private, spec.run_id, ex.iteration)
    except RuntimeFailure as ex_:
        report_failure_and_exit(ex_)
    finally:
        if tmp is not None:
            tmp.cleanup()
    record["seconds"] = round(time.monotonic() - t0, 2)
    if ns.json:
        print(json.dumps(record, indent=1, sort_keys=True))
    else:
        where = f"Hub repo {ns.hub} (commit {record['hub']['commit'][:12]})" if ns.hub else str(path)
        print(f"exported {spec.run_id} iter {ex.iteration} -> {where} in {record['seconds']:.1f} s "
              f"(slime {record['slime_commit'][:8] or '?'}; load with transformers.AutoModelForCausalLM)",
              file=sys.stdout)
    return 0


def _push(path: Path, repo: str, private: bool, run_id: str, iteration: int) -> dict[str, Any]:
    from trainstack.errors import RuntimeFailure
    from trainstack.hub.client import HubClient, describe_error

    try:
        client = HubClient(repo, private=private)
        client.ensure_repo()
        commit = client.upload_folder(path, "", ["*"], f"trainstack export: {run_id} iter {iteration}")
    except Exception as ex:  # noqa: BLE001 - the Hub's and the network's errors alike: one message
        raise RuntimeFailure(f"pushing to {repo}: {describe_error(ex)}",
                             "check HF_TOKEN (or `hf auth login`) and the repo id, then export again") from None
    return {"repo": repo, "commit": commit}
