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
    if loaded is not None and getattr(loaded, "__file__", None) is None:
        # a namespace package: the checkout's `slime/` directory itself, imported because the project root
        # is on sys.path; the real package is one level down
        for name in [m for m in sys.modules if m == "slime" or m.startswith("slime.")]:
            del sys.modules[name]
        loaded = None
    if loaded is not None and not str(getattr(loaded, "__file__", "")).startswith(str(root)):
        raise SlimeMissing(f"another `slime` package is already imported ({loaded.__file__}), not {root}")
    install_sglang_standins()
    importlib.import_module("slime")
    return root


class _Response:
    """The part of ``httpx.Response`` slime's ``http_utils._post`` / ``get`` use."""

    def __init__(self, status: int, content: bytes, url: str):
        self.status_code, self.content, self.url = status, content, url

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise RuntimeError(f"HTTP {self.status_code} from {self.url}: {self.text[:500]}")

    async def aread(self) -> bytes:
        return self.content

    async def aclose(self) -> None:
        return None


class AiohttpClient:
    """Stands in for the ``httpx.AsyncClient`` slime's ``init_http_client`` creates (``http_utils._http_client``).

    slime's own ``post`` / ``get`` / ``_post`` (retries included) still run and still speak HTTP; only
    the connection pool underneath is aiohttp's (slime's other HTTP dependency). Why: httpx's pool
    serves a burst of concurrent requests in roughly quadratic time; slime sends a whole rollout
    (256 requests in cpu-smoke) at once, which took 2.5-12 s per rollout with httpx on a 2-core
    machine against 0.3-0.4 s with aiohttp keep-alive (docs/benchmarks.md). The session is created on
    the event loop that first uses it (slime's rollout loop).
    """

    def __init__(self, limit: int = 0):
        self.limit = limit
        self._session = None

    def _sess(self):
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.limit), timeout=aiohttp.ClientTimeout(total=None),
                trust_env=False)
        return self._session

    async def post(self, url: str, json=None, headers=None) -> _Response:
        async with self._sess().post(url, json=json, headers=headers) as r:
            return _Response(r.status, await r.read(), url)

    async def get(self, url: str, headers=None) -> _Response:
        async with self._sess().get(url, headers=headers) as r:
            return _Response(r.status, await r.read(), url)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def install_http_client(args) -> None:
    """slime's ``init_http_client(args)``, then its httpx pool swapped for :class:`AiohttpClient`."""
    from slime.utils import http_utils

    http_utils.init_http_client(args)
    http_utils._http_client = AiohttpClient(limit=args.sglang_server_concurrency * http_utils.get_rollout_num_engines(args))
