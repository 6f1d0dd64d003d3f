"""A local sweep as a whole: every point validated before the first one runs, points that would
share a run_id refused, and one summary (point, run id, status, exit, final reward) at the end
with a non-zero exit when any point failed."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from trainstack.errors import ConfigError, ConfigErrors


@dataclass
class PointResult:
    """What the task function reports for one launched point."""

    num: int
    run_id: str
    run_dir: str
    code: int
    overrides: list[str]


def check_points(configs: Sequence[Any]) -> list[ConfigError]:
    """Build and preflight every point; refuse points that share a run_id. Errors name the point."""
    from trainstack.launch.registry import sweep_launcher_problem
    from trainstack.pipeline import build
    from trainstack.preflight import preflight
    from trainstack.resolve import Origin

    errors: list[ConfigError] = []
    by_run_id: dict[str, list[list[str]]] = {}
    for num, cfg in enumerate(configs):
        origin = Origin.from_hydra(cfg.hydra)
        label = " ".join(o.lstrip("+") for o in origin.overrides) or "(no overrides)"
        try:
            run, cmd = build(cfg, origin)
            problem = sweep_launcher_problem(run.cluster.launcher, str(cfg.hydra.launcher.get("_target_", "")))
            if problem:
                raise ConfigErrors([problem])
            if not cfg.get("dry_run"):
                preflight(run, cmd, launching=False)
        except ConfigErrors as err:
            errors += [ConfigError(f"point {num} [{label}]: {e.key}", e.problem, e.fix, value=e.value,
                                   source=e.source, related=e.related) for e in err.errors]
            continue
        by_run_id.setdefault(run.run_id, []).append(list(origin.overrides))
    for run_id, points in by_run_id.items():
        if len(points) > 1:
            varying = sorted(k for k in _keys(points) if len({_value(p, k) for p in points}) > 1)
            errors.append(ConfigError(
                "sweep", f"{len(points)} points would be the same run {run_id} (they would resume each other): "
                f"{', '.join(varying) or 'the swept keys'} do not change what is trained",
                "sweep a key that changes training, or give each point its own run_id "
                "(e.g. run_id='my-sweep-${hydra:job.num}')", value=run_id))
    return errors


def _keys(points: list[list[str]]) -> set[str]:
    return {o.split("=", 1)[0].lstrip("+") for p in points for o in p}


def _value(point: list[str], key: str) -> str:
    return next((o.split("=", 1)[1] for o in point if o.split("=", 1)[0].lstrip("+") == key and "=" in o), "")


def final_reward(run_dir: str) -> float | None:
    from trainstack.rundir import RunDir

    _, rewards = RunDir(run_dir).last_metrics()
    return rewards[-1] if rewards else None


def print_summary(results: Sequence[PointResult], file=None) -> None:
    out = file or sys.stderr
    print("\nsweep summary", file=out)
    print(f"{'point':>5}  {'status':8}  {'exit':>4}  {'reward':>7}  run id / overrides", file=out)
    for r in results:
        reward = final_reward(r.run_dir)
        status = "ok" if r.code == 0 else "failed"
        print(f"{r.num:>5}  {status:8}  {r.code:>4}  {'-' if reward is None else f'{reward:.3f}':>7}  {r.run_id}  "
              f"{' '.join(o.lstrip('+') for o in r.overrides)}", file=out)
    failed = sum(r.code != 0 for r in results)
    print(f"{len(results)} points: {len(results) - failed} ok, {failed} failed", file=out, flush=True)


def remove_empty_dirs(sweep_dir: str, job_dirs: Sequence[str]) -> None:
    """A dry-run sweep writes nothing: drop the per-point folders Hydra created, if still empty."""
    for d in [*job_dirs, sweep_dir]:
        p = Path(d)
        try:
            if p.is_dir() and not any(p.iterdir()):
                p.rmdir()
        except OSError:
            pass


def remove_fresh_sweep_dir(sweep_dir: str) -> None:
    """A refused sweep leaves nothing: Hydra's multirun.yaml is all a fresh sweep dir holds then."""
    p = Path(sweep_dir)
    try:
        if p.is_dir() and {c.name for c in p.iterdir()} <= {"multirun.yaml"}:
            (p / "multirun.yaml").unlink(missing_ok=True)
            p.rmdir()
    except OSError:
        pass
