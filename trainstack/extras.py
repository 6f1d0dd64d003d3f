"""The optional dependencies each use needs, named by the pip extra that installs them.

pyproject.toml has one extra per use (`cpu`: the CPU default, the agentic run, plots, status; one per
GPU launcher; `all`). A check that finds a module missing says which extra brings it, at the dry
run, instead of a traceback in the trainer (docs/install.md, "Guarantees"). Modules are looked up,
never imported: a check costs a directory lookup. tests/test_packaging.py keeps this table and
pyproject.toml's extras equal.
"""
from __future__ import annotations

import importlib.util

from trainstack.errors import ConfigError

# extra -> the top-level modules it installs that trainstack imports (import names, not distributions)
EXTRAS: dict[str, tuple[str, ...]] = {
    # the tiny trainer + slime's rollout code (transformers, pylatexenc, httpx, aiohttp), the CPU agentic env
    # (fastapi, uvicorn, tokenizers, jinja2), its metrics (tensorboard) and `compare --plot` (matplotlib)
    "cpu": ("torch", "numpy", "transformers", "tensorboard", "pylatexenc", "jinja2", "httpx", "aiohttp",
            "fastapi", "uvicorn", "tokenizers", "matplotlib"),
    "http-env": ("fastapi", "uvicorn", "httpx", "tokenizers", "jinja2"),
    "ray": ("ray",),
    "slurm": ("submitit",),
    "lium": ("lium", "fastapi", "uvicorn"),
    "hub": ("huggingface_hub",),
    "wandb": ("wandb",),
}


def installed(module: str) -> bool:
    """Importable here (a module set to None in sys.modules, as tests hide one, is not)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(extra: str, modules: tuple[str, ...] | None = None) -> list[str]:
    """The modules of `extra` (or just `modules` of it) that are not installed."""
    return [m for m in (modules or EXTRAS[extra]) if not installed(m)]


def install_hint(extra: str) -> str:
    return f"pip install 'trainstack[{extra}]'"


def problem(key: str, extra: str, what: str, modules: tuple[str, ...] | None = None,
            value: object = None) -> list[ConfigError]:
    """One error naming what needs `extra` and what of it is missing; [] when everything is there."""
    gone = missing(extra, modules)
    if not gone:
        return []
    names = ", ".join(gone)
    return [ConfigError(key, f"{what} needs the `{extra}` extra: {names} {'is' if len(gone) == 1 else 'are'} not "
                        "installed in this Python", f"{install_hint(extra)} (in a trainstack checkout: `make install`)",
                        value=value)]
