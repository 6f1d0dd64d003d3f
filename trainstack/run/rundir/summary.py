"""Where a run stands, in one small file per run (summary.json): its status.json (state, last metrics,
Hub pushes), its progress (latest complete checkpoint, rollouts trained, target, last reward),
restarts, the overrides and scheduler record of its sweep.

`status` and `compare` over a thousand runs read this file, not the dozen files it is made from
(each parsed, some twice, for every run: 3.8 ms a run). It is made from those files (checked as
the run-dir check checks them, each parsed once) and records each one's size and modification
time; a reader stats them and uses the summary only while every one is unchanged, else it makes a
new one from the files for itself (a running run's metrics and checkpoints change under it). Only
the run's writers write it (the lifecycle, at each status change and event: `refresh`); a reader
never writes into a run directory. The lease is not in it: whether a "running" run runs is judged
when it is read (run/rundir/liveness.py).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from trainstack.run.rundir import atomic_write
from trainstack.storage import layout

VERSION = 1
# the files a summary is made from (the run-dir check's, but the lease, which the reader reads itself)
SOURCES = (layout.SPEC, layout.ARGS, layout.CONFIG, layout.OVERRIDES, layout.PROVENANCE, layout.CHOICES,
           layout.COMMAND, layout.STATUS, layout.SLURM, layout.EVENTS, layout.METRICS)
_MEMO: dict[str, tuple[dict, "Summary"]] = {}  # run dir -> (the stamps it was read with, the summary)


@dataclass
class Summary:
    run_id: str | None = None  # spec.json's, else slurm.json's
    launcher: str = "local"  # spec.json's `launcher`, else status.json's
    status: dict[str, Any] = field(default_factory=dict)  # status.json (state, last_metrics, hub, ...) as written
    target: int | None = None  # num_rollout of the spec that last ran
    last_checkpoint: int | None = None  # latest complete checkpoint (run/rundir/progress.py)
    rollouts: int | None = None
    reward: float | None = None  # rollout/raw_reward at the last rollout step
    restarts: int = 0
    resumed_from: list[int] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)  # overrides.yaml
    slurm: dict[str, Any] = field(default_factory=dict)  # slurm.json (job id, job name, logs, its sweep dir)
    save_dir: str | None = None  # where its checkpoints are (spec.json's --save)
    made_from: dict[str, Any] = field(default_factory=dict)  # file -> [mtime_ns, size, inode] (null: absent)

    @property
    def state(self) -> str | None:
        """status.json's word (a "running" one is judged by its lease when shown: run/rundir/liveness.py)."""
        state = self.status.get("state")
        return state if isinstance(state, str) else None

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, **asdict(self)}


def _stamp(path: Path) -> list[int] | None:
    """Modification time, size and inode: an atomic rewrite (a new inode) shows even within one tick."""
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def stamps(run_dir: Path, save_dir: str | None) -> dict[str, Any]:
    """Size and modification time of every file a summary is made from: the run dir's, and in the
    checkpoint dir the tracker, the dir itself (iterations added or moved aside) and its newest iteration."""
    out: dict[str, Any] = {name: _stamp(run_dir / name) for name in SOURCES}
    save = Path(save_dir) if save_dir else run_dir / layout.CHECKPOINTS
    out["save_dir"] = _stamp(save)
    out["tracker"] = _stamp(save / layout.TRACKER)
    tracker = _read_text(save / layout.TRACKER)
    if tracker is not None and tracker.isdigit():
        out["tracked_iter"] = _stamp(save / layout.iter_name(int(tracker)))
    return out


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def cached(run_dir: str | Path) -> Summary:
    """The summary this process read last for the run (`read` checked it against the files moments ago:
    status and compare read each run's once per command), else `read`."""
    memo = _MEMO.get(str(Path(run_dir)))
    return memo[1] if memo is not None else read(run_dir)


def read(run_dir: str | Path) -> Summary:
    """The run's summary: summary.json while the files it was made from are unchanged, else made from
    them now (ConfigErrors naming a corrupt one). Nothing is written."""
    return read_with(run_dir, ())[0]


