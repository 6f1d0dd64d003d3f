"""One error shape for every bad input: the key, its value, where it came from, the fix.

Everything user-facing (the Hydra app, `trainstack` subcommands, the tiny trainer) reports
``ConfigError``s through ``report_and_exit`` so a mistake is one screen and exit code 2,
never a traceback.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, NoReturn

EXIT_BAD_INPUT = 2


@dataclass
class ConfigError:
    key: str  # dotted key as the user would write it (args.rollout_batch_size, cluster.num_nodes)
    problem: str  # what is wrong, one sentence
    fix: str = ""  # what to do about it
    value: Any = None
    source: str = ""  # where the value came from (conf/model/qwen3-4B.yaml, command line, derived)
    related: dict[str, Any] = field(default_factory=dict)  # other keys involved: key -> value
    outside: str = ""  # the config is fine, this failed outside it ("getting the run's inputs": a network error)

    def render(self) -> str:
        """One screen; every secret value in it hidden (secrets.redact_text), whatever the caller put in."""
        from trainstack.secrets import redact_text

        lines = [f"error: {self.key}: {redact_text(self.problem)}"]
        if self.value is not None:
            lines.append(redact_text(f"  value : {self.value!r}" + (f"  (from {self.source})" if self.source else "")))
        elif self.source:
            lines.append(redact_text(f"  from  : {self.source}"))
        for k, v in self.related.items():
            lines.append(redact_text(f"  {k} = {v!r}"))
        if self.fix:
            lines.append(f"  fix   : {redact_text(self.fix)}")
        return redact_text("\n".join(lines))  # the key too: a secret typed where a key goes


class ConfigErrors(Exception):
    """Raised with every problem found, so the user fixes them in one go."""

    def __init__(self, errors: list[ConfigError]):
        self.errors = list(errors)
        super().__init__(self.render())

    def render(self, command: str | None = None) -> str:
        """`command`: a `trainstack` subcommand that launches nothing (status, compare, ...)."""
        n = len(self.errors)
        what = f"{n} problem{'s' if n != 1 else ''}"
        outside = {e.outside for e in self.errors}
        if "" not in outside:  # not the config's fault: a network error, a service down
            head = (f"trainstack{' ' + command if command else ''}: {what} {' and '.join(sorted(outside))} (the run "
                    "config is fine); nothing was launched.\n")
        else:
            head = (f"trainstack {command}: {what}; nothing was written.\n" if command
                    else f"trainstack: {what} in the run config; nothing was launched.\n")
        return head + "\n\n".join(e.render() for e in self.errors)


def fail(key: str, problem: str, fix: str = "", **kw: Any) -> NoReturn:
    raise ConfigErrors([ConfigError(key, problem, fix, **kw)])


def report_and_exit(err: ConfigErrors, stream=None, command: str | None = None) -> NoReturn:
    print(err.render(command), file=stream or sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


# ------------------------------------------------------------------------------------------
# Failures at run time: the input was fine, something outside it failed. Never exit 2.
# ------------------------------------------------------------------------------------------
EXIT_LAUNCHER = 5  # a launcher's backend failed (scheduler refused, Ray job would not stop, commander refusal)


class RuntimeFailure(Exception):
    """Something outside the run config failed while launching or following a run.

    Each subclass has its own exit code (documented in docs/resume.md), so a script can tell a
    bad config (2) from a backend that failed; `report_failure_and_exit` prints one screen."""

    exit_code: int = EXIT_LAUNCHER
    what: str = "launcher"

    def __init__(self, problem: str, fix: str = ""):
        self.problem, self.fix = problem, fix
        super().__init__(problem)

    def render(self) -> str:
        from trainstack.secrets import redact_text

        text = f"trainstack: {self.what} failed: {redact_text(self.problem)}"
        return text + (f"\n  fix   : {redact_text(self.fix)}" if self.fix else "")


class SchedulerFailure(RuntimeFailure):
    """The batch scheduler (sbatch, squeue) refused or failed."""

    exit_code = 6
    what = "the scheduler"


class RayFailure(RuntimeFailure):
    """The Ray cluster or a Ray job did not do what was asked (a job that will not stop)."""

    exit_code = 7
    what = "Ray"


class CommanderFailure(RuntimeFailure):
    """The Lium commander refused a request or did not answer."""

    exit_code = 8
    what = "the Lium commander"


EXIT_CODES = {2: "bad input: nothing was launched or written", 3: "busy: another launch holds the run",
              9: "the tiny trainer stopped itself: too many failed samples (docs/tiny_trainer.md)",
              EXIT_LAUNCHER: "a launcher failed at run time", SchedulerFailure.exit_code: "the scheduler failed",
              RayFailure.exit_code: "Ray failed", CommanderFailure.exit_code: "the Lium commander failed"}


def report_failure_and_exit(err: RuntimeFailure, stream=None) -> NoReturn:
    print(err.render(), file=stream or sys.stderr)
    sys.exit(err.exit_code)
