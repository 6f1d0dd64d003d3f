"""A single run's composition, kept on disk between runs.

Hydra composes the whole tree for every run: it scans every installed `hydra_plugins` module (~30 ms),
then reads, merges and checks the files (~70 ms), a quarter of a launch's own cost. Most of a command
line only sets values (`run_id=...`, `algo.lr=2e-6`), which Hydra applies after composing. So, as a sweep
does (trainstack/config/sweep_cache.py), what is kept is the *base*: the tree composed with the
structural overrides only (group choices and their deletions, `hydra.*`, packages); a run applies the
others to it with Hydra's own code, in their order (`trainstack.config.hydra_entry`). Two entries:
- the *groups* entry, keyed by the world below and the overrides that are structural by their form:
  the config groups that exist (what tells `model=...` from `algo.lr=...`);
- the *base* entry, keyed by that and the group choices: the composed base config.

The world: this module's format, the interpreter, Hydra's and OmegaConf's versions, the config name,
the task name, the version base, the working directory, the environment variables and warning options
that change what composing says, every `sys.path` entry (a `pip install` changes its directory), and
every file under the code that registers configs (trainstack's package and every `hydra_plugins`
portion: names, sizes, mtimes). Kept with each entry: the same stamps of every file under each config
source the composition read (`hydra.runtime.config_sources`); a lookup checks them.

What is never kept: a composition that warned (a hit would not warn again), one that copied environment
variables into the config (`hydra.job.env_copy`: values, maybe secrets), a verbose one (Hydra's debug
output), one with a source this module cannot stamp, a tree that extends its search path
(`hydra.searchpath`: hydra_entry composes it whole), and one whose stamped files changed within the
last RACY_S seconds (a file rewritten within its mtime's granularity would look unchanged: git's racy
rule; measured from the start of the composition, so a file changed while it was read is never kept
as read). Nor are the values resolvers cached while composing (Hydra reads `${now:...}` then): a run
resolves them anew. Entries are read only from a directory the user owns that no one else can write.

`TRAINSTACK_COMPOSE_CACHE=0` keeps nothing; a path puts the entries there. Default:
`$XDG_CACHE_HOME/trainstack/compose`. At most KEEP entries, the oldest removed first.
May import: the stdlib, OmegaConf and storage/ (Hydra and trainstack's package are read from sys.modules,
where the caller has imported them).
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import stat
import sys
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

CACHE_ENV = "TRAINSTACK_COMPOSE_CACHE"
FORMAT = 1
KEEP = 128
RACY_S = 2.0
_STORING: list[Any] = []  # store_soon's threads not yet waited for
_STORING_AT_EXIT: list[bool] = []  # wait_stored registered with atexit (once)
# what decides whether composing warns or raises instead (hydra/_internal/deprecation_warning.py, defaults_list.py)
ENV_KEYS = ("HYDRA_DEPRECATION_WARNINGS_AS_ERRORS", "SELF_WARNING_AS_ERROR", "PYTHONWARNINGS")


@dataclass(frozen=True)
class World:
    """What `Hydra.compose_config` is asked besides the overrides and the files."""

    config_name: str
    task_name: str
    version_base: str | None


@dataclass(frozen=True)
class Key:
    """An entry's name and the newest mtime among the code files it stamps (for the racy rule)."""

    name: str
    newest_ns: int

    def sub(self, lines: list[str]) -> "Key":
        """The key of an entry under this one, for these override lines."""
        text = json.dumps([self.name, lines])
        return Key(hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=20).hexdigest(),
                   self.newest_ns)


def cache_dir() -> Path | None:
    from trainstack.storage.user_cache import cache_dir as user_cache_dir

    return user_cache_dir(CACHE_ENV, "compose")


