"""Stop a run that trains on failures: the failed/aborted share of each rollout is watched.

A sample that ends ``failed`` or ``aborted`` (a dead env server, a plugin error) carries no
signal, and slime trains on it anyway (reward 0, loss-masked or not). A run whose rollouts
are mostly such samples looks "finished" while it learned nothing, so the tiny trainer stops
it: when ``rollout/failed_frac`` is above ``TRAINSTACK_MAX_FAILED_FRAC`` (default 0.5) for
``TRAINSTACK_MAX_FAILED_ROLLOUTS`` consecutive rollouts (default 3), or every sample of the
run's last rollout failed, it exits with ``EXIT_FAILURE_RATE``; the launcher records the run
as ``failed`` with the reason. ``TRAINSTACK_FAILURE_STOP=0`` turns the stop off (the metric is
still logged). docs/tiny_trainer.md, "Failed samples".
"""
from __future__ import annotations

import os
from dataclasses import dataclass

# the trainer's exit code for "stopped: too many failed samples" (backends.EXIT_REASONS); not 3, the
# launcher's "busy" (a Lium worker would relaunch on it), nor 4 (a superseded Lium worker)
EXIT_FAILURE_RATE = 9
REASON = "stopped: too many failed or aborted samples (rollout/failed_frac; docs/tiny_trainer.md, Failed samples)"
DEFAULT_MAX_FRAC = 0.5
DEFAULT_ROLLOUTS = 3


@dataclass
class FailureWatch:
    max_frac: float = DEFAULT_MAX_FRAC
    rollouts: int = DEFAULT_ROLLOUTS
    enabled: bool = True
    streak: int = 0

    @staticmethod
    def from_env(env: dict[str, str] | None = None) -> "FailureWatch":
        e = os.environ if env is None else env
        return FailureWatch(max_frac=float(e.get("TRAINSTACK_MAX_FAILED_FRAC", DEFAULT_MAX_FRAC)),
                            rollouts=max(1, int(e.get("TRAINSTACK_MAX_FAILED_ROLLOUTS", DEFAULT_ROLLOUTS))),
                            enabled=e.get("TRAINSTACK_FAILURE_STOP", "1").strip().lower() not in ("0", "false", "no", "off"))

    def observe(self, rollout_id: int, failed_frac: float, last: bool = False) -> str | None:
        """None to go on; else the reason the run stops (printed to the run log)."""
        self.streak = self.streak + 1 if failed_frac > self.max_frac else 0
        if not self.enabled:
            return None
        if self.streak >= self.rollouts:
            return (f"{REASON}: {failed_frac:.0%} of rollout {rollout_id + 1}'s samples failed, above "
                    f"{self.max_frac:.0%} for {self.streak} consecutive rollouts")
        if last and failed_frac >= 1.0:
            return f"{REASON}: every sample of the last rollout ({rollout_id + 1}) failed"
        return None
