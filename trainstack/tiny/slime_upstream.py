"""slime's own rollout code, imported from the ``slime/`` submodule, on a machine without a GPU.

The tiny backend runs slime's rollout side (data loading, ``Sample``, plugin loading and calling,
the reward hub, sample-to-train-data conversion) instead of a re-implementation, so a plugin that
passes on CPU passes under slime. slime's rollout modules import cleanly on CPU with
``transformers`` and ``pylatexenc`` installed, except for SGLang: ``slime.ray.rollout`` imports a
few constants and classes from ``sglang.srt`` at module level (the GPU serving stack, which has
no CPU wheel). When ``sglang`` is not importable, :func:`load` registers stand-in modules for
exactly those names (``SGLANG_STANDINS``); nothing that runs on the rollout path calls them, and
the upstream-contract test checks the list against slime's imports.

Below slime's code, for start-up and per-sample speed (docs/tiny_trainer.md, "slime in the loop"):
slime's HTTP client reaches the tiny server in-process (:class:`InProcessClient`); ``RolloutManager``'s
conversion methods are compiled from slime's source without importing Ray (:func:`rollout_manager_class`);
transformers' processor names (:data:`LAZY_TRANSFORMERS`) and ``ray``/``wandb`` (:data:`DEFERRED_IMPORTS`)
are resolved on first use.

Where slime is found: ``$TRAINSTACK_SLIME_ROOT``, which a launch sets from ``slime.root`` (the dry run
checks that checkout first: trainstack/preflight/host_checks.py); run by hand, trainstack/upstream/slime_root.py's rule.
"""
from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any

from trainstack.upstream import slime_root as _slime_root

ROOT_ENV = _slime_root.ENV

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
    # slime's argument parser (slime.utils.arguments -> backends.sglang_utils.arguments) imports the router's
    # args class at module level; the tests that build `args` with slime's own parser need it importable
    "sglang_router": (),
    "sglang_router.launch_router": ("RouterArgs",),
}


# the router the tiny server imitates (its `/workers` route, not 0.2.1's `/list_workers`): slime's image's
ROUTER_VERSION = "0.3.2"


class SlimeMissing(RuntimeError):
    """slime's source is not where the tiny backend looks for it."""


def slime_root() -> Path:
    """The slime checkout whose ``slime`` package the tiny backend imports: ``$TRAINSTACK_SLIME_ROOT`` (a
    launch sets it from ``slime.root``), else trainstack's own rule for an unset ``slime.root``."""
    return Path(_slime_root.resolve(None, os.getcwd())).resolve()


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
            if name == "sglang_router":  # slime v0.3.0's abort picks the router's routes by its version
                sys.modules[name].__version__ = ROUTER_VERSION  # type: ignore[attr-defined]
            done.append(name)
    return done


# third-party packages slime's rollout modules import at module level but use only off the CPU path
# (slime.utils.data: `import ray` for `ray.get` in the trainer-side data fetch; slime.observability:
# `import wandb` for its own tracking, which the tiny metrics sinks replace) or only for some rewards
# (slime.rollout.rm_hub.math_utils: `import sympy` and `from sympy.parsing import sympy_parser`, used by
# the math/deepscaler rewards; 0.5-1 s of every start). Their own code runs on first use of a name they
# define (see _Deferred), not at import: the real package, only later. A dotted name is deferred as the
# attribute of its (deferred) parent, so `from parent import child` runs nothing either.
DEFERRED_IMPORTS = ("ray", "wandb", "sympy", "sympy.parsing", "sympy.parsing.sympy_parser")


class _Deferred(types.ModuleType):
    """A module whose code has not run yet. ``__spec__``, ``__file__``, ``__loader__`` are set, so an
    ``import`` statement sees an imported module; the first lookup of any other name (``__path__``
    included: importing a submodule or ``from pkg import x`` runs the package first, as a normal
    import does) runs the module's code in this very object, its deferred parents' first (the order a
    normal import runs them in, so a package that imports this very submodule while it runs finds it
    running, not run twice). ``importlib.util.LazyLoader`` does the same but also triggers on
    ``__spec__``, which every ``import`` of an imported module reads on 3.11."""

    def __getattr__(self, attr: str):
        _run_deferred(self)
        return getattr(self, attr)

    @property  # type: ignore[override]
    def __dict__(self):  # `vars(m)`, `m.__dict__`, `dir(m)` see the module's names (slime's math_utils copies
        _run_deferred(self)  # `sympy.__dict__`): the code runs first, as for any other name
        return _MODULE_DICT.__get__(self)


