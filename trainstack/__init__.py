"""trainstack: Hydra-composed, validated, resumable slime runs.

The Python API (docs/api.md) is imported on first use, so `import trainstack` and the CLI stay fast:
`trainstack.Run.compose([...])`, `trainstack.diff_runs(a, b)`, `trainstack.ConfigErrors`.
"""
from __future__ import annotations  # no `typing` import: the guard, the trainer and a pod's worker import this

__version__ = "0.1.0"

_API = ("Run", "DryRun", "LaunchResult", "RunStatus", "Metrics", "Diff", "RunFailed", "RunBusy", "diff_runs",
        "ConfigError", "ConfigErrors")
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> object:
    if name in _API:
        from trainstack import api

        return getattr(api, name)
    raise AttributeError(f"module 'trainstack' has no attribute {name!r}")
