"""Latest complete checkpoint lookup in slime's layout."""
from trainstack.checkpoints import inspect


def make_iter(save, n, files=("meta.json", "model.pt")):
    d = save / f"iter_{n:07d}"
    d.mkdir(parents=True)
    for f in files:
        (d / f).write_bytes(b"x")


def test_no_tracker_means_fresh(tmp_path):
    make_iter(tmp_path, 3)
    st = inspect(str(tmp_path))
    assert st.tracker is None and not st.resumable and not st.problem


def test_tracker_and_complete_iter(tmp_path):
    make_iter(tmp_path, 3)
    make_iter(tmp_path, 7)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("7")
    assert inspect(str(tmp_path)).latest_complete == 7


def test_newer_partial_iter_without_tracker_update_is_ignored(tmp_path):
    make_iter(tmp_path, 3)
    make_iter(tmp_path, 4, files=("model.pt",))  # killed mid-save: no meta.json, tracker still says 3
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3")
    assert inspect(str(tmp_path)).latest_complete == 3


def test_tracker_pointing_at_partial_iter_is_a_problem(tmp_path):
    make_iter(tmp_path, 4, files=("model.pt",))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    st = inspect(str(tmp_path))
    assert not st.resumable and "incomplete" in st.problem


def test_megatron_torch_dist_marker(tmp_path):
    make_iter(tmp_path, 19, files=("__0_0.distcp", ".metadata", "common.pt"))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("19\n")
    assert inspect(str(tmp_path)).latest_complete == 19
