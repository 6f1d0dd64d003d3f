"""What a sweep point returns to Hydra's sweeper: the run's result, typed.

Every trainstack Hydra launcher (`trainstack_local`, and `hydra/launcher=<launcher>`) answers each
point with a `JobReturn` whose `return_value` is a `RunResult`: the run's id and directory, the
state it ended in, and the value of the sweep's objective, a metric the run logs (the last value,
or its best). `float(result)` is that value, so Optuna (and any sweeper that reads a number)
optimises it unchanged. A failed run is a FAILED `JobReturn` whose exception, `RunFailed`, names
the run, its exit code and its log: Hydra's sweepers then stop with exit 1, one message, no traceback.

The objective: `hydra.sweeper.objective=METRIC[:TAKE]` on the command line (any sweeper), or the
config key `objective` (an experiment file); default `rollout/raw_reward` (last). TAKE: `last`,
`max`, `min`, or `best` (`min` when `hydra.sweeper.direction` is `minimize`, else `max`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.errors import CompactHydraException

from trainstack.config.objective import DEFAULT_METRIC as DEFAULT_METRIC
from trainstack.config.objective import TAKES as TAKES
from trainstack.config.objective import Objective
from trainstack.errors import ConfigError

ALIAS = "hydra.sweeper.objective"  # the command-line spelling, for any sweeper (rewritten to `objective`)

# RunResult.state: what the launcher knows of the run when it answers the sweeper
FINISHED = "finished"  # the run ended with exit 0 (value: the objective)
FAILED = "failed"  # the run ended with an error (a FAILED JobReturn, RunFailed)
UNCHANGED = "unchanged"  # the run had finished earlier: nothing trained (value: its result then)
SUBMITTED = "submitted"  # handed to a scheduler and not waited for (hydra.launcher.wait=false): no value yet
CHECKED = "checked"  # dry run: composed and checked, nothing launched
STATES = (FINISHED, FAILED, UNCHANGED, SUBMITTED, CHECKED)


@dataclass
class RunResult:
    """One sweep point's run, as the sweeper gets it (`JobReturn.return_value`)."""

    num: int
    run_id: str
    run_dir: str
    overrides: list[str] = field(default_factory=list)
    state: str = FINISHED
    code: int | None = None  # the run's exit code, where the launcher waited for it
    objective: str = DEFAULT_METRIC
    value: float | None = None  # the objective's value; None: not logged (or not known yet)
    metrics: dict[str, float] = field(default_factory=dict)  # the last value of every metric the run logged
    earlier: int | None = None  # UNCHANGED: the rollouts the run had when it finished earlier
    error: str | None = None  # FAILED: why

    def __float__(self) -> float:
        if self.value is None:
            raise ValueError(f"{self}: no value of {self.objective}" + (
                " yet (submitted, not waited for: add hydra.launcher.wait=true)" if self.state == SUBMITTED else
                " (a dry run trains nothing)" if self.state == CHECKED else
                " (the run logged none: see trainstack compare " + self.run_id + ")"))
        return float(self.value)

    def __str__(self) -> str:
        shown = f" = {self.value:.6g}" if self.value is not None else ""
        return f"run {self.run_id} ({self.state}{'' if self.code in (None, 0) else f', exit {self.code}'}): " \
               f"{self.objective}{shown}"


class RunFailed(CompactHydraException):
    """A FAILED point's exception: Hydra prints its message (no traceback) and exits 1."""

    sweep_point_failed = True  # not a config problem: trainstack's Hydra error guard lets Hydra report it

    def __init__(self, result: RunResult):
        self.result = result
        from trainstack.storage import layout

        where = Path(result.run_dir) / layout.LOGS / layout.TRAINER_LOG
        super().__init__(f"trainstack: sweep point {result.num} failed: run {result.run_id}"
                         + (f" exited with {result.code}" if result.code not in (None, 0) else "")
                         + (f": {result.error}" if result.error else "")
                         + f"\n  its log: {where}    status: trainstack status {result.run_dir}")


def read_value(run_dir: str | Path, objective: Objective, direction: Any = None) -> tuple[float | None, dict[str, float]]:
    """(the objective's value, the last value of every metric) from the run dir's own metrics: what
    `trainstack compare` reads (TensorBoard, W&B offline files, else metrics.jsonl)."""
    from trainstack.metrics import read_local

    series = read_local(run_dir).series
    last = {name: pts[-1][1] for name, pts in series.items() if pts}
    return objective.pick(series.get(objective.metric, []), direction), last


def finish(result: RunResult, objective: Objective, direction: Any = None) -> RunResult:
    """The result with its objective's value read from its run dir (a run that trained or had trained)."""
    result.objective = str(objective)
    if result.state in (FINISHED, UNCHANGED, FAILED) and Path(result.run_dir).is_dir():
        result.value, result.metrics = read_value(result.run_dir, objective, direction)
    return result


def sweep_objective(config: Any) -> Objective:
    """The objective a sweep's points return (the master config's `objective`)."""
    from omegaconf import OmegaConf

    return Objective.parse(OmegaConf.select(config, "objective", default=None))


def sweep_direction(config: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.select(config, "hydra.sweeper.direction", default=None)


def objective_alias(argv: list[str]) -> list[str]:
    """`hydra.sweeper.objective=X` -> `objective=X`: one spelling for every sweeper (Optuna's typed
    settings would refuse the key)."""
    out = []
    for a in argv:
        head, eq, value = a.partition("=")
        if eq and head.lstrip("+") == ALIAS:
            a = f"objective={value}"
        out.append(a)
    return out


BASIC_SWEEPERS = ("hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                  "hydra_plugins.trainstack_local.plugins.TrainstackSweeper")


def reads_results(config: Any) -> bool:
    """Does the sweep's sweeper choose points from earlier points' results (Optuna, Nevergrad, Ax)? Hydra's
    basic sweeper (and trainstack's) only lists them."""
    from omegaconf import OmegaConf

    return str(OmegaConf.select(config, "hydra.sweeper._target_", default="") or "") not in BASIC_SWEEPERS


def results_problems(config: Any, dry: bool, waits: bool, launcher: str) -> list[ConfigError]:
    """A sweeper that reads each point's result needs a result: refused once, before anything is launched, when
    the points would be dry runs or would be submitted and not waited for."""
    if not reads_results(config):
        return []
    from omegaconf import OmegaConf

    sweeper = str(OmegaConf.select(config, "hydra.sweeper._target_", default="")).rsplit(".", 1)[-1]
    if dry:
        return [ConfigError("dry_run", f"the {sweeper} chooses each point from the results of the points before "
                            "it, and a dry run trains nothing", "drop dry_run=true (to check every point first, run "
                            "the same sweep with dry_run=true and without hydra/sweeper)", value=True)]
    if not waits:
        return [ConfigError("hydra.launcher.wait", f"the {sweeper} chooses each point from the results of the points "
                            f"before it, and the {launcher} launcher returns once its runs are submitted",
                            "add hydra.launcher.wait=true (the sweep then waits for its runs, showing their "
                            "progress, and returns each one's result)", value=False)]
    return []
