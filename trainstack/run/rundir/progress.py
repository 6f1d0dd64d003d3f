"""What a run has done, from what it left behind, never from what the last launch asked for.

`status.json` records the last launch: a no-op relaunch of a finished run with a smaller
`num_rollout` rewrites its `num_rollout`, and `metrics.jsonl` repeats the rollouts redone after a
resume. So the numbers status and compare show come from the run's own traces: the latest complete
checkpoint (the tracker, checked), the rollouts trained (distinct rollout steps logged, the last
write of a step winning; else the checkpoint), and the target of the spec that last ran.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainstack.run.rundir import RunDir, read_json
from trainstack.storage import layout

REWARD = "rollout/raw_reward"


@dataclass
class Progress:
    last_checkpoint: int | None = None  # latest complete checkpoint (rollout id)
    rollouts: int | None = None  # rollouts trained: distinct rollout steps logged, else last_checkpoint + 1
    target: int | None = None  # num_rollout of the spec that last ran
    reward: float | None = None  # rollout/raw_reward at the last rollout step
    rewards: list[float] = field(default_factory=list)  # rollout/raw_reward per rollout step, deduplicated (of the
    # series given; without one, of the last steps in metrics.jsonl)

    @property
    def done(self) -> bool:
        return self.rollouts is not None and self.target is not None and self.rollouts >= self.target

    def rollouts_text(self) -> str:
        """`300` when the target is reached (or unknown), `120/300` while on the way."""
        if self.rollouts is None:
            return "-" if self.target is None else f"0/{self.target}"
        return f"{self.rollouts}/{self.target}" if self.target and self.target > self.rollouts else str(self.rollouts)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass
class ReportedProgress:
    """A run's progress as its Lium worker reports it (the worker -> commander -> `trainstack status`
    boundary: JSON in every lease renewal and report, kept in the commander's `runs.progress`, read back
    for a Lium run's status row). Made on the pod from Progress and status.json; read tolerantly."""

    state: str | None = None
    last_checkpoint: int | None = None
    rollouts: int | None = None
    num_rollout: int | None = None
    reward: float | None = None
    hub_commit: str | None = None  # the Hub commit holding the newest pushed checkpoint (hub/sync.py)
    hub_pushed: int | None = None
    metrics: dict[str, Any] | None = None  # status.json's last_metrics: what a wait=true sweep returns (any metric)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.hub_commit:  # no Hub: the keys are absent, as the commander has always seen them
            d.pop("hub_commit"), d.pop("hub_pushed")
        if self.metrics is None:
            d.pop("metrics")
        return d

    @classmethod
    def from_json(cls, data: Any) -> "ReportedProgress":
        d = data if isinstance(data, dict) else {}
        reward = d.get("reward")
        return cls(state=d["state"] if isinstance(d.get("state"), str) else None,
                   last_checkpoint=_int(d.get("last_checkpoint")), rollouts=_int(d.get("rollouts")),
                   num_rollout=_int(d.get("num_rollout")),
                   reward=float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None,
                   hub_commit=str(d["hub_commit"]) if d.get("hub_commit") else None,
                   hub_pushed=_int(d.get("hub_pushed")),
                   metrics=dict(d["metrics"]) if isinstance(d.get("metrics"), dict) else None)


def target_of(run_dir: Path, spec: Any = None, args: Any = None) -> int | None:
    """num_rollout of the spec that last ran (spec.json, else args.json; a spec a SLURM relaunch stored
    without training counts too: compare it with `rollouts`). `spec`, `args`: those files already read."""
    for name, data in ((layout.SPEC, spec), (layout.ARGS, args)):
        data = read_json(run_dir / name) if data is None else data
        if isinstance(data, dict):
            found = data.get("args") if name == layout.SPEC else data
            if isinstance(found, dict) and _int(found.get("num_rollout")) is not None:
                return _int(found["num_rollout"])
    return None


def progress(run_dir: str | Path, series: dict[str, list[tuple[float, float]]] | None = None) -> Progress:
    """A run's progress; `series`: metrics already read (compare's source), else the end of metrics.jsonl
    (the writer appends steps in order, so the latest rollout and its reward are there)."""
    return progress_of(Path(run_dir), read_json(RunDir(run_dir).spec_file), None, series)


