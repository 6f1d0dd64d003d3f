"""Which checkpoint a resume loads: the completeness rule (manifest sizes, Megatron markers, data
cursors), fallback to the newest complete checkpoint, and recovery that makes the save dir say
exactly that (docs/resume.md)."""
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainstack.storage.checkpoints import Manifest, inspect, plan_recovery, problem_of
from trainstack.storage.layout import INCOMPLETE_DIR, TRACKER

TINY_FILES = ("model.pt", "optimizer.pt", "scheduler.pt", "rng.pt", "meta.json")


def make_iter(save, n, files=TINY_FILES, manifest=False, cursor=False):
    d = save / f"iter_{n:07d}"
    d.mkdir(parents=True)
    rel = []
    for f in files:
        (d / f).write_bytes(json.dumps({"rollout_id": n}).encode() if f == "meta.json" else b"x" * (n + 3))
        rel.append(f"iter_{n:07d}/{f}")
    if cursor:
        (save / "rollout").mkdir(exist_ok=True)
        (save / "rollout" / f"global_dataset_state_dict_{n}.pt").write_bytes(b"c" * 5)
        rel.append(f"rollout/global_dataset_state_dict_{n}.pt")
    if manifest:
        (d / "manifest.json").write_text(Manifest.of_files(str(save), n, rel, "test").to_json())
    return d


def track(save, n):
    (save / TRACKER).write_text(str(n))


def test_empty_dir_is_fresh(tmp_path):
    st_ = inspect(str(tmp_path))
    assert st_.tracker is None and not st_.resumable and not st_.problem and plan_recovery(st_) is None


def test_tracker_and_complete_iter(tmp_path):
    make_iter(tmp_path, 3)
    make_iter(tmp_path, 7)
    track(tmp_path, 7)
    st_ = inspect(str(tmp_path))
    assert st_.latest_complete == 7 and plan_recovery(st_) is None


def test_newer_unpublished_iter_is_never_loaded_and_moved_aside(tmp_path):
    make_iter(tmp_path, 3)
    make_iter(tmp_path, 4, files=("model.pt",))  # killed mid-save: tracker still says 3
    track(tmp_path, 3)
    st_ = inspect(str(tmp_path))
    assert st_.latest_complete == 3 and st_.unpublished == (4,)
    plan_recovery(st_).apply(str(tmp_path))
    assert not (tmp_path / "iter_0000004").exists()
    assert [p.name.split(".")[0] for p in (tmp_path / INCOMPLETE_DIR).iterdir()] == ["iter_0000004"]
    assert plan_recovery(inspect(str(tmp_path))) is None


def test_tracker_naming_a_partial_iter_falls_back_to_the_newest_complete(tmp_path):
    make_iter(tmp_path, 2)
    make_iter(tmp_path, 4, files=("model.pt",))
    track(tmp_path, 4)
    st_ = inspect(str(tmp_path))
    assert st_.latest_complete == 2 and "iter_0000004" in st_.problem
    plan_recovery(st_).apply(str(tmp_path))
    assert (tmp_path / TRACKER).read_text() == "2" and not (tmp_path / "iter_0000004").exists()


def test_truncated_file_is_caught_by_the_manifest(tmp_path):
    make_iter(tmp_path, 1, TINY_FILES, manifest=True, cursor=True)
    d = make_iter(tmp_path, 3, TINY_FILES, manifest=True, cursor=True)
    track(tmp_path, 3)
    assert inspect(str(tmp_path)).latest_complete == 3
    (d / "model.pt").write_bytes(b"x")  # truncated
    st_ = inspect(str(tmp_path))
    assert st_.latest_complete == 1 and "model.pt has 1 bytes" in st_.problem


def test_missing_optimizer_or_cursor_makes_a_checkpoint_incomplete(tmp_path):
    make_iter(tmp_path, 1, TINY_FILES, manifest=True, cursor=True)
    d = make_iter(tmp_path, 3, TINY_FILES, manifest=True, cursor=True)
    track(tmp_path, 3)
    (d / "optimizer.pt").unlink()
    assert "optimizer.pt is missing" in problem_of(str(tmp_path), 3)
    assert inspect(str(tmp_path)).latest_complete == 1
    (d / "optimizer.pt").write_bytes(b"x" * 6)
    (tmp_path / "rollout" / "global_dataset_state_dict_3.pt").unlink()
    assert "global_dataset_state_dict_3.pt is missing" in problem_of(str(tmp_path), 3)


