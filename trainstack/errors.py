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
        head = (f"trainstack {command}: {what}; nothing was written.\n" if command
                else f"trainstack: {what} in the run config; nothing was launched.\n")
        return head + "\n\n".join(e.render() for e in self.errors)


def fail(key: str, problem: str, fix: str = "", **kw: Any) -> NoReturn:
    raise ConfigErrors([ConfigError(key, problem, fix, **kw)])


def report_and_exit(err: ConfigErrors, stream=None, command: str | None = None) -> NoReturn:
    print(err.render(command), file=stream or sys.stderr)
    sys.exit(EXIT_BAD_INPUT)
