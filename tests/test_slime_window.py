"""slime as its users have it: a window of versions (the pin, v0.3.1, v0.3.0), each checked against the real thing.

The bundle in ../shared/upstream holds slime's history; it is cloned once per module and each version is a
worktree of that clone. At each version: the table trainstack builds from slime's own parser code (on the
replayed Megatron/SGLang layers) equals the packaged one, and at the pin the one slime's real parser
recorded; the upstream-contract test passes; the CPU default trains 2 rollouts through that slime's rollout
code. A run on a v0.3.0 checkout uses v0.3.0's table, and a flag of one version that the run's slime renamed
gets the new name and the version.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, run_py
from trainstack.upstream import argtable
from trainstack.errors import ConfigErrors
from trainstack.upstream import build, renames, versions


def _packaged() -> dict[str, versions.Known]:
    return {k.name: k for k in versions.known_tables() if k.origin == "packaged"}


PACKAGED = _packaged()
PIN = versions.pin()
OLDER = sorted(n for n in PACKAGED if n != PIN.name)  # v0.3.0, v0.3.1


def _bundle() -> Path | None:
    name = f"slime-{PIN.commit[:8]}.bundle"
    for up in (ROOT.parent, ROOT.parent.parent):
        if (up / "shared" / "upstream" / name).is_file():
            return up / "shared" / "upstream" / name
    return None


@pytest.fixture(scope="module")
def checkouts(tmp_path_factory) -> dict[str, Path]:
    """{version: worktree} for every packaged table, from one clone of the bundle (CI has it; elsewhere: skip)."""
    bundle = _bundle()
    if bundle is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: ../shared/upstream/slime-{PIN.commit[:8]}.bundle is missing")
        pytest.skip("../shared/upstream's slime bundle is not here (CI has it)")
    base = tmp_path_factory.mktemp("slime-window")
    clone = base / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(bundle), str(clone)], check=True, timeout=120)
    out = {}
    for name, known in PACKAGED.items():
        wt = base / name
        subprocess.run(["git", "-C", str(clone), "worktree", "add", "-q", "--detach", str(wt), known.commit],
                       check=True, timeout=120)
        out[name] = wt
    return out


@pytest.fixture
def restore_table():
    yield
    argtable.use_table(None)


# --- the table: built from slime's own code, at every version ------------------------------------------


@pytest.mark.parametrize("name", sorted(PACKAGED))
def test_the_table_built_from_each_checkout_equals_the_packaged_one(checkouts, name):
    """At the pin the packaged table is the real parser's recording (`sync_slime args`, 6 GB stack): the build
    without that stack must give the same actions, byte for byte; v0.3.x's packaged tables are such builds."""
    doc = build.build(checkouts[name])
    packaged = versions.read_table(PACKAGED[name].path)
    assert doc["arguments"] == packaged["arguments"]
    assert doc["meta"]["slime_sources"] == packaged["meta"]["slime_sources"]
    assert versions.identify(checkouts[name]) == PACKAGED[name]


def test_the_window_is_the_pin_and_two_releases():
    assert {PACKAGED[n].commit for n in OLDER} == {"a6272da0d4f3d0a08520c99a2f3b4f6c887960dc",
                                                 "bf14dc21f9500746447f2572d0692e981c4d2a7e"}
    # the releases differ from the pin where slime changed: v0.3.0 lacks the pin's renamed flags
    v030 = argtable.ArgTable(versions.read_table(PACKAGED["v0.3.0"].path))
    assert "update_weight_encoding" in v030 and "update_weight_delta_encoding" not in v030


# --- a run uses its checkout's table; renames are named -------------------------------------------------


def test_a_run_on_a_v0_3_0_checkout_uses_v0_3_0s_table(checkouts, restore_table):
    from trainstack.render.pipeline import build_from_overrides

    overrides = ["experiment=qwen3-4B-grpo-dapo", f"slime.root={checkouts['v0.3.0']}",
                 "args.update_weight_encoding=deltas"]
    run, cmd = build_from_overrides(overrides)
    assert "--update-weight-encoding" in cmd.argv and argtable.load_table().meta["slime_version"] == "v0.3.0"
    with pytest.raises(ConfigErrors) as err:  # the pin's name is not v0.3.0's
        build_from_overrides([*overrides[:2], "args.update_weight_delta_encoding=deltas"])
    (e,) = err.value.errors
    assert "renamed it: did you mean 'args.update_weight_encoding'?" in e.fix and "slime v0.3.0" in e.fix