def test_megatron_torch_dist_marker_and_cursor(tmp_path):
    make_iter(tmp_path, 19, files=("__0_0.distcp", ".metadata", "common.pt"), cursor=True)
    track(tmp_path, 19)
    assert inspect(str(tmp_path)).latest_complete == 19
    make_iter(tmp_path, 39, files=("__0_0.distcp", ".metadata", "common.pt"))  # saved, cursor not yet written
    track(tmp_path, 39)
    st_ = inspect(str(tmp_path))
    assert st_.latest_complete == 19 and "data cursor" in st_.problem


def test_deleted_tracker_is_recovered_from_complete_iters_never_a_fresh_start(tmp_path):
    make_iter(tmp_path, 3, TINY_FILES, manifest=True)
    make_iter(tmp_path, 5, TINY_FILES, manifest=True)
    make_iter(tmp_path, 7, files=("model.pt",))
    st_ = inspect(str(tmp_path))
    assert st_.latest_complete == 5 and "missing" in st_.problem
    plan_recovery(st_).apply(str(tmp_path))
    assert (tmp_path / TRACKER).read_text() == "5" and (tmp_path / "iter_0000003").exists()


def test_garbage_tracker_or_manifest(tmp_path):
    make_iter(tmp_path, 2, TINY_FILES, manifest=True)
    (tmp_path / TRACKER).write_text("not-a-number")
    assert inspect(str(tmp_path)).latest_complete == 2
    d = make_iter(tmp_path, 4, TINY_FILES, manifest=True)
    track(tmp_path, 4)
    (d / "manifest.json").write_text("{garbage")
    st_ = inspect(str(tmp_path))
    assert st_.latest_complete == 2 and "unreadable" in st_.problem


def test_staging_leftovers_are_moved_aside(tmp_path):
    make_iter(tmp_path, 2, TINY_FILES, manifest=True)
    track(tmp_path, 2)
    (tmp_path / ".iter_0000004.staging.123.abc").mkdir()
    st_ = inspect(str(tmp_path))
    assert st_.latest_complete == 2 and st_.leftovers == (".iter_0000004.staging.123.abc",)
    plan_recovery(st_).apply(str(tmp_path))
    assert not (tmp_path / ".iter_0000004.staging.123.abc").exists()


@settings(max_examples=60, deadline=None)
@given(n_iters=st.integers(1, 5), tracker_at=st.integers(-1, 5),
       damage=st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["truncate", "delete", "manifest", "rmdir"])),
                       max_size=4))
def test_any_damage_resumes_from_a_complete_checkpoint_or_none(tmp_path_factory, n_iters, tracker_at, damage):
    """Property: whatever was damaged, the resume plan names a checkpoint that is complete (never one
    a loader would trip on), never one newer than the tracker, and after recovery nothing newer is left."""
    save = tmp_path_factory.mktemp("save")
    for i in range(n_iters):
        make_iter(save, i, TINY_FILES, manifest=True, cursor=True)
    if 0 <= tracker_at < n_iters:
        track(save, tracker_at)
    for i, kind in damage:
        d = save / f"iter_{i:07d}"
        if not d.exists():
            continue
        if kind == "truncate" and (d / "model.pt").exists():
            (d / "model.pt").write_bytes(b"")
        elif kind == "delete" and (d / "rng.pt").exists():
            (d / "rng.pt").unlink()
        elif kind == "manifest":
            (d / "manifest.json").write_text(json.dumps({"nonsense": 1}))
        elif kind == "rmdir":
            for f in d.iterdir():
                f.unlink()
            d.rmdir()
    st_ = inspect(str(save))
    if st_.latest_complete is not None:
        assert problem_of(str(save), st_.latest_complete) is None
        if st_.tracker is not None:
            assert st_.latest_complete <= st_.tracker
    rec = plan_recovery(st_)
    if rec is not None:
        rec.apply(str(save))
    after = inspect(str(save))
    assert after.latest_complete == st_.latest_complete and plan_recovery(after) is None
    names = {p.name for p in save.iterdir() if p.name.startswith("iter_")}
    assert all(int(n[5:]) <= (st_.latest_complete if st_.latest_complete is not None else -1) for n in names)
    assert os.path.exists(save / TRACKER) == (st_.latest_complete is not None)


