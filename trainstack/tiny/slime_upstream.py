"""slime's own rollout code, imported from the ``slime/`` submodule, on a machine without a GPU.

The tiny backend runs slime's rollout side (data loading, ``Sample``, plugin loading and calling,
the reward hub, sample-to-train-data conversion) instead of a re-implementation, so a plugin that
passes on CPU passes under slime. slime's rollout modules import cleanly on CPU with
``transformers`` and ``pylatexenc`` installed, except for SGLang: ``slime.ray.rollout`` imports a
few constants and classes from ``sglang.srt`` at module level (the GPU serving stack, which has
no CPU wheel). When ``sglang`` is not importable, :func:`load` registers stand-in modules for
exactly those names (``SGLANG_STANDINS``); nothing that runs on the rollout path calls them, and
the upstream-contract test checks the list against slime's imports.

Where slime is found: ``$TRAINSTACK_SLIME_ROOT`` (docker/Dockerfile sets it), else the ``slime/``
submodule beside the ``trainstack`` package (a source checkout).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path

ROOT_ENV = "TRAINSTACK_SLIME_ROOT"

# module -> names slime imports from it at module level (slime 624b824a). Only these are stood in.
SGLANG_STANDINS: dict[str, tuple[str, ...]] = {
    "sglang": (),
    "sglang.srt": (),
    "sglang.srt.constants": (
        "GPU_MEMORY_TYPE_CUDA_GRAPH",
        "GPU_MEMORY_TYPE_KV_CACHE",
        "GPU_MEMORY_TYPE_WEIGHTS",
    ),
    "sglang.srt.server_args": ("ServerArgs",),
    "sglang.srt.utils": ("kill_process_tree",),
    "sglang_router": (),
    "sglang_router.launch_router": ("RouterArgs",),
}


class SlimeMissing(RuntimeError):
    """slime's source is not where the tiny backend looks for it."""


def slime_root() -> Path:
    """The slime checkout whose ``slime`` package the tiny backend imports."""
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parents[2] / "slime"


def _standin(name: str, names: tuple[str, ...]) -> types.ModuleType:
    mod = types.ModuleType(name, f"trainstack stand-in for {name} (no SGLang on this machine)")
    mod.__path__ = []  # a package, so submodules can be registered under it
    mod.__trainstack_standin__ = True  # type: ignore[attr-defined]
    for attr in names:
        if attr.isupper():  # a constant
            value: object = attr.lower()
        elif attr[0].isupper():  # a class
            value = type(attr, (), {"__module__": name})
        else:  # a function: calling it on the CPU path is a bug, say so
            value = _not_on_cpu(f"{name}.{attr}")
        setattr(mod, attr, value)
    return mod


def _not_on_cpu(qualname: str):
    def standin(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"{qualname} is SGLang's (GPU serving stack); the tiny backend must not call it")
    return standin


def install_sglang_standins() -> list[str]:
    """Register stand-ins for SGLang's module-level names unless the real SGLang is importable."""
    done = []
    for name, names in SGLANG_STANDINS.items():
        top = name.split(".")[0]
        if top in sys.modules and not getattr(sys.modules[top], "__trainstack_standin__", False):
            continue
        if top not in sys.modules and importlib.util.find_spec(top) is not None:
            continue
        if name not in sys.modules:
            sys.modules[name] = _standin(name, names)
            done.append(name)
    return done


def load(root: Path | None = None) -> Path:
    """Make ``import slime...`` resolve to the submodule's source; returns the checkout used."""
    root = (root or slime_root()).resolve()
    if not (root / "slime" / "__init__.py").is_file():
        raise SlimeMissing(
            f"slime's source is not at {root} (the tiny backend runs slime's own rollout code): "
            f"fill the submodule with `git submodule update --init slime`, or set ${ROOT_ENV} "
            "to a slime checkout at the pinned commit"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    loaded = sys.modules.get("slime")
    if loaded is not None and not str(getattr(loaded, "__file__", "")).startswith(str(root)):
        raise SlimeMissing(f"another `slime` package is already imported ({loaded.__file__}), not {root}")
    install_sglang_standins()
    importlib.import_module("slime")
    return root
