"""Files a command writes where the user asked (`output=`, `render -o`, `compare --plot/--csv`):
checked before anything is written, so a bad path is one message naming the option and the fix
(not an IsADirectoryError after half the work), and written with their parent directories."""
from __future__ import annotations

import os
from pathlib import Path

from trainstack.errors import ConfigError, ConfigErrors


def output_problem(path: str, key: str, suffixes: tuple[str, ...] = ()) -> ConfigError | None:
    """Why `path` cannot be written as a file (None when it can); `suffixes`: the accepted file types."""
    if not path or not path.strip():
        return ConfigError(key, "is empty", f"give a file path, e.g. {key}=out{suffixes[0] if suffixes else '.json'}",
                           value=path)
    p = Path(path).expanduser()
    if p.is_dir() or path.endswith(os.sep):
        return ConfigError(key, f"{path} is a directory; a file path is needed",
                           f"name a file in it, e.g. {os.path.join(path, 'out' + (suffixes[0] if suffixes else '.json'))}",
                           value=path)
    if suffixes and p.suffix.lower() not in suffixes:
        return ConfigError(key, f"{path}: unsupported file type {p.suffix or '(none)'}",
                           f"end the name with one of: {', '.join(suffixes)}", value=path)
    base = p.parent
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        return ConfigError(key, f"{base} is a file, so {path} cannot be created", "choose a path under a directory",
                           value=path)
    if not os.access(base, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        return ConfigError(key, f"{p if p.exists() else base} is not writable", "choose a writable location",
                           value=path)
    try:
        if os.statvfs(base).f_flag & os.ST_RDONLY:
            return ConfigError(key, f"{base} is on a read-only filesystem", "choose a writable location", value=path)
    except OSError:
        pass
    if not p.exists():  # permissions say yes, the filesystem may still say no (/proc, /sys): ask it
        why = cannot_create_in(base)
        if why:
            return ConfigError(key, f"no file can be created in {base} ({why})", "choose a writable location",
                               value=path)
    return None


def cannot_create_in(directory: Path) -> str:
    """Why no file can be created in `directory` ("" when one can): a probe file, removed at once."""
    probe = directory / f".trainstack-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return ""
    except OSError as ex:
        return ex.strerror or str(ex)
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return ""


def prepare(path: str) -> Path:
    """Create the parent directories of a checked output path; the path to write."""
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def write_text(path: str, text: str, key: str = "output") -> None:
    """Write a checked output; a failure the checks could not foresee is still one message."""
    try:
        prepare(path).write_text(text, encoding="utf-8")
    except OSError as ex:
        raise ConfigErrors([ConfigError(key, f"{path} cannot be written ({ex.strerror or ex})",
                                        "choose a writable location", value=path)]) from None