_MODULE_DICT: Any = vars(types.ModuleType)["__dict__"]  # the real namespace, without running the code


def _run_deferred(module: types.ModuleType) -> None:
    parent = sys.modules.get(module.__spec__.name.rpartition(".")[0]) if module.__spec__ else None
    if type(parent) is _Deferred:
        _run_deferred(parent)
    if type(module) is not _Deferred:  # the parent's code ran it already (it imports this submodule)
        return
    spec: Any = module.__spec__
    module.__class__ = types.ModuleType  # type: ignore[assignment]
    if spec.submodule_search_locations is not None:
        module.__path__ = spec.submodule_search_locations
    spec.loader.exec_module(module)


# slime's rollout modules `import ray` / `import wandb` at module level and use them only off the CPU path
# (above). The `cpu` extra installs neither (ray[default] and wandb are ~40 packages); when one is not
# installed, a stand-in takes its name, and using it says which extra brings the real one.
ABSENT_EXTRAS = {"ray": "ray", "wandb": "wandb"}


class _Absent(types.ModuleType):
    """A package that is not installed: `import` succeeds, using any name raises ModuleNotFoundError."""

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise ModuleNotFoundError(f"{self.__name__}.{attr}: {self.__name__} is not installed (the CPU backend "
                                  f"never uses it); pip install 'trainstack[{ABSENT_EXTRAS[self.__name__]}]'",
                                  name=self.__name__)


def install_absent_standins() -> list[str]:
    """Stand in for each of :data:`ABSENT_EXTRAS` that is neither imported nor installed."""
    done = []
    for name in ABSENT_EXTRAS:
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            mod = _Absent(name, f"trainstack stand-in: {name} is not installed")
            mod.__path__ = []  # type: ignore[attr-defined]
            mod.__trainstack_standin__ = True  # type: ignore[attr-defined]
            sys.modules[name] = mod
            done.append(name)
    return done


def defer_import(name: str) -> bool:
    """Register ``name`` as a :class:`_Deferred` module; False if already imported or not installed. A
    dotted name's parent must be imported or deferred first; the module becomes its attribute."""
    if name in sys.modules:
        return False
    parent_name, _, child = name.rpartition(".")
    if parent_name:
        parent = sys.modules.get(parent_name)
        if parent is None or parent.__spec__ is None or parent.__spec__.submodule_search_locations is None:
            return False
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, list(parent.__spec__.submodule_search_locations))
    else:
        spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return False
    module = importlib.util.module_from_spec(spec)
    if not parent_name:  # restored when the code runs (see _Deferred); a subpackage keeps it, so that
        module.__dict__.pop("__path__", None)  # `from parent.sub import child` (which asks for it) runs nothing
    module.__class__ = _Deferred
    sys.modules[name] = module
    if parent_name:  # `from parent import child` finds it and runs nothing
        _MODULE_DICT.__get__(sys.modules[parent_name])[child] = module
    return True


def load(root: Path | None = None) -> Path:
    """Make ``import slime...`` resolve to the submodule's source; returns the checkout used."""
    root = make_importable(root)
    _import_processing_utils()
    return root


def make_importable(root: Path | None = None) -> Path:
    """What :func:`load` does before the import of slime's ``processing_utils`` (transformers' processor
    names made lazy there: a speed-up only): slime's checkout on ``sys.path``, SGLang's stand-ins, the
    deferred imports. The plugin probe's prelude (trainstack/config/backends.py): a plugin imports as in the
    trainer, without 2-3 s of transformers and torch that a plugin which does not import them never pays."""
    root = (root or slime_root()).resolve()
    if not (root / "slime" / "__init__.py").is_file():
        from trainstack.upstream.argtable import load_table

        raise SlimeMissing(f"slime's source is not at {root} (the tiny backend runs slime's own rollout code): "
                           + _slime_root.fetch_fix(root, load_table().slime_commit))
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
    for name in DEFERRED_IMPORTS:
        defer_import(name)
    install_absent_standins()
    importlib.import_module("slime")
    return root


