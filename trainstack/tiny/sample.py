"""``Sample`` on the tiny backend is slime's own ``slime.utils.types.Sample`` (from the submodule).

Kept as an import path for code and tests written against the tiny backend; there is no copy.
"""
from __future__ import annotations

from . import slime_upstream

slime_upstream.load()

from slime.utils.types import Sample  # noqa: E402

__all__ = ["Sample"]
