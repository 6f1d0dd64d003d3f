"""Is `pkg.module.attr` importable by the trainer, found without importing it? Importing a user's
module may start work (a reward server, a GPU context), and slime's modules need GPUs; so the
module file is looked up on the trainer's search path and its top level is read for the name."""
from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainstack.errors import ConfigError

# trainstack's own plugin packages that moved: old dotted prefix -> new one. The old name would only
# fail in slime's workers (an ImportError deep in a rollout); the dry run names the new one instead.
RENAMED = {"plugins.http_env": "trainstack_plugins.http_env"}


def renamed(dotted: str) -> str | None:
    """The current name of a dotted path into a renamed trainstack plugin package (None: not renamed)."""
    for old, new in RENAMED.items():
        if dotted == old or dotted.startswith(old + "."):
            return new + dotted[len(old):]
    return None


def _prefix(dotted: str) -> str:
    return next(old for old in RENAMED if dotted == old or dotted.startswith(old + "."))


def renamed_plugin_paths(ctx: Any) -> list[ConfigError]:  # ctx: validate.Ctx (validate imports this module)
    """Rule (validate.RULES): an argument naming a renamed plugin package gets the new name, on every
    launcher (the host checks that look plugins up are deferred on remote ones)."""
    out = []
    for dest, value in ctx.run.args.items():
        for v in value if isinstance(value, list) else [value]:
            new = renamed(v) if isinstance(v, str) else None
            if new is not None:
                old = _prefix(v)
                out.append(ctx.err(dest, f"{v!r} is in a package trainstack renamed: {old} is now {RENAMED[old]}",
                                   f"write {new}"))
    return out


def locate(dotted: str, roots: list[str]) -> str:
    """Why `pkg.module.attr` cannot be imported ("" when its module file defines `attr`)."""
    module, _, attr = dotted.rpartition(".")
    if not module or not attr or not all(part.isidentifier() for part in dotted.split(".")):
        return "not a dotted path package.module.name"
    if module in sys.builtin_module_names:
        return ""
    parts = module.split(".")
    for base in [Path(root, *parts) for root in roots] + _installed(parts):
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return "" if _defines(candidate, attr) else f"{candidate} defines no {attr!r}"
        if base.is_dir() and ((base / f"{attr}.py").is_file() or (base / attr / "__init__.py").is_file()):
            return ""  # a namespace package holding a submodule named attr
        for ext in _extension_suffixes():
            if base.with_name(base.name + ext).is_file():
                return ""  # compiled: cannot look inside
    new = renamed(dotted)
    return f"renamed: use {new!r}" if new else f"no module {module!r} on the trainer's PYTHONPATH"


def _installed(parts: list[str]) -> list[Path]:
    """Where this interpreter's import system puts a top-level package that no path entry holds (an
    editable install's finder, a .pth hook): located with find_spec, which imports nothing for a
    top-level name."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(loc, *parts[1:]) for loc in spec.submodule_search_locations]
    if spec.origin and len(parts) == 1:
        return [Path(spec.origin).with_suffix("")]
    return []


def _extension_suffixes() -> list[str]:
    import importlib.machinery

    return list(importlib.machinery.EXTENSION_SUFFIXES)


def _defines(path: Path, name: str) -> bool:
    """Does a module define `name` at top level (def, class, assignment, import; or export it
    dynamically with __getattr__ or a star import, which we then trust)? Answered once per file
    version (a sweep preflights the same plugins at every point)."""
    try:
        st = path.stat()
    except OSError:
        return True  # the trainer's import will report it; we cannot tell
    return _defines_in(str(path), name, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _defines_in(file: str, name: str, _mtime_ns: int, _size: int) -> bool:
    path = Path(file)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return True  # the trainer's import will report it; we cannot tell
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in (name, "__getattr__"):
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and n.id == name:
                        return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*" or (alias.asname or alias.name.split(".")[0]) == name:
                    return True
        if isinstance(node, (ast.If, ast.Try)):  # conditional definitions: trust them
            if any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name for n in ast.walk(node)):
                return True
            if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(node)):
                return True
    return False
