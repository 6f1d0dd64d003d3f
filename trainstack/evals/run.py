"""Checking, storing and starting eval runs (the CLI and the background evaluator share this)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from trainstack.errors import ConfigErrors


def check(spec: Any) -> None:
    """The backend's own checks of the eval run's argv (the preflight hooks: the tiny trainer parses and
    validates it), before anything is written; ConfigErrors when it would be refused."""
    from trainstack import hooks

    root = os.path.realpath(spec.data_root)
    config = spec.config or {}
    meta = {ns: dict((config.get(ns) or {}).get("meta") or {}) for ns in ("model", "algo", "env", "args")}
    run = SimpleNamespace(cluster=spec.cluster, entrypoint="train.py", args=spec.args, run_id=spec.run_id,
                          meta=meta, source=lambda dest: spec.arg_sources.get(dest, ""))
    made = lambda p: bool(spec.data_prepare) and os.path.realpath(p).startswith(root + os.sep)  # noqa: E731
    errors = [e for check_run in hooks.get(hooks.PREFLIGHT) for e in check_run(run, spec.slime_command(), made)]
    if errors:
        raise ConfigErrors(errors)


def store(spec: Any) -> None:
    from trainstack.run.rundir import RunDir

    Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
    RunDir(spec.run_dir).write_spec(spec)


def done(spec: Any) -> bool:
    """This eval run already finished and its result is attached to the source run (nothing to redo)."""
    from trainstack.evals.plan import EvalOf
    from trainstack.evals.results import attached
    from trainstack.run.rundir import RunDir

    of = EvalOf.of(spec)
    if of is None or RunDir(spec.run_dir).status().get("state") != "finished":
        return False
    return any(r.get("eval_run") == spec.run_id and r.get("step") == of.iteration for r in attached(of.run_dir))


def start_detached(spec: Any, log: Path) -> subprocess.Popen:
    """`trainstack exec <eval run dir>` as a process of its own (its own session: a signal to the training
    launcher's group does not stop it); its console goes to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "trainstack", "exec", spec.run_dir, "--quiet"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                cwd=spec.provenance.cwd if os.path.isdir(spec.provenance.cwd) else None)