def _walk(root: str, out: list[str]) -> int:
    """Stamps of every file under `root` (names, sizes, mtimes; `__pycache__` left out) into out; the newest mtime."""
    newest = 0
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        out.append("-")  # missing (or not a directory): stamped as such, so its arrival is a change
        return 0
    for e in entries:
        if e.name == "__pycache__":
            continue
        try:
            if e.is_dir(follow_symlinks=True):
                out.append(e.name + "/")
                newest = max(newest, _walk(e.path, out))
                out.append("..")
            else:
                st = e.stat()
                out.append(f"{e.name}:{st.st_size}:{st.st_mtime_ns}")
                newest = max(newest, st.st_mtime_ns)
        except OSError:
            out.append(e.name + ":?")
    return newest


def stamp(roots: list[str]) -> tuple[str, int]:
    """One digest of the files under `roots`, and the newest mtime among them."""
    out: list[str] = []
    newest = 0
    for root in roots:
        out.append("@" + root)
        newest = max(newest, _walk(root, out))
    return hashlib.blake2b("\n".join(out).encode("utf-8", "surrogateescape"), digest_size=16).hexdigest(), newest


def _code_roots() -> list[str]:
    """The code whose import registers configs (ConfigStore entries) before trainstack composes."""
    roots: list[str] = []
    ts_file = getattr(sys.modules.get("trainstack"), "__file__", None)
    if ts_file:
        roots.append(os.path.dirname(os.path.abspath(ts_file)))
    try:
        import hydra_plugins

        roots += sorted(str(p) for p in hydra_plugins.__path__ if os.path.isdir(p))
    except ImportError:
        pass
    return roots


def key(world: World) -> Key | None:
    """The key of this world in this process; None when nothing is kept."""
    if cache_dir() is None:
        return None
    hydra, omegaconf = sys.modules.get("hydra"), sys.modules.get("omegaconf")
    if hydra is None or omegaconf is None:
        return None
    paths = []
    for p in sys.path:
        try:
            paths.append(f"{p}:{os.stat(p or '.').st_mtime_ns}")
        except OSError:
            paths.append(f"{p}:-")
    code, newest = stamp(_code_roots())
    parts = [FORMAT, sys.version, sys.executable, hydra.__version__, omegaconf.__version__, world.config_name,
             world.task_name, world.version_base, os.getcwd(), [os.environ.get(k) for k in ENV_KEYS],
             list(sys.warnoptions), paths, code]
    text = json.dumps(parts, default=str)
    return Key(hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=20).hexdigest(), newest)


def _usable(d: Path) -> bool:
    """Ours and writable by no one else: an entry is unpickled, so nobody else may have written it."""
    try:
        st = os.stat(d)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _read(k: Key | None, suffix: str) -> Any | None:
    """The kept object of entry `k` when every source it read is unchanged; None otherwise (a miss)."""
    d = cache_dir()
    if k is None or d is None or not _usable(d):
        return None
    try:
        with open(d / f"{k.name}.{suffix}", "rb") as f:
            if os.fstat(f.fileno()).st_uid != os.getuid():
                return None
            head = json.loads(f.readline())
            if head.get("format") != FORMAT or stamp(head["sources"])[0] != head["stamp"]:
                return None
            return pickle.load(f)
    except Exception:  # noqa: BLE001 - missing, torn, foreign or from another version: compose instead
        return None


def load_groups(k: Key | None) -> frozenset[str] | None:
    """The config groups that exist for the world and form-structural overrides of `k`."""
    got = _read(k, "groups")
    return got if isinstance(got, frozenset) and all(isinstance(g, str) for g in got) else None


def load_base(k: Key | None) -> Any | None:
    """The base config kept for `k` (world, form-structural overrides, group choices), a fresh copy."""
    return _read(k, "base")


def _source_roots(cfg: Any) -> list[str] | None:
    """The directories of every config source the composition read; None when one cannot be stamped."""
    import importlib.util

    roots: list[str] = []
    for src in cfg.hydra.runtime.config_sources:
        if src.schema == "file":
            roots.append(os.path.abspath(src.path))
        elif src.schema == "pkg":
            try:
                spec = importlib.util.find_spec(src.path)
            except (ImportError, ValueError):
                return None
            if spec is None or not spec.submodule_search_locations:
                return None
            roots += [p for p in spec.submodule_search_locations if os.path.isdir(p)]
        elif src.schema != "structured":  # ConfigStore: its code is in the key
            return None
    return roots