def progress_of(run_dir: Path, spec: Any, args: Any, series: dict[str, list[tuple[float, float]]] | None) -> Progress:
    """`progress` from spec.json (and args.json) already read."""
    from trainstack.storage.checkpoints import inspect

    rd = RunDir(run_dir)
    save = None
    if isinstance(spec, dict) and isinstance(spec.get("args"), dict) and isinstance(spec["args"].get("save"), str):
        save = spec["args"]["save"]
    state = inspect(save or str(rd.checkpoints))
    if series is None:  # only the latest steps are needed: the end of metrics.jsonl (metrics/jsonl.py)
        from trainstack.metrics.jsonl import tail_series

        series = tail_series(rd.path, REWARD)
    rewards = [v for _, v in series.get(REWARD, [])]
    return Progress(last_checkpoint=state.latest_complete, rollouts=rollouts_of(series, state.latest_complete),
                    target=target_of(rd.path, spec, args), reward=rewards[-1] if rewards else None, rewards=rewards)


def rollouts_of(series: dict[str, list[tuple[float, float]]], last_checkpoint: int | None) -> int | None:
    """Rollouts trained: distinct rollout steps logged (max + 1), at least the latest complete checkpoint + 1."""
    from trainstack.metrics import step_key_for

    steps = {s for name, pts in series.items() if step_key_for(name) == "rollout/step" and not name.startswith("eval/")
             for s, _ in pts}
    rollouts = int(max(steps)) + 1 if steps else None
    if last_checkpoint is not None:
        rollouts = max(rollouts or 0, last_checkpoint + 1)
    return rollouts


def tail_checked(run_dir: Path, want: str) -> dict[str, list[tuple[float, float]]]:
    """The series of the end of metrics.jsonl (as `progress` reads it), that end checked as
    `require_readable_tails` checks it; the lines are read and parsed once for both."""
    from trainstack.errors import ConfigError, ConfigErrors
    from trainstack.metrics.jsonl import TAIL_BYTES, add, finish, records, tail, tail_series
    from trainstack.run.rundir import check

    path = run_dir / layout.METRICS
    lines, whole = tail(path, TAIL_BYTES)
    text = "\n".join(lines[:-1]) + "\n"
    why = check._jsonl_problem(text, check.SHAPE_BY_NAME[layout.METRICS]) if len(lines) > 1 else ""
    if why:
        why = re.sub(r"^line (\d+)", rf"line \1 of its last {len(lines) - 1}", why)
        raise ConfigErrors([ConfigError(str(path), f"{layout.METRICS} is corrupt: {why}",
                                        check.METRICS_FIX.format(path=path))])
    raw: dict[str, dict[float, float]] = {}
    for rec in records("\n".join(lines)):
        add(raw, rec)
    if want in raw or whole:
        return finish(raw)
    return tail_series(run_dir, want)  # the last reward is further back: a wider window


def require_readable_tails(run_dirs: list[Path] | list[str]) -> None:
    """What `progress` reads of metrics.jsonl (its end) checked as the run-dir check would check the
    whole file: a complete line that is not a metrics record is one message naming the file."""
    from trainstack.errors import ConfigError, ConfigErrors
    from trainstack.metrics.jsonl import TAIL_BYTES, tail
    from trainstack.run.rundir import check

    errors = []
    for d in run_dirs:
        path = Path(d) / layout.METRICS
        lines, _ = tail(path, TAIL_BYTES)
        why = check._jsonl_problem("\n".join(lines[:-1]) + "\n", check.SHAPE_BY_NAME[layout.METRICS]) \
            if len(lines) > 1 else ""
        if why:
            why = re.sub(r"^line (\d+)", rf"line \1 of its last {len(lines) - 1}", why)
            errors.append(ConfigError(str(path), f"{layout.METRICS} is corrupt: {why}",
                                      check.METRICS_FIX.format(path=path)))
    if errors:
        raise ConfigErrors(errors)