# --- transformers' processor stack: imported only when a run needs a processor ---------------------------
# slime.utils.processing_utils imports these at module level; in transformers 5 they pull the whole
# processor/model stack (torch._dynamo, torch.distributed.tensor, ...): ~2-7 s of every trainer start.
# A text-only run never uses them (see _LazyName), so they are resolved on first real use.
LAZY_TRANSFORMERS: dict[str, str] = {
    "AutoProcessor": "transformers.models.auto.processing_auto",
    "ProcessorMixin": "transformers.processing_utils",
}
# the files hf_tokenizer.write puts in a directory: AutoProcessor.from_pretrained of such a directory
# is the tokenizer (no processor config), which slime's load_processor then discards
TINY_TOKENIZER_FILES = frozenset({"tokenizer.json", "tokenizer_config.json"})


class _LazyName:
    """Stands for ``transformers.<name>`` in slime's ``processing_utils`` until it is really used.

    - ``isinstance(x, ProcessorMixin)`` is False without importing anything while
      ``transformers.processing_utils`` is not imported (nothing can be an instance of a class that
      does not exist yet), else the real check;
    - ``AutoProcessor.from_pretrained(d)`` for a directory holding only the tiny tokenizer's two files
      returns ``AutoTokenizer.from_pretrained(d)``: what transformers returns for a directory without
      a processor config (tests/test_upstream_contract.py checks it against the real call);
    - everything else (other directories, other attributes) is the real object's.
    """

    def __init__(self, name: str, module: str):
        self._name, self._module = name, module

    def _real(self):
        return getattr(importlib.import_module(self._module), self._name)

    def __getattr__(self, attr: str):
        if self._name == "AutoProcessor" and attr == "from_pretrained":
            return self._from_pretrained
        return getattr(self._real(), attr)

    def _from_pretrained(self, name_or_path, *args, **kwargs):
        p = Path(str(name_or_path))
        if not args and p.is_dir() and {c.name for c in p.iterdir()} == TINY_TOKENIZER_FILES:
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(str(p), **kwargs)
        return self._real().from_pretrained(name_or_path, *args, **kwargs)

    def __instancecheck__(self, obj: object) -> bool:
        if self._module not in sys.modules:
            return False
        return isinstance(obj, self._real())

    def __subclasscheck__(self, cls: type) -> bool:
        if self._module not in sys.modules:
            return False
        return issubclass(cls, self._real())

    def __repr__(self) -> str:
        return f"<trainstack lazy {self._module}.{self._name}>"


def _import_processing_utils() -> None:
    """Import slime's ``processing_utils`` with :data:`LAZY_TRANSFORMERS` resolved lazily. The lazy
    names are set on the ``transformers`` module only for that import (slime's module keeps them);
    afterwards ``transformers.AutoProcessor`` is transformers' own again for everyone else."""
    if "slime.utils.processing_utils" in sys.modules:
        return
    import transformers

    saved = {n: transformers.__dict__[n] for n in LAZY_TRANSFORMERS if n in transformers.__dict__}
    for name, mod in LAZY_TRANSFORMERS.items():
        if name not in saved:
            setattr(transformers, name, _LazyName(name, mod))
    try:
        importlib.import_module("slime.utils.processing_utils")
    finally:
        for name in LAZY_TRANSFORMERS:
            if name not in saved:
                transformers.__dict__.pop(name, None)


# --- RolloutManager's conversion, without importing Ray ----------------------------------------------
# slime.ray.rollout imports ray, wandb (via observability.logging_utils), SGLang's engine wrappers...:
# ~1-3 s of every trainer start, for two methods that use none of it.
MANAGER_METHODS = ("_post_process_rewards", "_convert_samples_to_train_data")


