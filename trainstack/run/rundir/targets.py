"""One way to turn what a user names (a sweep dir, a run dir, a run id, a group) into runs.

Used by status, cancel, compare, diff and exec, so every command accepts the same targets and
answers a bad one the same way (did-you-mean over the run ids under the runs root).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.run.rundir import manifest
from trainstack.storage import layout


@dataclass
class RunRef:
    """A run found from a target; sweep facts (overrides, job id, logs) when it came from a manifest."""

    run_dir: Path
    run_id: str
    overrides: list[str] | None = None
    job_id: str | None = None
    logs: dict[str, str] = field(default_factory=dict)


def run_ids(runs_root: str | Path) -> list[str]:
    root = Path(runs_root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if layout.is_run_dir(p))


def bad_target(target: str, runs_root: str | Path) -> ConfigError:
    ids = run_ids(runs_root)
    near = difflib.get_close_matches(target, ids, n=3, cutoff=0.5)
    fix = f"did you mean {', '.join(near)}?" if near else f"run ids under {runs_root}: {', '.join(ids[:8]) or '(none)'}"
    return ConfigError(target, f"not a sweep directory (with {layout.SWEEP_MANIFEST}), a run directory or a run id under "
                               f"{runs_root}", fix)


def find_run(target: str, runs_root: str | Path) -> Path | None:
    """A run dir given as a path or as a run id under the runs root."""
    p = Path(target).expanduser()
    if layout.is_run_dir(p):
        return p
    if "/" not in target and layout.is_run_dir(Path(runs_root) / target):
        return Path(runs_root) / target
    return None


def expand(targets: Sequence[str], runs_root: str | Path = "runs") -> list[RunRef]:
    """Runs of each target, in the order given, each once; ConfigErrors naming every bad target."""
    refs: list[RunRef] = []
    errors: list[ConfigError] = []
    from trainstack.run.rundir.check import sweep_problem

    for t in targets:
        broken = sweep_problem(t) if layout.is_sweep_dir(t) else None
        if broken is not None:
            errors.append(broken)
            continue
        sweep = manifest.read(t) if layout.is_sweep_dir(t) else None
        if sweep is not None:
            for r in sweep.runs:
                rd = Path(r.run_dir)
                if not rd.is_dir() and (Path(runs_root) / r.run_id).is_dir():
                    rd = Path(runs_root) / r.run_id
                refs.append(RunRef(rd, r.run_id, list(r.overrides), r.job_id, dict(r.logs)))
            continue
        found = find_run(t, runs_root)
        if found is None:
            errors.append(bad_target(t, runs_root))
        else:
            refs.append(RunRef(found, found.name if found.parent == Path(runs_root) else _run_id_of(found)))
    if errors:
        raise ConfigErrors(errors)
    seen: set[Path] = set()
    out = []
    for ref in refs:
        key = ref.run_dir.resolve()
        if key not in seen:
            seen.add(key)
            out.append(ref)
    return out


def _run_id_of(run_dir: Path) -> str:
    from trainstack.run.rundir import RunDir

    rd = RunDir(run_dir)
    spec, slurm = rd.read(layout.SPEC), rd.read(layout.SLURM)
    spec, slurm = (x if isinstance(x, dict) else {} for x in (spec, slurm))  # a JSON list: check.py names it
    return str(spec.get("run_id") or slurm.get("run_id") or run_dir.name)
