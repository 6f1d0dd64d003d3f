"""Every `slime <file>.py:<lines>` citation in the rule modules is checked against slime's source: the cited lines
of the pin's checkout say what the rule ports (trainstack/upstream/cited.py `says`), and the rule's version range
(`holds`) is exactly the versions of the window whose file says it. Runs on the `slime/` submodule (the pin) and,
where the bundle is here (CI), on worktrees of v0.3.1 and v0.3.0."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from trainstack.upstream.cited import CITED, PIN, WINDOW, holds

RULE_MODULES = ("upstream_rules", "megatron_rules", "range_rules", "switch_rules", "validate")
# a citation of slime's source: "slime utils/arguments.py:2008", "megatron_utils/arguments.py:153",
# "sglang_rollout.py:106-107, 181-182" (Megatron's training/arguments.py and transformer_config.py are not slime's)
CITATION = re.compile(r"(?P<file>[\w/]*(?:utils/arguments|ray/rollout|sglang_rollout|megatron_utils/\w+|"
                      r"sglang_utils/\w+)\.py):(?P<lines>\d+(?:-\d+)?(?:, \d+(?:-\d+)?)*)")


def _norm(text: str) -> str:
    return " ".join(text.split())


def citations() -> list[tuple[str, str, str, str]]:
    """(module, enclosing def or assigned name, cited file suffix, lines) of every slime citation."""
    out = []
    for mod in RULE_MODULES:
        owner = ""
        for line in (ROOT / "trainstack" / "rules" / f"{mod}.py").read_text().splitlines():
            m = re.match(r"(?:async )?def (\w+)|(\w+) = ", line)
            if m:
                owner = m.group(1) or m.group(2)
            for c in CITATION.finditer(line):
                if c.start() >= 9 and line[c.start() - 9:c.start()] == "training/":
                    continue
                for lines in c.group("lines").split(", "):
                    out.append((mod, owner, c.group("file"), lines))
    return out


def test_every_slime_citation_has_an_entry():
    found = citations()
    assert len(found) >= 10, found
    missing = []
    for mod, owner, file, lines in found:
        cites = CITED.get((mod, owner), ())
        if not any(c.file.endswith(file) and c.lines == lines for c in cites):
            missing.append(f"{mod}.{owner}: {file}:{lines}")
    assert not missing, f"citations of slime's source without an entry in trainstack/upstream/cited.py: {missing}"


def _cited_text(root: Path, file: str, lines: str) -> str:
    text = (root / file).read_text(encoding="utf-8").splitlines()
    first, _, last = lines.partition("-")
    lo, hi = int(first), int(last or first) + 3  # a single cited line may open a statement of a few lines
    return _norm("\n".join(text[lo - 1:hi]))


@pytest.mark.parametrize("key", sorted(CITED), ids=lambda k: f"{k[0]}.{k[1]}")
def test_the_cited_lines_say_what_the_rule_ports(key):
    root = ROOT / "slime"
    if not (root / "slime" / "__init__.py").is_file():
        pytest.skip("the slime/ submodule is empty")
    for c in CITED[key]:
        assert _norm(c.says) in _cited_text(root, c.file, c.lines), (
            f"{key[0]}.{key[1]} cites slime {c.file}:{c.lines}, which no longer says {c.says!r}: re-read the rule "
            "against slime's source and update the citation (trainstack/upstream/cited.py)")


def test_the_version_ranges_are_the_versions_whose_source_says_it(tmp_path):
    from test_slime_window import _bundle

    bundle = _bundle()
    if bundle is None:
        pytest.skip("../shared/upstream's slime bundle is not here (CI has it)")
    from trainstack.upstream.versions import known_tables

    commits = {k.name: k.commit for k in known_tables() if k.origin == "packaged"}
    assert set(commits) == set(WINDOW)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--bare", str(bundle), str(clone)], check=True, timeout=120)
    wrong = []
    for key, cites in CITED.items():
        for c in cites:
            for version in WINDOW:
                show = subprocess.run(["git", "-C", str(clone), "show", f"{commits[version]}:{c.file}"],
                                      capture_output=True, text=True)
                says = show.returncode == 0 and _norm(c.says) in _norm(show.stdout)
                if says != (version in c.holds):
                    wrong.append(f"{key[1]}: {c.file} at {version} {'says' if says else 'lacks'} {c.says!r}")
    assert not wrong, wrong


def test_a_rule_applies_only_to_the_versions_it_holds_for():
    assert holds("weight_sync_settings", PIN) and not holds("weight_sync_settings", "v0.3.0")
    assert holds("mtp_training", "v0.3.0") and holds("lr_floor", "v0.3.0")  # no slime citation: everywhere
    assert holds("weight_sync_settings", "a-table-built-by-sync")  # outside the window: every rule
