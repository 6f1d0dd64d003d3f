"""A sweep's objective, `METRIC[:TAKE]`: which metric of a run counts, and which of its values.

Parsed where the config is checked (`objective`, `hydra.sweeper.objective`) and read where a run's
result is made (trainstack/run/result.py). TAKE: `last`, `max`, `min`, or `best` (`min` when
`hydra.sweeper.direction` is `minimize`, else `max`); default `rollout/raw_reward` (last).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from trainstack.errors import ConfigError, ConfigErrors

DEFAULT_METRIC = "rollout/raw_reward"
TAKES = ("last", "best", "max", "min")


@dataclass(frozen=True)
class Objective:
    """A metric of the run and which of its values counts."""

    metric: str = DEFAULT_METRIC
    take: str = "last"

    @classmethod
    def parse(cls, text: Any, key: str = "objective") -> "Objective":
        if text is None or text == "":
            return cls()
        if not isinstance(text, str):
            raise ConfigErrors([ConfigError(key, "must be a metric name (METRIC or METRIC:TAKE)",
                                            "e.g. hydra.sweeper.objective=eval/arithmetic:best", value=text)])
        metric, _, take = text.rpartition(":") if text.rpartition(":")[2] in TAKES else (text, "", "last")
        if not metric.strip() or any(c.isspace() for c in metric):
            raise ConfigErrors([ConfigError(key, f"'{text}' names no metric", "use a metric the run logs, e.g. "
                                            "rollout/raw_reward or eval/arithmetic (trainstack compare RUN lists them), "
                                            f"optionally with :{'|:'.join(TAKES)}", value=text)])
        return cls(metric, take)

    def __str__(self) -> str:
        return self.metric if self.take == "last" else f"{self.metric}:{self.take}"

    def pick(self, points: Sequence[tuple[float, float]], direction: Any = None) -> float | None:
        """The counted value of a series [(step, value)], or None when the run logged none."""
        values = [v for _, v in points]
        if not values:
            return None
        take = self.take
        if take == "best":
            take = "min" if str(_first(direction)).lower() == "minimize" else "max"
        return values[-1] if take == "last" else max(values) if take == "max" else min(values)


def _first(direction: Any) -> Any:
    if isinstance(direction, (list, tuple)) or (hasattr(direction, "__len__") and not isinstance(direction, str)):
        return list(direction)[0] if len(direction) else None
    return direction
