"""Where trainstack keeps a cache of its own for this user: `$XDG_CACHE_HOME/trainstack/<name>`, else
`~/.cache/trainstack/<name>`. Each cache has an environment variable that names another directory, or
`0` for none (kept verdicts of plugin probes, kept compositions)."""
from __future__ import annotations

import os
from pathlib import Path


def base() -> str:
    """The user's cache directory (`$XDG_CACHE_HOME`, else `~/.cache`)."""
    return os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")


def cache_dir(own_env: str, name: str) -> Path | None:
    """The directory of cache `name`; `$own_env` overrides it (`0`: keep nothing on disk, None)."""
    own = os.environ.get(own_env)
    if own == "0":
        return None
    if own:
        return Path(own)
    return Path(base(), "trainstack", name)
