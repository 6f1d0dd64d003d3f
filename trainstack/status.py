"""`trainstack status` and `trainstack cancel`: where a sweep's (or some runs') jobs stand.

Targets: a sweep directory (its `sweep.json` manifest), run directories, or run ids (looked up
under --runs-root). Per run: run_id, the overrides that vary across the rows, the scheduler's
state (squeue, then sacct when accounting is on, then `scontrol show job`; without SLURM the
run's status.json), the run's own state, last checkpoint, last reward and where the logs are.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from trainstack.errors import ConfigErrors
from trainstack.rundir import RunDir, layout
from trainstack.rundir.targets import RunRef, expand

REWARD = "rollout/raw_reward"


@dataclass
class Row:
    run_id: str
    run_dir: str
    overrides: list[str] = field(default_factory=list)
    job_id: str | None = None
    job_name: str | None = None
    scheduler: str | None = None  # PENDING/RUNNING/COMPLETED/... or None without SLURM info
    reason: str | None = None
    state: str | None = None  # status.json state
    last_checkpoint: int | None = None
    num_rollout: int | None = None
    reward: float | None = None
    restarts: int = 0
    resumed_from: list[int] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    varying: list[str] = field(default_factory=list)
    # Lium runs (from the commander): the pod, the lease epoch, the last Hub commit, the cost so far
    pod: str | None = None
    epoch: int | None = None
    hub_commit: str | None = None
    cost_usd: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _run_row(ref: RunRef) -> Row:
    rd = RunDir(ref.run_dir)
    slurm = rd.read(layout.SLURM, {}) or {}
    overrides = ref.overrides if ref.overrides is not None else (rd.read(layout.OVERRIDES) or [])
    return Row(run_id=ref.run_id or slurm.get("run_id") or ref.run_dir.name, run_dir=str(ref.run_dir),
               overrides=[str(o).lstrip("+") for o in overrides],
               job_id=str(ref.job_id or slurm.get("job_id") or "") or None,
               job_name=slurm.get("job_name"), logs=dict(ref.logs or slurm.get("logs") or {}))


def collect(targets: Sequence[str], runs_root: str = "runs") -> list[Row]:
    """Rows for sweep dirs, run dirs and run ids (in the order given); ConfigErrors for bad targets."""
    return [_run_row(ref) for ref in expand(targets, runs_root)]


# ------------------------------------------------------------------------------------------
# scheduler state
# ------------------------------------------------------------------------------------------
def _run(argv: list[str], timeout: float = 20) -> subprocess.CompletedProcess | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None


def scheduler_states(job_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """job id -> (state, reason) from squeue, then sacct, then `scontrol show job`."""
    wanted = {j for j in job_ids if j}
    out: dict[str, tuple[str, str]] = {}
    if not wanted:
        return out
    q = _run(["squeue", "-h", "-r", "-o", "%i|%T|%r"])
    if q is not None and q.returncode == 0:
        for line in q.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3 and parts[0] in wanted:
                out[parts[0]] = (parts[1], parts[2] if parts[2] not in ("None", "(null)") else "")
    rest = sorted(wanted - set(out))
    if rest:
        s = _run(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(rest)])
        if s is not None and s.returncode == 0:
            for line in s.stdout.splitlines():
                jid, _, state = line.partition("|")
                if jid in rest and state:
                    out[jid] = (state.split()[0], "")
    for jid in sorted(wanted - set(out)):
        s = _run(["scontrol", "show", "job", "-o", jid])
        if s is None or s.returncode != 0:
            continue
        fields = dict(tok.split("=", 1) for tok in s.stdout.split() if "=" in tok)
        if "JobState" in fields:
            reason = fields.get("Reason", "")
            out[jid] = (fields["JobState"], "" if reason == "None" else reason)
    return out


def fill(rows: list[Row]) -> list[Row]:
    """Scheduler state, run state, checkpoint, reward, restarts; and the overrides that vary."""
    states = scheduler_states(r.job_id for r in rows if r.job_id)
    for r in rows:
        rd = RunDir(r.run_dir)
        st = rd.status()
        r.state = st.get("state")
        r.last_checkpoint = st.get("last_checkpoint")
        r.num_rollout = st.get("num_rollout")
        latest = st.get("last_metrics") or {}
        if REWARD not in latest:
            latest = rd.last_metrics()[0]
        r.reward = latest.get(REWARD)
        if r.state == "running" or r.last_checkpoint is None:
            from trainstack.checkpoints import inspect

            ck = inspect(str(rd.checkpoints))
            if ck.latest_complete is not None:
                r.last_checkpoint = ck.latest_complete
        events = rd.events()
        r.resumed_from = [int(e["from_rollout"]) for e in events if e.get("event") == "resume" and e.get("from_rollout") is not None]
        r.restarts = sum(1 for e in events if e.get("event") in ("launch", "resume")) - 1 if events else 0
        if r.job_id and r.job_id in states:
            r.scheduler, r.reason = states[r.job_id]
        r.logs = {**r.logs, "trainer": str(rd.trainer_log)}
    from trainstack.launch.lium_status import fill_lium

    fill_lium(rows)
    by_key: dict[str, set] = {}
    for r in rows:
        for o in r.overrides:
            k, _, v = o.partition("=")
            by_key.setdefault(k, set()).add(v)
    common = set.intersection(*({o.partition("=")[0] for o in r.overrides} for r in rows)) if rows else set()
    for r in rows:
        r.varying = list(r.overrides) if len(rows) == 1 else [
            o for o in r.overrides
            if len(by_key[o.partition("=")[0]]) > 1 or o.partition("=")[0] not in common]
    return rows


def render(rows: list[Row], title: str | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for col in ("run_id", "varying overrides", "job", "scheduler", "run", "ckpt", "reward", "logs"):
        table.add_column(col, overflow="fold")
    for r in rows:
        sched = (r.scheduler or "-") + (f" ({r.reason})" if r.reason else "")
        if r.pod is not None or r.epoch:
            sched += f"\npod {(r.pod or '-')[:8]} e{r.epoch} x{r.restarts} ${r.cost_usd or 0:.4f}"
            if r.hub_commit:
                sched += f"\nhub {r.hub_commit[:10]}"
        run_state = (r.state or "-") + (f", resumed x{len(r.resumed_from)}" if r.resumed_from else "")
        ckpt = "-" if r.last_checkpoint is None else (
            f"{r.last_checkpoint}" + (f"/{r.num_rollout}" if r.num_rollout else ""))
        reward = "-" if r.reward is None else f"{r.reward:.3f}"
        logs = "\n".join(v for k, v in r.logs.items() if k in ("stdout", "trainer"))
        table.add_row(r.run_id, " ".join(r.varying) or "-", r.job_id or "-", sched, run_state, ckpt, reward, logs)
    Console(width=200).print(table)


def run_status(targets: Sequence[str], runs_root: str = "runs", as_json: bool = False) -> int:
    try:
        rows = fill(collect(targets or ["."], runs_root))
    except ConfigErrors as ex:
        print("trainstack status: " + "\n".join(e.render() for e in ex.errors), file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps([r.to_json() for r in rows], indent=1, default=str))
    else:
        render(rows, title=", ".join(targets) if targets else None)
    return 0


def run_cancel(targets: Sequence[str], runs_root: str = "runs", dry: bool = False) -> int:
    """scancel by the job ids recorded in the manifest / run dirs; by job name (= run_id) otherwise."""
    try:
        rows = collect(targets, runs_root)
    except ConfigErrors as ex:
        print("trainstack cancel: " + "\n".join(e.render() for e in ex.errors), file=sys.stderr)
        return 2
    from trainstack.launch.lium_status import cancel_lium, is_lium

    lium_rows = [r for r in rows if is_lium(r.run_dir)]
    code = cancel_lium(lium_rows, dry) if lium_rows else 0
    rows = [r for r in rows if not is_lium(r.run_dir)]
    if lium_rows and not rows:
        return code
    ids = sorted({r.job_id for r in rows if r.job_id})
    names = sorted({r.run_id for r in rows if not r.job_id})
    argvs = ([["scancel", *ids]] if ids else []) + [["scancel", f"--name={n}"] for n in names]
    if shutil.which("scancel") is None and not dry:
        print("trainstack cancel: scancel not found (not a SLURM host)", file=sys.stderr)
        return 2
    if not argvs:
        print("trainstack cancel: no SLURM job recorded for " + " ".join(targets), file=sys.stderr)
        return 1
    for argv in argvs:
        print(" ".join(argv), file=sys.stderr)
        if not dry:
            res = subprocess.run(argv, capture_output=True, text=True)
            if res.returncode != 0:
                print(res.stderr.strip(), file=sys.stderr)
                code = 1
    return code
