"""The suite's own wiring: in a full run, `conftest` in sys.modules may be tests/tiny/conftest.py
(pytest imports every conftest under that name), so tests import tests/conftest.py's helpers at
module level, while their file is collected, never inside a test function (found by CI: passes
alone, fails in the full suite)."""
from __future__ import annotations

import re

from conftest import ROOT


def test_conftest_helpers_are_imported_at_module_level():
    late = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "tests").rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if re.match(r"\s+from conftest import", line)]
    assert late == [], "move these imports to the top of their file:\n" + "\n".join(late)
