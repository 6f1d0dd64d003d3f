"""`trainstack hub ls RUN` (what the Hub holds of a run) and `trainstack hub pull RUN [--iter N]`
(fetch one pushed checkpoint by hand, checked like a restore). RUN is a run id or a run directory;
the repo is the run's `hub.repo_id` (from its spec.json) unless `--repo-id` names it."""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.hub import layout
from trainstack.run.rundir import RunDir
from trainstack.storage.layout import SPEC, TRACKER, iter_name

EXIT_HUB = 1  # the Hub did not answer, or a download did not check out
RUN_ID = re.compile(r"^[A-Za-z0-9._-]+$")
CURSOR = re.compile(r"^global_dataset_state_dict_(\d+)\.pt$")


def _target(ns: argparse.Namespace) -> tuple[str, str, RunDir | None]:
    """(run_id, repo_id, the local run dir if there is one)."""
    from trainstack.run.rundir.targets import find_run

    run_dir = find_run(ns.run, ns.runs_root)
    run_id = run_dir.name if run_dir is not None else ns.run
    repo_id = ns.repo_id
    if repo_id is None and run_dir is not None:
        repo_id = ((RunDir(run_dir).read(SPEC) or {}).get("hub") or {}).get("repo_id")
    if not RUN_ID.match(run_id):
        raise ConfigErrors([ConfigError("RUN", f"'{ns.run}' is neither a run directory nor a run id",
                                        "give a run id (as in runs/<run_id>) or a run directory", value=ns.run)])
    if not repo_id:
        where = f"its spec ({run_dir}) has no hub.repo_id" if run_dir is not None else \
            f"there is no run dir for it under {ns.runs_root}"
        raise ConfigErrors([ConfigError("--repo-id", f"which Hub repo holds run {run_id}? {where}",
                                        "add --repo-id <user>/<repo>", value=None)])
    return run_id, repo_id, RunDir(run_dir) if run_dir is not None else None


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return str(n)


def listing(client: Any, run_id: str) -> dict[str, Any]:
    """What the Hub's main branch holds of a run: pointer, checkpoints, HF exports, rollout data."""
    pointer, head = client.read_pointer(run_id)
    entries = client.ls(run_id, revision=head, recursive=True) if head else []
    sizes: dict[int, int] = {}
    files: dict[int, int] = {}
    hf: dict[int, int] = {}
    manifests: set[int] = set()
    rollouts = [0, 0]
    for e in entries:
        rel = e.path[len(run_id) + 1:]
        parts = rel.split("/")
        if e.size is None:
            continue
        m = layout.ITER_RE.match(parts[0])
        if m:
            i = int(m.group(1))
            sizes[i] = sizes.get(i, 0) + e.size
            files[i] = files.get(i, 0) + 1
        elif parts[0] == layout.DATA_CURSOR_DIR and (mc := CURSOR.match(parts[-1])):
            i = int(mc.group(1))
            sizes[i] = sizes.get(i, 0) + e.size
            files[i] = files.get(i, 0) + 1
        elif parts[0] == layout.MANIFESTS and (mm := layout.MANIFEST_RE.match(parts[-1])):
            manifests.add(int(mm.group(1)))
        elif parts[0] == layout.HF and len(parts) > 2 and (mh := layout.ITER_RE.match(parts[1])):
            hf[int(mh.group(1))] = hf.get(int(mh.group(1)), 0) + e.size
        elif parts[0] == layout.ROLLOUT_DATA:
            rollouts[0] += 1
            rollouts[1] += e.size
    return {"run_id": run_id, "repo_id": client.repo_id, "head": head,
            "pointer": {k: pointer.get(k) for k in ("iteration", "files_commit", "pushed_at", "host", "lease_epoch")}
            if pointer else None,
            "checkpoints": [{"iteration": i, "files": files.get(i, 0), "bytes": sizes.get(i, 0), "complete": i in manifests}
                            for i in sorted(set(sizes) | manifests, reverse=True)],
            "hf_exports": [{"iteration": i, "bytes": b} for i, b in sorted(hf.items(), reverse=True)],
            "rollout_data": {"files": rollouts[0], "bytes": rollouts[1]}}


def cmd_ls(ns: argparse.Namespace) -> int:
    from trainstack.hub.client import HubClient, describe_error

    try:
        run_id, repo_id, _ = _target(ns)
    except ConfigErrors as err:
        print("trainstack hub: " + "\n".join(e.render() for e in err.errors), file=sys.stderr)
        return 2
    try:
        data = listing(HubClient(repo_id), run_id)
    except Exception as ex:  # noqa: BLE001
        print(f"trainstack hub: cannot read {repo_id}: {describe_error(ex)}", file=sys.stderr)
        return EXIT_HUB
    if ns.json:
        print(json.dumps(data, indent=1))
        return 0
    p = data["pointer"]
    if data["head"] is None:
        print(f"{repo_id}: no such repo (nothing pushed yet)")
        return 0
    print(f"run {run_id} on {repo_id} (main @ {data['head'][:12]})")
    print(f"pointer  {iter_name(p['iteration'])}, files at {p['files_commit'][:12]}, pushed {p['pushed_at']} from "
          f"{p['host']}" if p else "pointer  none: no complete checkpoint of this run was pushed")
    for c in data["checkpoints"]:
        mark = " <- pointer" if p and c["iteration"] == p["iteration"] else ("" if c["complete"] else " (no manifest)")
        print(f"  {iter_name(c['iteration'])}  {c['files']:4d} files  {_human(c['bytes']):>9}{mark}")
    if data["hf_exports"]:
        print("hf       " + ", ".join(f"{iter_name(h['iteration'])} ({_human(h['bytes'])})" for h in data["hf_exports"]))
    r = data["rollout_data"]
    if r["files"]:
        print(f"rollouts {r['files']} files, {_human(r['bytes'])}")
    return 0


