"""A local sweep as a whole: every point validated before the first one runs, points that would
share a run_id refused, and one summary (point, run id, status, exit, final reward) at the end
with a non-zero exit when any point failed."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from trainstack.errors import ConfigError, ConfigErrors

if TYPE_CHECKING:
    from trainstack.run.result import RunResult


def finished_earlier(events: Sequence[dict]) -> int | None:
    """The rollouts a run had when a launch found it finished and trained nothing (its new events: a
    `finished` record, no launch or resume); None when the launch trained."""
    if any(e.get("event") in ("launch", "resume") for e in events):
        return None
    done = [e.get("latest_checkpoint") for e in events if e.get("event") == "finished"]
    return done[-1] + 1 if done and isinstance(done[-1], int) else None


TRAINSTACK_KEYS = ("cluster", "args", "paths", "resume")  # root sections every trainstack config has


def is_trainstack_config(config: Any) -> bool:
    """Is this sweep's config trainstack's (conf/config.yaml, or a --config-dir over it), or another Hydra app's
    that selected a trainstack launcher? The in-process launcher runs any app's task function."""
    try:
        return all(k in config for k in TRAINSTACK_KEYS)
    except Exception:  # noqa: BLE001 - not a mapping: not ours
        return False


def not_trainstack_problem(launcher: str) -> ConfigError:
    """`hydra/launcher=<trainstack launcher>` in an app whose config is not trainstack's."""
    return ConfigError("hydra/launcher", f"the '{launcher}' launcher submits trainstack runs (a stored run spec "
                       "executed where its cluster says), not a Hydra task function, and this app's config is not a "
                       f"trainstack config (it has no {', '.join(TRAINSTACK_KEYS)})",
                       "use hydra/launcher=basic or hydra/launcher=trainstack_local for this app (they call its task "
                       "function in this process), or sweep trainstack runs with `python run.py -m ...`", value=launcher)


def plugin_problem(launcher_name: str) -> ConfigError | None:
    """A sweep of runs whose launcher submits through the shared sweep plugin (`hydra/launcher=<name>`:
    every point checked, then all submitted at once, one manifest) under the in-process launcher."""
    from trainstack.registry import launcher_class

    try:
        cls = launcher_class(launcher_name)
    except ConfigErrors:
        return None  # an unknown launcher: the point's own check names it
    if not cls.sweeps_through_plugin:
        return None
    return ConfigError("cluster.launcher", f"a sweep of '{launcher_name}' runs must be submitted by the "
                       f"'{launcher_name}' Hydra launcher, not the in-process one (which would submit each point on "
                       "its own, without checking every point first)",
                       f"add hydra/launcher={launcher_name} to the command line", value=launcher_name)


@dataclass
class DryPoint:
    """What a dry point's check leaves until every point is checked: its line (and, with `output=`, its
    command JSON), not the point, so a dry sweep's memory stays flat in its number of points."""

    line: str
    output: str | None = None
    output_json: str | None = None
    num: int = 0  # the point's job number, run id and overrides: its answer to the sweeper (a CHECKED result)
    run_id: str = ""
    run_dir: str = ""
    overrides: tuple[str, ...] = ()

    def emit(self) -> None:
        from trainstack.reports import display

        display.print_folded_line(self.line)
        if self.output is not None and self.output_json is not None:
            from trainstack.terminal.output_files import write_text

            write_text(self.output, self.output_json)


class PointChecker:
    """Every point built and preflighted as it is composed (before the first one runs or prints); points
    that would share a run_id refused; errors name the point. A point on a launcher that needs its own
    sweep plugin stops the check at once (ConfigErrors with that one message)."""

    def __init__(self) -> None:
        self.failed = PointErrors()
        self.built: list[tuple[str, list[str]]] = []

    def check(self, cfg: Any) -> "DryPoint | Any | None":
        """A dry point's DryPoint; a launch point's config (its task builds it again when it runs); None
        when the point failed (in `errors()`)."""
        from trainstack.config.resolve import Origin
        from trainstack.config.sweep_cache import set_hydra_config
        from trainstack.preflight.checks import preflight
        from trainstack.render.pipeline import build
        from trainstack.reports import display

        set_hydra_config(cfg)  # `${hydra:job.num}` in a point's values resolves against this point
        origin = Origin.from_hydra(cfg.hydra)
        num = int(cfg.hydra.job.num)
        self.failed.point()
        dry = bool(cfg.get("dry_run"))
        output = str(cfg.output) if dry and cfg.get("output") else None
        try:
            run, cmd = build(cfg, origin)
            problem = plugin_problem(run.cluster.launcher)
            if problem:
                raise _Stop(problem)
            if output is not None:
                from trainstack.terminal.output_files import output_problem

                bad = output_problem(output, "output")
                if bad:
                    raise ConfigErrors([bad])
            preflight(run, cmd, launching=False)
        except _Stop:
            raise
        except ConfigErrors as err:
            self.failed.add(num, list(origin.overrides), err.errors)
            return None
        self.built.append((run.run_id, list(origin.overrides)))
        if not dry:
            return cfg
        shown = tuple(str(o) for o in origin.overrides)
        if output is None:
            return DryPoint(display.sweep_line(run, cmd), num=num, run_id=run.run_id, run_dir=run.run_dir,
                            overrides=shown)
        return DryPoint(display.sweep_line(run, cmd), f"{output}.{num}", display.command_json(cmd, run), num=num,
                        run_id=run.run_id, run_dir=run.run_dir, overrides=shown)

    def errors(self) -> list[ConfigError]:
        return self.failed.errors() + shared_run_id_errors(self.built)


