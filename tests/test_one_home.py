"""One home per concept: fencing (Fenced, EXIT_FENCED, the commander's epoch variable), stopping a
process group, process parentage and the `ray start` argv are each defined once in the package.
An AST scan, so a second definition (a copy that drifts) fails here."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import trainstack

PKG = Path(trainstack.__file__).parent


@functools.lru_cache(maxsize=1)
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
    assert _class_defs("Fenced") == ["trainstack/fencing/fence.py"]
    assert _assignments("EXIT_FENCED") == ["trainstack/fencing/fence.py"]
    assert not (PKG / "hub" / "fence.py").exists()  # the Hub's fence checks live with the lease and checkpoints


def test_the_commander_epoch_is_named_once() -> None:
    assert _string_uses("TRAINSTACK_COMMANDER_EPOCH") == ["trainstack/fencing/fence.py"]
    assert _function_defs("epoch_superseded") == ["trainstack/fencing/fence.py"]


def test_the_hub_push_raises_the_one_fenced() -> None:
    from trainstack.fencing import fence
    from trainstack.hub import push, sync

    assert push.Fenced is fence.Fenced and sync.Fenced is fence.Fenced


# The fakes live outside the package (devtools/trainstack_dev, not scanned here); nothing in the package
# but procgroup may spell the parent-death option.
FAKES = "trainstack/fakes/"


def test_process_groups_and_parentage_have_one_home() -> None:
    for name in ("stop_group", "kill_group", "die_with_parent", "with_parent_death", "pid_alive", "group_members"):
        assert _function_defs(name) == ["trainstack/procgroup.py"], name
    assert [m for m in _string_uses("--pdeathsig") if not m.startswith(FAKES)] == ["trainstack/procgroup.py"]
    prctl = [mod for mod, tree in _modules().items() for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and n.attr == "prctl"]
    assert prctl == ["trainstack/procgroup.py"]


def test_one_ray_start_argv() -> None:
    assert _string_uses("--block") == ["trainstack/launch/ray_start.py"]
    assert _function_defs("ray_start_argv") == ["trainstack/launch/ray_start.py"]


def test_ray_start_argv_for_a_head_and_a_joining_node() -> None:
    from trainstack.launch.ray_start import gcs_port, ray_start_argv

    head = ray_start_argv("127.0.0.1", 2, 0, "/tmp/tsray-x", dashboard_port=8265)
    assert head[1:4] == ["start", "--block", "--head"] and "--dashboard-port=8265" in head
    assert "--dashboard-host=127.0.0.1" in head and 0 < gcs_port(head) < 65536
    node = ray_start_argv("127.0.0.3", 4, 1, "/tmp/tsray-y", address="127.0.0.2:6379", resources={"r1": 1})
    assert "--address=127.0.0.2:6379" in node and "--head" not in node and '--resources={"r1": 1}' in node
    slurm_head = ray_start_argv("127.0.0.2", 4, 1, "/tmp/tsray-z")
    assert "--include-dashboard=false" in slurm_head
    ports = [a for a in head if a.endswith("-port=" + a.rsplit("=", 1)[-1]) and "dashboard-port" not in a]
    assert len({p.rsplit("=", 1)[1] for p in ports}) == len(ports)  # every port its own


def test_one_run_record_type_per_boundary() -> None:
    """compare's view of a run and the commander's row were both `RunRecord`: two boundaries, two names."""
    assert _class_defs("RunRecord") == ["trainstack/reports/compare.py"]
    assert _class_defs("CommanderRun") == ["trainstack/commander/store.py"]
    assert _class_defs("ReportedProgress") == ["trainstack/run/rundir/progress.py"]


def test_reported_progress_is_what_the_worker_sends_and_the_commander_reads(tmp_path: Path) -> None:
    from trainstack.run.rundir import RunDir
    from trainstack.run.rundir.progress import ReportedProgress
    from trainstack.launch.lium_worker import progress

    rd = RunDir(tmp_path)
    rd.update_status(state="running", num_rollout=9)
    sent = progress(tmp_path)
    assert sent == {"state": "running", "last_checkpoint": None, "rollouts": None, "num_rollout": 9, "reward": None}
    rd.update_status(hub={"commit": "abc123", "last_pushed": 4})
    sent = progress(tmp_path)
    assert sent["hub_commit"] == "abc123" and sent["hub_pushed"] == 4
    assert ReportedProgress.from_json(sent).to_json() == sent
    odd = ReportedProgress.from_json({"last_checkpoint": True, "reward": "x", "rollouts": 3, "extra": 1})
    assert odd.last_checkpoint is None and odd.reward is None and odd.rollouts == 3
    assert ReportedProgress.from_json(None) == ReportedProgress()