def _parse(path: Path) -> ast.Module:
    """``ast.parse`` with the collector off: on CPython 3.11 a collection inside the AST constructor can
    run a finalizer that builds an AST itself (asyncio's "Task exception was never retrieved" log
    formats a traceback, which parses source lines), and the shared constructor state then fails the
    outer parse with ``SystemError: AST constructor recursion depth mismatch`` (cpython#106905)."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    finally:
        if was:
            gc.enable()


def module_imports(tree: ast.Module, module: str) -> dict[str, tuple[str, str | None]]:
    """{module-level imported name: (module, attribute or None for `import module`)} of slime's ``module``."""
    pkg = module.split(".")[:-1]
    imports: dict[str, tuple[str, str | None]] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                imports[a.asname or a.name.split(".")[0]] = (a.name if a.asname else a.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(pkg[: len(pkg) - node.level + 1] + ([mod] if mod else []))
            for a in node.names:
                imports[a.asname or a.name] = (mod, a.name)
    return imports


def manager_source(root: Path | None = None) -> tuple[Path, ast.Module, ast.ClassDef, dict[str, tuple[str, str | None]]]:
    """(slime/ray/rollout.py, its AST, the RolloutManager class node, {module-level imported name:
    (module, attribute or None for `import module`)})."""
    path = (root or slime_root()) / "slime" / "ray" / "rollout.py"
    tree = _parse(path)
    imports = module_imports(tree, "slime.ray.rollout")
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RolloutManager"), None)
    if cls is None:
        raise SlimeMissing(f"{path} defines no RolloutManager (the tiny backend converts samples with its methods)")
    return path, tree, cls, imports


def manager_globals(methods: list[ast.FunctionDef]) -> set[str]:
    """The free names the methods read: neither builtins nor their own parameters/locals."""
    import builtins

    out: set[str] = set()
    for fn in methods:
        local = {a.arg for a in ast.walk(fn) if isinstance(a, ast.arg)}  # its own and nested functions' parameters
        local |= {n.name for n in ast.walk(fn) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and n is not fn}
        local |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
        out |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                and n.id not in local and not hasattr(builtins, n.id)}
    return out


def rollout_manager_class(root: Path | None = None) -> type:
    """A class holding slime's own ``RolloutManager`` methods :data:`MANAGER_METHODS`, compiled from
    ``slime/ray/rollout.py`` (same source, same file and line numbers in tracebacks) with the
    module-level names they use imported from where slime's module imports them. The rest of the
    module (Ray actor, SGLang engines, tracking) is not loaded. A method that reads a name the module
    does not import (a module-level helper of a newer slime) is refused here, naming it. Built once
    per process and checkout."""
    return _manager_class(str((root or slime_root()).resolve()))


@functools.lru_cache(maxsize=None)
def _manager_class(root: str) -> type:
    path, _, cls, imports = manager_source(Path(root))
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in MANAGER_METHODS]
    missing = set(MANAGER_METHODS) - {m.name for m in methods}
    names = manager_globals(methods)
    unknown = names - set(imports)
    if missing or unknown:
        raise SlimeMissing(f"slime's RolloutManager in {path}: methods {sorted(missing)} missing, names "
                           f"{sorted(unknown)} not imported at module level; trainstack/tiny/slime_upstream."
                           "rollout_manager_class needs updating for this slime")
    ns: dict[str, object] = {"__name__": "slime.ray.rollout", "__file__": str(path)}
    for name in sorted(names):
        mod, attr = imports[name]
        m = importlib.import_module(mod)
        ns[name] = m if attr is None else getattr(m, attr)
    body = ast.Module(body=[ast.ClassDef(name="RolloutManager", bases=[], keywords=[], body=list[ast.stmt](methods),
                                         decorator_list=[], lineno=cls.lineno, col_offset=0,
                                         end_lineno=cls.end_lineno, end_col_offset=0)], type_ignores=[])
    exec(compile(ast.fix_missing_locations(body), str(path), "exec"), ns)
    return ns["RolloutManager"]  # type: ignore[return-value]


