"""compare reads a finished run's metrics digest (metrics/digest.py) instead of its series: the same table,
to the last digit, while every file it was read from is unchanged; a changed, added or corrupt file and
the series are read again."""
from __future__ import annotations

import json
import math
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes import write_run_dir, write_sweep
from tests.test_compare import EXP, curves
from tests.test_diff import cli
from trainstack.reports.compare import lower_is_better, summarise
from trainstack.metrics import digest
from trainstack.run.rundir.progress import rollouts_of
from trainstack.run.rundir.summary import refresh

values = st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=32), st.just(math.nan), st.sampled_from([0.5, 1.0]))
series_st = st.dictionaries(
    st.sampled_from(["rollout/raw_reward", "train/loss", "eval/aime", "perf/step_time", "rollout/entropy"]),
    st.lists(st.tuples(st.integers(0, 50).map(float), values), max_size=12), max_size=5)


@settings(max_examples=300, deadline=None)
@given(series=series_st, last_checkpoint=st.one_of(st.none(), st.integers(0, 60)))
def test_a_digest_answers_what_the_series_answer(series, last_checkpoint):
    """Final, best (the first on ties, NaN left out, lower-is-better metrics), their steps, and rollouts
    trained: from the digest, after a JSON round trip, exactly what compare computes from the series."""
    stored = json.loads(json.dumps(digest.of_series(series)))
    for name, pts in series.items():
        assert digest.summary(stored[name], lower_is_better(name)) == summarise(pts, name)
    from trainstack.reports.compare import RunRecord

    rec = RunRecord(run_id="r", run_dir=None, config={}, last_checkpoint=last_checkpoint)
    rec.condense_from_digest("tensorboard", stored, lambda m: True)
    assert rec.rollouts_done == rollouts_of(series, last_checkpoint)
    assert rec.metric_names == set(series)


def _sweep(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    made = []
    for i, lr in enumerate((1e-6, 3e-6)):
        ov = [f"experiment={EXP}", f"algo.lr={lr}"]
        d, run = write_run_dir(tmp_path / "runs", ov, curves(0.05 * (i + 1)))
        made.append((d, run, ov))
    return write_sweep(tmp_path, "lr", made), [d for d, _, _ in made]


def _table(sweep) -> tuple[str, str]:
    code, out, err = cli("compare", str(sweep), "--json")
    assert code == 0, err
    code, text, err = cli("compare", str(sweep), "--metric", "*")
    assert code == 0, err
    return out, text


def test_compare_reads_the_digest_and_shows_the_same_table(tmp_path, monkeypatch):
    sweep, dirs = _sweep(tmp_path, monkeypatch)
    from_files = _table(sweep)
    for d in dirs:
        refresh(d)  # what the lifecycle does when the run ends: summary.json, and its metrics' digest
        assert digest.load(d) is not None and digest.load(d)[0] == "tensorboard"
    assert _table(sweep) == from_files
    # the digest is what compare read: a digest that lies shows (in a test only: it is never hand-made)
    path = dirs[0] / digest.FILE
    data = json.loads(path.read_text())
    data["metrics"]["rollout/raw_reward"]["final"][1] = 0.123456
    path.write_text(json.dumps(data))
    assert "0.123456" in _table(sweep)[0]


def test_a_changed_added_or_corrupt_file_means_the_files_are_read_again(tmp_path, monkeypatch):
    sweep, dirs = _sweep(tmp_path, monkeypatch)
    from_files = _table(sweep)
    d = dirs[0]
    for change in ("touch", "eval", "corrupt", "version"):
        refresh(d)
        path = d / digest.FILE
        data = json.loads(path.read_text())
        data["metrics"]["rollout/raw_reward"]["final"][1] = 0.123456  # would show if the digest were used
        path.write_text(json.dumps(data))
        if change == "touch":  # a resumed run wrote its event file again
            ev = next((d / "tensorboard").rglob("events.out.tfevents.*"))
            os.utime(ev, ns=(ev.stat().st_atime_ns, ev.stat().st_mtime_ns + 1_000_000))
        elif change == "eval":  # `trainstack eval` added results since
            (d / "evals.jsonl").write_text("")
        elif change == "corrupt":
            path.write_text('{"version": 1, "metrics": ')
        else:
            path.write_text(json.dumps({**data, "version": 99}))
        assert digest.load(d) is None, change
        assert _table(sweep) == from_files, change
        (d / "evals.jsonl").unlink(missing_ok=True)


def test_a_running_run_gets_no_digest_and_a_jsonl_one_is_read_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d, _ = write_run_dir(tmp_path / "runs", [f"experiment={EXP}"], curves(0.1), state="running")
    refresh(d)
    assert not (d / digest.FILE).exists()
    j, _ = write_run_dir(tmp_path / "runs2", [f"experiment={EXP}"], curves(0.1), tensorboard=False)
    refresh(j)
    assert digest.load(j)[0] == "jsonl"
    with open(j / "metrics.jsonl", "a") as f:
        f.write("{not json\n")
    digest.write(j)  # made again from the corrupt file: compare still reads (and names) the file itself
    code, out, err = cli("compare", str(j))
    assert code == 2 and "metrics.jsonl" in err, (out, err)


def test_a_current_digest_is_not_made_again(tmp_path, monkeypatch):
    """Every status change and event of an ended run refreshes its summary: its metric files are decoded once."""
    sweep, dirs = _sweep(tmp_path, monkeypatch)
    refresh(dirs[0])
    made = (dirs[0] / digest.FILE).stat().st_mtime_ns

    def refuse(*a, **k):
        raise AssertionError("the metric files were read again")
    monkeypatch.setattr("trainstack.metrics.read_local", refuse)
    refresh(dirs[0])
    assert (dirs[0] / digest.FILE).stat().st_mtime_ns == made