def hashed_iter(save, n, epoch=None):
    """A tiny checkpoint as the tiny trainer writes it: sizes and SHA-256 of every file in the manifest."""
    import hashlib

    d = make_iter(save, n, TINY_FILES, cursor=True)
    rel = [f"iter_{n:07d}/{f}" for f in TINY_FILES] + [f"rollout/global_dataset_state_dict_{n}.pt"]
    sums = {r: hashlib.sha256((save / r).read_bytes()).hexdigest() for r in rel}
    (d / "manifest.json").write_text(Manifest.of_files(str(save), n, rel, "test", epoch, sums).to_json())
    return d


@pytest.mark.parametrize("victim", ["model.pt", "optimizer.pt", "rng.pt", "scheduler.pt", "meta.json", "cursor"])
def test_same_size_corruption_falls_back_to_the_previous_checkpoint(tmp_path, victim):
    hashed_iter(tmp_path, 1)
    d = hashed_iter(tmp_path, 3)
    track(tmp_path, 3)
    assert inspect(str(tmp_path), verify=True).latest_complete == 3
    path = tmp_path / "rollout" / "global_dataset_state_dict_3.pt" if victim == "cursor" else d / victim
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF  # same size, other bytes: the sizes alone cannot tell
    path.write_bytes(bytes(data))
    assert inspect(str(tmp_path)).latest_complete == 3  # status (sizes only) is cheap and cannot see it
    st_ = inspect(str(tmp_path), verify=True)
    assert st_.latest_complete == 1 and "does not match its checksum" in st_.problem
    plan_recovery(st_).apply(str(tmp_path))  # never a crash loop: the next plan is clean
    assert plan_recovery(inspect(str(tmp_path), verify=True)) is None


@pytest.mark.parametrize("victim", ["optimizer.pt", "rng.pt", "scheduler.pt", "cursor"])
def test_without_a_manifest_every_required_file_must_be_there(tmp_path, victim):
    """Unverified readers (status) still judge a manifest-less tiny checkpoint by its files; the
    resume plan (verify) never loads one: a deleted manifest is a failed verification (issue #36)."""
    hashed_iter(tmp_path, 1)
    d = hashed_iter(tmp_path, 3)
    track(tmp_path, 3)
    (d / "manifest.json").unlink()
    assert inspect(str(tmp_path)).latest_complete == 3  # all there: status still counts it
    verified = inspect(str(tmp_path), verify=True)
    assert verified.latest_complete == 1 and "has no manifest.json, so its files cannot be verified" in verified.problem
    (tmp_path / "rollout" / "global_dataset_state_dict_3.pt" if victim == "cursor" else d / victim).unlink()
    st_ = inspect(str(tmp_path))
    assert st_.latest_complete == 1 and "has no manifest and lacks" in st_.problem


def test_the_tiny_trainer_writes_checksums_and_a_staged_cursor(tmp_path):
    from trainstack.tiny.checkpoint import TrainState, save_checkpoint

    state = TrainState(model={"w": 1}, optimizer={"o": 2}, scheduler={"s": 3}, rng={"r": 4}, meta={"m": 5})
    save_checkpoint(str(tmp_path), 2, state, cursor=b"cursor")
    m = Manifest.read(str(tmp_path), 2)
    assert set(m.sha256) == set(m.files) and "rollout/global_dataset_state_dict_2.pt" in m.files
    assert os.listdir(tmp_path / "rollout") == ["global_dataset_state_dict_2.pt"]  # no staging leftover
    assert problem_of(str(tmp_path), 2, verify=True) is None


class _Run:
    def __init__(self, run_dir, allow=()):
        from trainstack.config.schema import HubSpec, ResumeSpec

        self.run_id, self.run_dir, self.inputs = "r1", str(run_dir), {}
        self.args = {"save": str(run_dir / "checkpoints"), "num_rollout": 10}
        self.resume, self.hub = ResumeSpec(allow_changes=list(allow)), HubSpec()