# Where slime keeps the module-level functions the tiny backend calls, newest home first: the pin moved
# them from slime/ray/rollout.py (v0.3.x, a module that imports Ray, torch and SGLang's engines) into
# slime/observability/. A home in slime/ray/rollout.py is compiled from its source (:func:`module_functions`).
FUNCTION_HOMES: dict[str, tuple[tuple[str, str], ...]] = {
    "validate_rollout_ids": (("slime.observability.rollout_data_utils", "validate_rollout_id_annotated"),
                             ("slime.ray.rollout", "_validate_rollout_id_annotated"),  # v0.3.1
                             ("slime.ray.rollout", "_validate_group_id_annotated")),  # v0.3.0
    "compute_metrics_from_samples": (("slime.observability.rollout_metrics", "compute_metrics_from_samples"),
                                     ("slime.ray.rollout", "compute_metrics_from_samples")),
}
_COMPILED_MODULES = ("slime.ray.rollout",)


def function_home(role: str, root: Path | None = None) -> tuple[str, str]:
    """(module, name) of the :data:`FUNCTION_HOMES` role in the checkout at ``root``."""
    base = root or slime_root()
    for mod, name in FUNCTION_HOMES[role]:
        path = base.joinpath(*mod.split(".")).with_suffix(".py")
        if path.is_file() and any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
                                  for n in _parse(path).body):
            return mod, name
    raise SlimeMissing(f"slime at {base} defines none of {FUNCTION_HOMES[role]} (the tiny backend calls {role}); "
                       "trainstack/tiny/slime_upstream.FUNCTION_HOMES needs this slime's home for it")


def where_called(path: str, root: Path | None = None) -> str:
    """``path`` (a pin's `pkg.module.name`) where the checkout keeps it: its FUNCTION_HOMES home, else itself."""
    mod, _, name = path.rpartition(".")
    role = next((r for r, homes in FUNCTION_HOMES.items() if (mod, name) in homes), None)
    return ".".join(function_home(role, root)) if role is not None else path


def module_file(path: str, root: Path | None = None) -> Path | None:
    """The source file of the module ``path`` (`pkg.module.name` or `pkg.module.Class.method`) names, if any."""
    parts, base = path.split("."), root or slime_root()
    for i in (len(parts) - 1, len(parts) - 2):
        if i == len(parts) - 2 and not parts[i][:1].isupper():  # module.Class.method only
            break
        f = base.joinpath(*parts[:i])
        for candidate in (f.with_suffix(".py"), f / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def upstream_function(role: str, root: Path | None = None) -> Any:
    """slime's own function for ``role``: imported, or compiled from a module the CPU path does not import."""
    mod, name = function_home(role, root)
    if mod in _COMPILED_MODULES:
        return module_functions(str((root or slime_root()).resolve()), mod, (name,))[name]
    return getattr(importlib.import_module(mod), name)


@functools.lru_cache(maxsize=None)
def module_functions(root: str, module: str, names: tuple[str, ...]) -> dict[str, Any]:
    """Top-level functions ``names`` of slime's ``module``, compiled from its source with the module-level
    functions they call (transitively) and the names they use imported from where the module imports
    them; the rest of the module (its Ray, torch and SGLang imports) is not run."""
    path = Path(root).joinpath(*module.split(".")).with_suffix(".py")
    tree = _parse(path)
    imports = module_imports(tree, module)
    defs: dict[str, ast.stmt] = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    wanted, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        if name not in defs:
            raise SlimeMissing(f"{path} defines no function {name} (the tiny backend compiles it)")
        wanted.add(name)
        todo += [n for n in manager_globals([defs[name]]) if n in defs and n not in wanted]  # type: ignore[list-item]
    nodes = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in wanted]
    free = manager_globals(nodes) - wanted  # type: ignore[arg-type]
    unknown = free - set(imports)
    if unknown:
        raise SlimeMissing(f"{path}: {sorted(names)} read {sorted(unknown)}, which the module neither imports nor "
                           "defines as a function; trainstack/tiny/slime_upstream.module_functions cannot compile them")
    ns: dict[str, Any] = {"__name__": module, "__file__": str(path)}
    for name in sorted(free):
        mod, attr = imports[name]
        m = importlib.import_module(mod)
        ns[name] = m if attr is None else getattr(m, attr)
    exec(compile(ast.Module(body=list[ast.stmt](nodes), type_ignores=[]), str(path), "exec"), ns)
    return {n: ns[n] for n in names}


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
    machine against 0.3-0.4 s with aiohttp keep-alive (docs/benchmarks.md). A session belongs to the event
    loop it was made on, so there is one per loop that posts: slime's rollout loop (`primary`), and any other,
    such as the worker thread's own loop of the fully-async rollout (slime/rollout/fully_async_rollout.py:
    132-133). Another loop's session keeps no idle connection (`force_close`): its loop may end before the
    run does, and what it left open could no longer be closed.
    """

    def __init__(self, limit: int = 0, primary: Any = None):
        self.limit = limit
        self.primary = primary  # slime's rollout loop (slime.utils.async_utils.get_async_loop().loop)
        self._sessions: dict = {}  # event loop -> its aiohttp session

    def _sess(self):
        import asyncio

        import aiohttp

        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            keep_alive = self.primary is None or loop is self.primary
            session = self._sessions[loop] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.limit, force_close=not keep_alive),
                timeout=aiohttp.ClientTimeout(total=None), trust_env=False)
        return session

    async def post(self, url: str, json=None, headers=None) -> _Response:
        async with self._sess().post(url, json=json, headers=headers) as r:
            return _Response(r.status, await r.read(), url)

    async def get(self, url: str, headers=None) -> _Response:
        async with self._sess().get(url, headers=headers) as r:
            return _Response(r.status, await r.read(), url)

    async def aclose(self) -> None:
        """Close this loop's session; another loop's: on that loop while it runs, else (it has ended, e.g.
        the fully-async worker's) detached, since a closed loop cannot await anything."""
        import asyncio

        here = asyncio.get_running_loop()
        for loop, session in list(self._sessions.items()):
            if session.closed:
                pass
            elif loop is here:
                await session.close()
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=10)
            else:
                session.detach()
        self._sessions.clear()


