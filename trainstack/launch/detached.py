"""A run started in the background on this host: `trainstack exec RUN_DIR` in its own session.

What a launcher that follows its run to the end (ray_job) does with `wait=false`: the resume check,
the spec stored in the run dir, then `python -m trainstack exec RUN_DIR` detached from this process
(its own session: Ctrl-C here does not reach it), its output in `logs/exec.log`. The command returns at
once; `trainstack status | logs | cancel RUN` follow the run (cancel: SIGTERM to the exec process, the
lease holder, which gives the trainer its grace period for a final checkpoint).
"""
from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainstack.run.spec import RunSpec

def start_detached(spec: "RunSpec", launcher: str) -> int:
    from trainstack.config.userconfig import run_target
    from trainstack.run.resume import plan
    from trainstack.run.rundir import RunDir
    from trainstack.storage import layout

    rundir = RunDir(spec.run_dir)
    plan(spec, rundir)  # raises ConfigErrors (changed training config, resume policy, broken checkpoint)
    rundir.write_spec(spec)
    rundir.logs.mkdir(parents=True, exist_ok=True)
    with open(rundir.logs / layout.EXEC_LOG, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "trainstack", "exec", spec.run_dir, "--quiet"],
                                cwd=spec.provenance.cwd or None, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    if rundir.status().get("state") in (None, "created", "finished", "failed", "interrupted"):
        rundir.update_status(run_id=spec.run_id, state="submitted", launcher=launcher)
    target = run_target(spec.run_id, spec.run_dir)
    print(f"trainstack: started {spec.run_id} in the background ({launcher}, pid {proc.pid}; wait=false); its output: "
          f"{rundir.logs / layout.EXEC_LOG}\n  follow it: trainstack status {target}    stop it: trainstack cancel {target}",
          file=sys.stderr, flush=True)
    return 0
