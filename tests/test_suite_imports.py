"""The suite's own wiring: tests import helpers with `from conftest import ...`, which means the
module named `conftest` in sys.modules. A second conftest.py below tests/ takes that name when pytest
loads it first (a test passed alone and failed in the full suite, or the other way round), so there
is one conftest.py, and tests import its helpers at module level."""
from __future__ import annotations

import re

from conftest import ROOT


def test_one_conftest_for_the_suite():
    assert sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("conftest.py")) == ["tests/conftest.py"]


def test_conftest_helpers_are_imported_at_module_level():
    late = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "tests").rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if re.match(r"\s+from conftest import", line)]
    assert late == [], "move these imports to the top of their file:\n" + "\n".join(late)