class InProcessClient(AiohttpClient):
    """:class:`AiohttpClient` that answers requests for the tiny server's own URL by calling its route
    coroutine (``TinySGLangServer.handle``) on the same event loop instead of over a socket.

    slime's ``post`` / ``_post`` / ``get`` (retries, ``raise_for_status``, ``json.loads`` of the body) run
    unchanged above it; the request and response still cross as JSON bytes (what a socket would carry),
    so a payload that does not survive JSON fails as it would over HTTP. Why: an aiohttp round trip
    per sample was ~30% of the rollout loop's CPU (docs/benchmarks.md). Any other URL (an env server,
    a router a plugin names) and any call from another event loop go over HTTP as before.
    """

    def __init__(self, server, limit: int = 0, primary: Any = None):
        super().__init__(limit, primary)
        self.server = server

    def _route(self, url: str) -> str | None:
        import asyncio
        from urllib.parse import urlsplit

        base = self.server.url
        if not base or not url.startswith(base + "/"):
            return None
        try:
            if asyncio.get_running_loop() is not self.server._loop:
                return None
        except RuntimeError:
            return None
        return urlsplit(url).path

    async def _local(self, method: str, route: str, url: str, body: object) -> _Response:
        import json

        status, out = await self.server.handle(method, route, body)
        return _Response(status, json.dumps(out).encode(), url)

    async def post(self, url: str, json=None, headers=None) -> _Response:
        route = self._route(url)
        if route is None:
            return await super().post(url, json=json, headers=headers)
        import json as _json

        return await self._local("POST", route, url, _json.loads(_json.dumps(json)))

    async def get(self, url: str, headers=None) -> _Response:
        route = self._route(url)
        if route is None:
            return await super().get(url, headers=headers)
        return await self._local("GET", route, url, None)


def install_http_client(args, server=None) -> None:
    """slime's ``init_http_client(args)``, then its httpx pool swapped for :class:`AiohttpClient` (or, given
    the tiny server, :class:`InProcessClient`)."""
    from slime.utils import http_utils

    http_utils.init_http_client(args)
    limit = http_utils._client_concurrency  # the pool size slime's own init computed (its formula varies by version)
    from slime.utils.async_utils import get_async_loop

    primary = get_async_loop().loop
    http_utils._http_client = (AiohttpClient(limit=limit, primary=primary) if server is None
                               else InProcessClient(server, limit=limit, primary=primary))
