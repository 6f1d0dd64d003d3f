"""Which checkpoint a resume loads: the completeness rule (manifest sizes, Megatron markers, data
cursors), fallback to the newest complete checkpoint, and recovery that makes the save dir say
exactly that (docs/resume.md)."""
import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from trainstack.checkpoints import Manifest, inspect, plan_recovery, problem_of
from trainstack.rundir.layout import INCOMPLETE_DIR, TRACKER

TINY_FILES = ("model.pt", "optimizer.pt", "scheduler.pt", "rng.pt", "meta.json")


def make_iter(save, n, files=TINY_FILES, manifest=False, cursor=False):
    d = save / f"iter_{n:07d}"
    d.mkdir(parents=True)
    rel = []
    for f in files:
        (d / f).write_bytes(b"x" * (n + 3))
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