def cmd_pull(ns: argparse.Namespace) -> int:
    from trainstack.hub.client import HubClient, describe_error
    from trainstack.hub.restore import install

    try:
        run_id, repo_id, rundir = _target(ns)
        if ns.to is None and rundir is None:
            raise ConfigErrors([ConfigError("--to", f"run {run_id} has no run dir under {ns.runs_root}",
                                            "add --to DIR (a checkpoint directory to fill), or --runs-root")])
    except ConfigErrors as err:
        print("trainstack hub: " + "\n".join(e.render() for e in err.errors), file=sys.stderr)
        return 2
    client = HubClient(repo_id)
    try:
        pointer, head = client.read_pointer(run_id)
        record = pointer if ns.iter is None or (pointer and pointer["iteration"] == ns.iter) else \
            client.read_json(layout.manifest(run_id, ns.iter), head) if head else None
    except Exception as ex:  # noqa: BLE001
        print(f"trainstack hub: cannot read {repo_id}: {describe_error(ex)}", file=sys.stderr)
        return EXIT_HUB
    if record is None:
        what = f"{iter_name(ns.iter)} of run {run_id}" if ns.iter is not None else f"a checkpoint of run {run_id}"
        print(f"trainstack hub: {repo_id} has no pushed {what} (see `trainstack hub ls {run_id}`)", file=sys.stderr)
        return 2
    dest = Path(ns.to) if ns.to else rundir.checkpoints  # type: ignore[union-attr]  # (checked above)
    n = int(record["iteration"])
    lease = None
    if rundir is not None and ns.to is None:  # filling a run's own checkpoints: only while nobody runs it
        from trainstack.fencing.lease import Lease, LeaseHeld

        try:
            lease = Lease.acquire(rundir.lease_file, ttl_s=60)
        except LeaseHeld as held:
            print(f"trainstack hub: run {run_id} is running ({held.holder.describe()}); pull into another "
                  "directory with --to DIR", file=sys.stderr)
            return 3
    try:
        tracker = dest / TRACKER
        current = int(tracker.read_text()) if tracker.is_file() and tracker.read_text().strip().isdigit() else None
        newer = current is None or n > current
        count, size = install(client, run_id, record, dest, write_tracker=newer)
    except Exception as ex:  # noqa: BLE001
        print(f"trainstack hub: pulling {iter_name(n)} failed: {describe_error(ex)}", file=sys.stderr)
        return EXIT_HUB
    finally:
        if lease is not None:
            lease.release()
    print(f"pulled {iter_name(n)} of {run_id} from {repo_id} (files at {record['files_commit'][:12]}; {count} files, "
          f"{_human(size)}) into {dest}")
    own = rundir is not None and dest.resolve() == rundir.checkpoints.resolve()
    if not newer:
        print(f"tracker  left at {current} (newer than {n}); point --ckpt-step at {n} or move newer iter_* aside to "
              "use it")
    elif own:
        print(f"tracker  -> {n}: a relaunch of the run resumes from it")
    else:  # not the run's own checkpoints/: a relaunch never reads it
        print(f"tracker  -> {n}: {dest} is a complete checkpoint directory (slime's --load {dest} reads it); a "
              f"relaunch of {run_id} resumes from its own checkpoints/, not from here")
    return 0


def add_hub(sub: Any) -> None:
    from trainstack.cli.main import RUNS_ROOT_HELP
    from trainstack.config.userconfig import default_runs_root

    p = sub.add_parser("hub", help="what the Hugging Face Hub holds of a run (ls), fetch a checkpoint by hand (pull)",
                       description="Runs pushed with hub.repo_id=<user>/<repo> (docs/hub.md).")
    hub_sub = p.add_subparsers(dest="hub_command", required=True)
    for name, func, text in (("ls", cmd_ls, "list a run's checkpoints, HF exports and rollout data on the Hub"),
                             ("pull", cmd_pull, "download one pushed checkpoint (default: the pointer's), checked "
                                                "against the sizes recorded at push time")):
        q = hub_sub.add_parser(name, help=text, description=text)
        q.add_argument("run", help="a run id (under --runs-root) or a run directory")
        q.add_argument("--repo-id", help="the Hub repo (default: the run's hub.repo_id from its spec.json)")
        q.add_argument("--runs-root", default=default_runs_root(), help=RUNS_ROOT_HELP)
        if name == "ls":
            q.add_argument("--json", action="store_true", help="machine-readable output")
        else:
            q.add_argument("--iter", type=int, help="the iteration to pull (default: the one the pointer names)")
            q.add_argument("--to", help="a checkpoint directory to fill (default: the run's own checkpoints/)")
        q.set_defaults(func=func)
