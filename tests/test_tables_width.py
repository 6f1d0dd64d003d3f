"""Every table fits 80 columns without cutting a word: at COLUMNS=80 no line of `status` or `compare`
is wider, a header or a value folds only after `.`, `_`, `-`, `/` or `=` (never `cluster.num_nod` /
`es`), status and rollouts stay in compare, and status rows do not grow to 7 lines from folded log
paths. Over the class of cells (hypothesis): a folded cell is never wider than its column and reads
back as the same words."""
from __future__ import annotations

import json
import re

from hypothesis import given, settings, strategies as st

from tests.fakes import write_run_dir, write_sweep
from tests.test_diff import cli
from tests.test_status import make_run
from trainstack.terminal.tables import SOFT_BREAK, SOFT_CHARS, wrap_cell

SLURM_SWEEP = [("1e-06", 1), ("3e-06", 2), ("1e-05", 4)]


def slurm_like_sweep(root):
    made = []
    for lr, nodes in SLURM_SWEEP:
        ov = ["experiment=qwen3-4B-grpo-dapo", "cluster=slurm_8xh100", f"algo.lr={lr}", f"cluster.num_nodes={nodes}",
              f"args.rollout_batch_size={32 * nodes}", f"run_id=slurm-sweep-lr-{nodes}n"]
        curves = {"rollout/raw_reward": [(i, 0.1 * i) for i in range(6)], "eval/aime": [(0, 0.1), (5, 0.2)]}
        d, run = write_run_dir(root / "runs", ov, curves, state="finished")
        made.append((d, run, ov))
    return write_sweep(root, "sw", made)


def words_whole(out: str, words: list[str]) -> None:
    """Each word is on one line, or split only after a soft break."""
    flat = out.replace("┃", " ").replace("│", " ")
    for word in words:
        parts = [p for p in SOFT_BREAK.split(word) if p]
        assert all(p in flat for p in parts), (word, out)


def test_compare_of_a_slurm_sweep_at_80_columns(in_tmp, monkeypatch):
    sweep_dir = slurm_like_sweep(in_tmp)
    code, js, err = cli("compare", str(sweep_dir), "--json")
    assert code == 0, err
    assert json.loads(js)["varying_keys"] == ["cluster.num_nodes", "algo.lr", "args.rollout_batch_size"]
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = cli("compare", str(sweep_dir))
    assert code == 0, err
    assert max(len(ln) for ln in out.splitlines()) <= 80, out
    header = " ".join(ln for ln in out.splitlines() if ln.startswith("┃"))
    for col in ("run_id", "status", "rollouts", "algo.lr"):
        assert col in header, (col, out)
    assert "cluster.num_nod " not in header and "nod\n" not in out  # no word split inside a part
    words_whole(out, ["cluster.num_nodes", "rollout/raw_reward", "slurm-sweep-lr-4n", "finished"])


def test_status_rows_stay_short_with_jobs_and_long_overrides(tmp_path, monkeypatch, capsys):
    from trainstack.cli.main import main

    for i in range(3):
        varying = [f"algo.lr=0.00{i + 1}", f"cluster.num_nodes={2 ** i}", f"args.rollout_batch_size={32 * 2 ** i}"]
        make_run(tmp_path, f"qwen3-4B-grpo-dapo-{i}n-0123abcd", varying,
                 "running", i, [0.1, 0.2], job_id=f"42{i}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("PATH", "/nonexistent")  # no squeue here: the scheduler column says so
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= 80, out
    body = [ln for ln in lines if ln.startswith("│")]
    assert len(body) <= 3 * 5, out  # a line per override at most (it was 7 with folded log paths)
    assert "trainer.log" not in out  # the log path is left out at 80 (named under the table), not folded
    words_whole(out, ["qwen3-4B-grpo-dapo-2n-0123abcd", "running"])
    if "varying" in out.split("left out")[0]:
        words_whole(out, ["rollout_batch_size", "num_nodes"])


CELL = st.lists(st.text(st.sampled_from("abc._-=/:, "), min_size=1, max_size=30), min_size=1, max_size=4).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(text=CELL, width=st.integers(1, 30))
def test_a_folded_cell_fits_and_keeps_its_words(text, width):
    folded = wrap_cell(text, width)
    assert all(len(ln) <= width for ln in folded.splitlines())
    assert re.sub(r"\s+", "", folded) == re.sub(r"\s+", "", text)


def test_compare_reads_the_state_status_reads(tmp_path, monkeypatch, capsys):
    """A Lium run whose status.json still says `submitted` while its launcher (the commander) knows it
    finished: status and compare both say finished (they once said 6 rollouts finished vs submitted)."""
    from trainstack.reports import compare
    from trainstack import registry
    from trainstack.reports.status import collect, fill

    d = make_run(tmp_path, "on-a-pod", ["algo.lr=1"], "submitted", 5, [0.1] * 6, target=6,
                 status_says={"launcher": "lium"})
    real_get = registry.get

    from trainstack.launch.base import Launcher

    class Commander(Launcher):  # the interface's defaults (fetch_traces: nothing to bring back), status as lium's
        def status(self, rows):
            for r in rows:
                r.state = "finished"

    monkeypatch.setattr(registry, "get", lambda name: Commander() if name == "lium" else real_get(name))
    (row,) = fill(collect([str(d)], str(tmp_path / "runs")))
    (rec,) = compare.collect([str(d)], None, tmp_path / "runs")
    assert row.state == rec.state == "finished" and rec.rollouts() == row.rollouts == 6


PATHISH = st.lists(st.text(alphabet="abc/._-", min_size=1, max_size=30), min_size=1, max_size=6).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(text=PATHISH, width=st.integers(12, 60), indent=st.integers(0, 6))
def test_folded_text_breaks_a_word_only_after_a_soft_break(text, width, indent):
    """The dry run's free text (summary, tree, notes) and flag cells: a word longer than a line (a path) is
    folded after `/`, `.`, `-`, `_`, never inside a part that fits a line; no line is wider; nothing is lost."""
    from trainstack.terminal.tables import fold

    lines = fold(text, width, " " * indent, " " * (indent + 2))
    assert all(len(ln) <= width for ln in lines), lines
    assert re.sub(r"\s+", "", "".join(lines)) == re.sub(r"\s+", "", text)
    where = [i for i, ch in enumerate(text) if not ch.isspace()]  # the text's index of each printed character
    room = width - indent - 2
    seen = 0
    for ln in lines[:-1]:
        seen += len(ln.replace(" ", ""))
        end = where[seen - 1]
        if end + 1 < len(text) and not text[end + 1].isspace():  # folded inside a word
            word_start = text.rfind(" ", 0, end) + 1
            part = next(p for p in _spans(text[word_start:].split(" ")[0], word_start) if p[0] <= end < p[1])
            assert text[end] in SOFT_CHARS or part[1] - part[0] > room, (text, lines)


def _spans(word: str, start: int) -> list[tuple[int, int]]:
    out, at = [], start
    for p in SOFT_BREAK.split(word):
        if p:
            out.append((at, at + len(p)))
            at += len(p)
    return out