@dataclass(frozen=True)
class Entry:
    """A composition to keep: its base pickled as composed, and the directories of its sources."""

    body: bytes
    roots: tuple[str, ...]


def snapshot(base: Any, warned: bool) -> Entry | None:
    """`base` as composed (take it before anyone changes it), when it may be kept; None otherwise."""
    if warned or cache_dir() is None:
        return None
    try:
        from omegaconf import OmegaConf

        if base.hydra.verbose or base.hydra.job.env_copy:
            return None  # debug output; environment values
        roots = _source_roots(base)
        if roots is None:
            return None
        resolved = OmegaConf.get_cache(base)  # `${now:...}` resolved while composing: a run resolves it anew
        OmegaConf.clear_cache(base)
        try:
            return Entry(pickle.dumps(base, protocol=pickle.HIGHEST_PROTOCOL), tuple(roots))
        finally:
            OmegaConf.set_cache(base, resolved)
    except Exception:  # noqa: BLE001 - a config pickle refuses: compose next time too
        return None


def store(groups_key: Key | None, groups: frozenset[str], base_key: Key | None, entry: Entry | None,
          composed_from_ns: int) -> None:
    """Keep the groups and the base of a composition that started at `composed_from_ns`, unless a file it
    stamps changed since RACY_S before that (it may have been read either way). Best effort: nothing here
    fails a run (a full or read-only disk keeps nothing)."""
    d = cache_dir()
    if groups_key is None or base_key is None or entry is None or d is None:
        return
    try:
        digest, newest = stamp(list(entry.roots))
        if max(newest, base_key.newest_ns) > composed_from_ns - int(RACY_S * 1e9):
            return
        head = json.dumps({"format": FORMAT, "sources": list(entry.roots), "stamp": digest}).encode() + b"\n"
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _usable(d):
            return
        for name, body in ((f"{groups_key.name}.groups", pickle.dumps(frozenset(groups))),
                           (f"{base_key.name}.base", entry.body)):
            fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{name}.")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(head + body)
                os.replace(tmp, d / name)
            except BaseException:
                os.unlink(tmp)
                raise
        _prune(d)
    except Exception:  # noqa: BLE001 - see above
        pass


def store_soon(*args: Any) -> None:
    """`store` in a thread of its own: stamping and writing overlap the run's checks (a few ms of a miss).
    The process's exit waits for it (an atexit join, at most 2 s; pipes.exit_now runs atexit handlers)."""
    import atexit
    import threading

    thread = threading.Thread(target=store, args=args, name="compose-cache-store", daemon=True)
    if not _STORING_AT_EXIT:
        atexit.register(wait_stored)
        _STORING_AT_EXIT.append(True)
    _STORING.append(thread)
    thread.start()


def wait_stored(timeout_s: float = 2.0) -> None:
    """Until what `store_soon` started is written (or `timeout_s` passed)."""
    while _STORING:
        _STORING.pop().join(timeout_s)


def _prune(d: Path) -> None:
    entries = []
    for e in os.scandir(d):
        if e.name.endswith((".groups", ".base")):
            try:
                entries.append((e.stat().st_mtime_ns, e.path))
            except OSError:
                pass
    for _, path in sorted(entries)[:-KEEP]:
        try:
            os.unlink(path)
        except OSError:
            pass


@contextmanager
def noting_warnings() -> Iterator[list[bool]]:
    """Whether a warning was shown inside (shown as before): such a composition is not kept."""
    shown: list[bool] = []
    before = warnings.showwarning

    def note(*args: Any, **kwargs: Any) -> None:
        shown.append(True)
        before(*args, **kwargs)

    warnings.showwarning = note
    try:
        yield shown
    finally:
        if warnings.showwarning is note:
            warnings.showwarning = before
