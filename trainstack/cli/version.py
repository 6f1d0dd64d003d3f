"""`trainstack --version`: the package version and the slime commit its argument table was read from
(the two things that decide which argv a config renders to)."""
from __future__ import annotations

import argparse
import sys


def version_text() -> str:
    from trainstack import __version__
    from trainstack.upstream.argtable import load_table

    return f"trainstack {__version__} (slime argument table at commit {load_table().slime_commit})"


class VersionAction(argparse.Action):
    """Like argparse's `version`, but the table is read only when the flag is given (the CLI stays fast)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text(), file=sys.stdout, flush=True)
        parser.exit(0)