def read_with(run_dir: str | Path, names: Sequence[str]) -> tuple[Summary, dict[str, Any]]:
    """The run's summary, and these files of the run read and checked (each parsed once in this
    command: a summary made now from the files hands over what it parsed)."""
    from trainstack.run.rundir import check

    run_dir = Path(run_dir)
    memo = _MEMO.get(str(run_dir))
    if memo is not None and memo[0] == stamps(run_dir, memo[1].save_dir):
        return memo[1], check.load(run_dir, names) if names else {}
    found = _stored(run_dir)
    files: dict[str, Any] = {}
    if found is None or found.made_from != stamps(run_dir, found.save_dir):
        found, files = _make(run_dir)
    _MEMO[str(run_dir)] = (found.made_from, found)
    missing = [n for n in names if n not in files]
    return found, {**{n: files[n] for n in names if n in files}, **(check.load(run_dir, missing) if missing else {})}


def _stored(run_dir: Path) -> Summary | None:
    try:
        data = json.loads((run_dir / layout.SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.pop("version", None) != VERSION:
        return None
    try:
        return Summary(**data)
    except TypeError:  # another version's fields
        return None


def refresh(run_dir: str | Path) -> None:
    """Write the run's summary.json from its files now (its writers call this after each change). Never
    fails the writer: a corrupt file, a full disk or a read-only dir leave the readers to make their own."""
    from trainstack.errors import ConfigErrors

    run_dir = Path(run_dir)
    try:
        made = make(run_dir)
        atomic_write(run_dir / layout.SUMMARY, json.dumps(made.to_json(), sort_keys=True, default=str) + "\n")
    except (ConfigErrors, OSError, ValueError, TypeError):
        return
    if made.state not in ("running", None):  # its metrics no longer move: compare reads their digest
        from trainstack.metrics import digest

        digest.write(run_dir)


def make(run_dir: str | Path) -> Summary:
    """The summary from the run's files, each read and checked once (ConfigErrors naming a corrupt one)."""
    return _make(run_dir)[0]


def _make(run_dir: str | Path) -> tuple[Summary, dict[str, Any]]:
    from trainstack.errors import ConfigErrors
    from trainstack.run.rundir import check
    from trainstack.run.rundir.progress import REWARD, progress_of, tail_checked

    run_dir = Path(run_dir)
    files = check.load(run_dir, [n for n in SOURCES if n != layout.METRICS])
    spec, status, slurm = (files[n] if isinstance(files[n], dict) else {}
                           for n in (layout.SPEC, layout.STATUS, layout.SLURM))
    args = spec.get("args") if isinstance(spec.get("args"), dict) else None
    save = args.get("save") if args and isinstance(args.get("save"), str) else None
    made_from = stamps(run_dir, save)  # taken before the reads: a change meanwhile makes the next reader redo it
    tracker_problem = check.file_problem(run_dir, f"{layout.CHECKPOINTS}/{layout.TRACKER}")
    if tracker_problem is not None:
        raise ConfigErrors([tracker_problem])
    series = tail_checked(run_dir, REWARD)
    done = progress_of(run_dir, spec, files[layout.ARGS], series)
    events = [e for e in _jsonl(files[layout.EVENTS]) if isinstance(e, dict)]
    launcher = spec.get("launcher") if isinstance(spec.get("launcher"), str) else status.get("launcher")
    made = Summary(
        run_id=str(spec.get("run_id") or slurm.get("run_id") or "") or None,
        launcher=launcher if isinstance(launcher, str) else "local", status=status,
        target=done.target, last_checkpoint=done.last_checkpoint, rollouts=done.rollouts, reward=done.reward,
        restarts=max(sum(1 for e in events if e.get("event") in ("launch", "resume")) - 1, 0),
        resumed_from=[int(e["from_rollout"]) for e in events
                      if e.get("event") == "resume" and isinstance(e.get("from_rollout"), int)],
        overrides=[str(o) for o in files[layout.OVERRIDES] or []],
        slurm={k: slurm[k] for k in ("run_id", "job_id", "job_name", "logs", "sweep_dir") if k in slurm},
        save_dir=save, made_from=made_from)
    return made, files


def _jsonl(text: str | None) -> list[Any]:
    out = []
    for line in (text or "").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def forget(run_dirs: Sequence[str | Path] | None = None) -> None:
    """Drop what this process has read: of these runs (their files were just brought back from where they ran:
    `Launcher.fetch_traces`), else of every run (tests that rewrite a run's files within one mtime tick)."""
    if run_dirs is None:
        _MEMO.clear()
        return
    for d in run_dirs:
        _MEMO.pop(str(Path(d)), None)