class _Stop(ConfigErrors):
    """One problem that ends the check (it would repeat for every point)."""

    def __init__(self, problem: ConfigError) -> None:
        super().__init__([problem])


def point_errors(num: int, overrides: list[str], errors: list[ConfigError]) -> list[ConfigError]:
    """A point's errors, each naming the point (its number and overrides)."""
    from trainstack.secrets import redact_override

    label = " ".join(redact_override(o.lstrip("+")) for o in overrides) or "(no overrides)"
    return [ConfigError(f"point {num} [{label}]: {e.key}", e.problem, e.fix, value=e.value, source=e.source,
                        related=e.related) for e in errors]


class PointErrors:
    """Every point's errors, reported once each: an error every point shares (a launcher setting the sweep
    does not vary) is one message for the sweep, not one per point (256 copies for a 256-point sweep)."""

    def __init__(self) -> None:
        self.points = 0
        self._seen: dict[tuple, tuple[ConfigError, list[tuple[int, list[str]]]]] = {}

    def point(self) -> None:
        """Count a point (with or without errors)."""
        self.points += 1

    def add(self, num: int, overrides: list[str], errors: list[ConfigError]) -> None:
        for e in errors:
            key = (e.key, e.problem, e.fix, repr(e.value))
            self._seen.setdefault(key, (e, []))[1].append((num, overrides))

    def errors(self) -> list[ConfigError]:
        out: list[ConfigError] = []
        for e, where in self._seen.values():
            if len(where) == 1 or len(where) < self.points:
                for num, overrides in where:
                    out += point_errors(num, overrides, [e])
            else:
                out.append(ConfigError(f"every point ({len(where)}): {e.key}", e.problem, e.fix, value=e.value,
                                       source=e.source, related=e.related))
        return out


def shared_run_id_errors(points: Sequence[tuple[str, list[str]]], what: str = "run") -> list[ConfigError]:
    """Points that would be one run (same run_id: same run dir, same SLURM job name) resume each
    other; refuse them naming the swept keys that do not change what is trained."""
    from trainstack.secrets import redact_override

    by_run_id: dict[str, list[list[str]]] = {}
    for run_id, overrides in points:
        by_run_id.setdefault(run_id, []).append(overrides)
    errors = []
    for run_id, same in by_run_id.items():
        if len(same) > 1:
            varying = sorted(k for k in _keys(same) if len({_value(p, k) for p in same}) > 1)
            errors.append(ConfigError(
                "sweep", f"{len(same)} points would be the same {what} {run_id} (they would resume each other): "
                f"the swept {', '.join(varying) or 'keys'} leave{'s' if len(varying) == 1 else ''} what is trained "
                "unchanged, so the run id is the same for each value", "sweep a key that changes training, or give each point its own run_id "
                "(e.g. run_id='my-sweep-${hydra:job.num}')", value=run_id,
                related={"points": [" ".join(redact_override(o.lstrip("+")) for o in p) for p in same]}))
    return errors


def _keys(points: list[list[str]]) -> set[str]:
    return {o.split("=", 1)[0].lstrip("+") for p in points for o in p}


def _value(point: list[str], key: str) -> str:
    return next((o.split("=", 1)[1] for o in point if o.split("=", 1)[0].lstrip("+") == key and "=" in o), "")


def print_summary(results: Sequence["RunResult"], file=None) -> None:
    """One line per point, folded to the terminal's width. A point that trained nothing says so
    (`finished earlier at N`) and shows no value: the run's last reward is not this sweep's result."""
    from trainstack.run.result import DEFAULT_METRIC, FAILED, FINISHED, UNCHANGED
    from trainstack.terminal.tables import fold, output_width

    out = file or sys.stderr
    width = output_width(out)
    objective = results[0].objective if results else DEFAULT_METRIC
    column = "reward" if objective == DEFAULT_METRIC else "value"
    print("\nsweep summary" + ("" if column == "reward" else f" (value: {objective})"), file=out)
    print(f"{'point':>5}  {'status':8}  {'exit':>4}  {column:>7}  run id / overrides", file=out)
    for r in results:
        value = None if r.state == UNCHANGED else r.value
        status = {FAILED: "failed", FINISHED: "ok", UNCHANGED: "nothing"}.get(r.state, r.state)
        note = f"(finished earlier at {r.earlier}: nothing trained) " if r.state == UNCHANGED else ""
        code = "-" if r.code is None else r.code
        text = (f"{r.num:>5}  {status:8}  {code:>4}  {'-' if value is None else f'{value:.3f}':>7}  {r.run_id}  "
                f"{note}{' '.join(o.lstrip('+') for o in r.overrides)}")
        print("\n".join(fold(text, width, "", " " * 33)), file=out)
    failed = sum(r.state == FAILED for r in results)
    idle = sum(r.state == UNCHANGED for r in results)
    trained_nothing = f" ({idle} finished earlier: nothing trained)" if idle else ""
    others = len(results) - failed - idle - sum(r.state == FINISHED for r in results)
    pending = f", {others} {results[0].state if others == len(results) else 'not waited for'}" if others else ""
    print(f"{len(results)} points: {len(results) - failed - others} ok{trained_nothing}, {failed} failed{pending}",
          file=out, flush=True)


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
            cwd = Path.cwd().resolve()
            for parent in p.resolve().parents:  # multirun/ itself, made for this sweep: empty now
                if parent == cwd or cwd not in parent.parents or any(parent.iterdir()):
                    break
                parent.rmdir()
    except OSError:
        pass