def test_a_v0_3_0_flag_the_pin_renamed_gets_the_new_name_and_the_version(restore_table):
    from trainstack.render.pipeline import build_from_overrides

    with pytest.raises(ConfigErrors) as err:
        build_from_overrides(["experiment=qwen3-4B-grpo-dapo", "args.update_weight_delta_dir=/tmp/x"])
    (e,) = err.value.errors
    assert e.key == "args.update_weight_delta_dir"
    assert e.fix == ("'args.update_weight_delta_dir' is slime v0.3.0 (bf14dc21)'s name for it; slime "
                     f"{PIN.name}, which this run uses, renamed it: did you mean 'args.update_weight_disk_dir'?")


_V030 = argtable.ArgTable(versions.read_table(PACKAGED["v0.3.0"].path))
_GONE = sorted(d for d in _V030.dests() if d not in argtable.load_table(str(argtable.TABLE_PATH)))


@settings(max_examples=len(_GONE), deadline=None)
@given(st.sampled_from(_GONE))
def test_every_dest_the_pin_lacks_is_named_as_another_versions(dest):
    """The class: any dest of v0.3.0 missing at the pin gets a hint naming v0.3.0 (renamed or removed), never
    the plain `not a slime argument` alone; a rename names a dest the pin has and v0.3.0 lacks."""
    table = argtable.load_table(str(argtable.TABLE_PATH))
    hint = renames.hint_for_dest(dest, table, "args.")
    assert hint is not None and "slime v0.3.0" in hint and f"'args.{dest}'" in hint
    found = renames.history(dest, table)
    assert found is not None
    if found[1] is not None:
        assert found[1] in table and found[1] not in _V030


# --- the contract and the CPU default at each version -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", OLDER)
def test_the_upstream_contract_holds_at(checkouts, name):
    env = {**os.environ, "TRAINSTACK_CONTRACT_SLIME": str(checkouts[name]), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "-m", "not slow",
                           str(ROOT / "tests" / "test_upstream_contract.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("name", OLDER)
def test_the_cpu_default_trains_two_rollouts_at(checkouts, name, tmp_path):
    root = str(checkouts[name])
    res = run_py("env.num_rollout=2", f"paths.runs_root={tmp_path}", cwd=tmp_path,
                 env={"SLIME_ROOT": root, "TRAINSTACK_SLIME_ROOT": root})
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout + res.stderr
    assert f"[tiny] rollout: slime {name} (" in out and "rollout 2/2" in out, out[-2000:]


# --- `trainstack slime sync`: any checkout, into the user cache, picked up by later runs --------------------


def test_sync_builds_a_new_slimes_table_that_later_runs_use(checkouts, tmp_path, restore_table, monkeypatch):
    """A slime trainstack has no table for (v0.3.1 plus one flag) is refused by content; after
    `trainstack slime sync` the run is rendered with that checkout's own table, new flag included."""
    import shutil

    root = tmp_path / "slime-next"
    shutil.copytree(checkouts["v0.3.1"], root, ignore=shutil.ignore_patterns(".git"))
    args_py = root / "slime" / "utils" / "arguments.py"
    text = args_py.read_text()
    anchor = '            parser.add_argument("--actor-num-nodes", type=int, default=1, help="Number of nodes for training actor")\n'
    assert anchor in text
    args_py.write_text(text.replace(anchor, anchor + '            parser.add_argument("--brand-new-knob", type=int, default=3)\n'))
    from trainstack.upstream.select import checkout_problems

    env = {"TRAINSTACK_CACHE": str(tmp_path / "cache")}
    assert "trainstack slime sync --slime-root" in checkout_problems(root)[0].fix
    res = subprocess.run([sys.executable, "-m", "trainstack.cli.main", "slime", "sync", "--slime-root", str(root),
                          "--name", "next"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert "added    --brand-new-knob" in res.stdout and "removed  --freeze-indexer" in res.stdout  # v0.3.1 lacks it
    monkeypatch.setenv("TRAINSTACK_CACHE", env["TRAINSTACK_CACHE"])
    assert checkout_problems(root) == []
    assert versions.identify(root).name == "next"
    from trainstack.render.pipeline import build_from_overrides

    _, cmd = build_from_overrides(["experiment=qwen3-4B-grpo-dapo", f"slime.root={root}", "args.brand_new_knob=5"])
    assert cmd.argv[cmd.argv.index("--brand-new-knob") + 1] == "5"


def test_trainstack_args_looks_flags_up_in_the_slime_root_names(checkouts):
    def args(flag: str, root: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "trainstack.cli.main", "args", flag], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "SLIME_ROOT": str(root), "PYTHONPATH": str(ROOT)})

    assert args("--update-weight-encoding", checkouts["v0.3.0"]).returncode == 0
    pin = args("--update-weight-encoding", checkouts[PIN.name])
    assert pin.returncode == 2 and "did you mean 'update_weight_delta_encoding'?" in pin.stderr