def test_a_lost_checkpoint_dir_of_a_run_that_recorded_checkpoints_is_refused(tmp_path):
    from trainstack.errors import ConfigErrors
    from trainstack.run.resume import FRESH, plan
    from trainstack.run.rundir import RunDir

    rd = RunDir(tmp_path)
    assert plan(_Run(tmp_path), rd).action == FRESH  # a new run
    rd.update_status(state="interrupted", last_checkpoint=None)
    rd.event("resume", from_rollout=5, checkpoint=4)
    with pytest.raises(ConfigErrors) as exc:
        plan(_Run(tmp_path), rd)
    text = str(exc.value.errors[0].__dict__)
    assert "up to rollout 4" in text and "is gone" in text and "resume.mode=fresh" in text
    assert plan(_Run(tmp_path, allow=["checkpoints"]), rd).action == FRESH  # explicit consent (older spelling)


def test_a_staged_cursor_of_a_killed_save_is_moved_aside(tmp_path):
    hashed_iter(tmp_path, 2)
    track(tmp_path, 2)
    (tmp_path / "rollout" / "global_dataset_state_dict_3.pt.staging.99.abc").write_bytes(b"half")
    st_ = inspect(str(tmp_path))
    assert st_.latest_complete == 2 and st_.leftovers == ("rollout/global_dataset_state_dict_3.pt.staging.99.abc",)
    plan_recovery(st_).apply(str(tmp_path))
    assert os.listdir(tmp_path / "rollout") == ["global_dataset_state_dict_2.pt"]
    assert plan_recovery(inspect(str(tmp_path), verify=True)) is None


def test_the_resume_plan_verifies_content_and_falls_back(tmp_path):
    from trainstack.run.resume import RESUME, plan
    from trainstack.run.rundir import RunDir

    save = tmp_path / "checkpoints"
    hashed_iter(save, 1)
    d = hashed_iter(save, 3)
    track(save, 3)
    assert plan(_Run(tmp_path), RunDir(tmp_path)).from_rollout == 4
    data = bytearray((d / "rng.pt").read_bytes())
    data[-1] ^= 1
    (d / "rng.pt").write_bytes(bytes(data))
    rp = plan(_Run(tmp_path), RunDir(tmp_path))
    assert rp.action == RESUME and rp.from_rollout == 2 and "rng.pt does not match its checksum" in rp.checkpoint.problem


def test_without_a_manifest_meta_json_names_what_the_save_wrote(tmp_path):
    """--no-save-optim: the tiny trainer's meta.json lists the files it saved, so a checkpoint whose
    manifest is gone still counts as complete without optimizer.pt; an unreadable meta.json does not."""
    from trainstack.tiny.checkpoint import TrainState, save_checkpoint

    state = TrainState(model={"w": 1}, optimizer=None, scheduler={"s": 3}, rng={"r": 4}, meta={"m": 5})
    save_checkpoint(str(tmp_path), 2, state, cursor=b"cursor")
    (tmp_path / "iter_0000002" / "manifest.json").unlink()
    assert problem_of(str(tmp_path), 2, needs_cursor=True) is None
    (tmp_path / "iter_0000002" / "rng.pt").unlink()
    assert "lacks rng.pt" in problem_of(str(tmp_path), 2, needs_cursor=True)
    (tmp_path / "iter_0000002" / "meta.json").write_bytes(b"\xff" * 10)
    assert "meta.json is unreadable" in problem_of(str(tmp_path), 2, needs_cursor=True)


@pytest.mark.parametrize("lost", ["args.json", "none"])
def test_a_changed_config_is_refused_with_args_json_deleted(tmp_path, lost):
    """The resume check reads spec.json as well as args.json: deleting args.json no longer lets a
    changed lr resume silently (it did: the plan compared against args.json only)."""
    import json

    from trainstack.errors import ConfigErrors
    from trainstack.run.resume import RESUME, plan
    from trainstack.run.rundir import RunDir

    save = tmp_path / "checkpoints"
    hashed_iter(save, 3)
    track(save, 3)
    before = {"save": str(save), "num_rollout": 10, "lr": 1e-6}
    (tmp_path / "spec.json").write_text(json.dumps({"run_id": "r1", "args": before}))
    if lost != "args.json":
        (tmp_path / "args.json").write_text(json.dumps(before))
    run = _Run(tmp_path)
    run.args = {**before, "lr": 2e-6}
    with pytest.raises(ConfigErrors) as exc:
        plan(run, RunDir(tmp_path))
    assert "lr" in str(exc.value.errors[0].__dict__)
    allowed = _Run(tmp_path, allow=["lr"])
    allowed.args = run.args
    assert plan(allowed, RunDir(tmp_path)).action == RESUME
