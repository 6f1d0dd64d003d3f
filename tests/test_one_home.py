"""One home per concept: fencing (Fenced, EXIT_FENCED, the commander's epoch variable), stopping a
process group, process parentage and the `ray start` argv are each defined once in the package.
An AST scan, so a second definition (a copy that drifts) fails here."""
from __future__ import annotations

import ast
from pathlib import Path

import trainstack

PKG = Path(trainstack.__file__).parent


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(PKG.parent)): ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted(PKG.rglob("*.py"))}


def _class_defs(name: str) -> list[str]:
    return [mod for mod, tree in _modules().items()
            for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name]


def _assignments(name: str) -> list[str]:
    out = []
    for mod, tree in _modules().items():
        for n in ast.walk(tree):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
            out += [mod for t in targets if isinstance(t, ast.Name) and t.id == name]
    return out


def _string_uses(text: str) -> list[str]:
    return sorted({mod for mod, tree in _modules().items()
                   for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value == text})


def _function_defs(name: str) -> list[str]:
    return [mod for mod, tree in _modules().items()
            for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]


def test_one_fenced_exception_and_one_exit_code() -> None:
    assert _class_defs("Fenced") == ["trainstack/fence.py"]
    assert _assignments("EXIT_FENCED") == ["trainstack/fence.py"]
    assert not (PKG / "hub" / "fence.py").exists()  # the Hub's fence checks live with the lease and checkpoints


def test_the_commander_epoch_is_named_once() -> None:
    assert _string_uses("TRAINSTACK_COMMANDER_EPOCH") == ["trainstack/fence.py"]
    assert _function_defs("epoch_superseded") == ["trainstack/fence.py"]


def test_the_hub_push_raises_the_one_fenced() -> None:
    from trainstack import fence
    from trainstack.hub import push, sync

    assert push.Fenced is fence.Fenced and sync.Fenced is fence.Fenced
