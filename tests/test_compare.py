"""`trainstack compare`: varying keys from resolved configs, metrics from every local source, sort,
plot, CSV/JSON, groups, bad input; and the docs/compare.md walkthrough on real tiny-trainer runs."""
from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes import write_run_dir, write_sweep
from tests.test_diff import cli

ROOT = Path(__file__).resolve().parents[1]
EXP = "qwen3-4B-grpo-dapo"
LRS = (1e-6, 3e-6, 1e-5)


def curves(rate: float) -> dict:
    return {"rollout/raw_reward": [(i, round(min(1.0, 0.1 + rate * i), 4)) for i in range(6)],
            "eval/aime": [(0, 0.1), (5, round(0.1 + rate, 4))],
            "train/loss": [(i, round(1.0 / (i + 1 + rate), 4)) for i in range(6)]}


RATES = {1e-6: 0.05, 3e-6: 0.12, 1e-5: 0.02}  # 3e-6 learns fastest, 1e-5 slowest


@pytest.fixture
def sweep(in_tmp):
    made = []
    for lr in LRS:
        ov = [f"experiment={EXP}", f"algo.lr={lr}"]
        d, run = write_run_dir(in_tmp / "runs", ov, curves(RATES[lr]), state="finished" if lr != 1e-5 else "failed")
        made.append((d, run, ov))
    return write_sweep(in_tmp, "lr", made), {lr: run.run_id for lr, (_, run, _) in zip(LRS, made)}


def table_json(*argv: str) -> dict:
    code, out, err = cli("compare", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_table_from_sweep(sweep):
    sweep_dir, ids = sweep
    t = table_json(str(sweep_dir))
    assert t["varying_keys"] == ["algo.lr"]  # found from the resolved configs, not hand-listed
    assert t["metrics"] == ["rollout/raw_reward", "eval/aime"]  # the defaults: raw_reward and eval/*
    rows = {r["run_id"]: r for r in t["rows"]}
    for lr, rid in ids.items():
        r, rate = rows[rid], RATES[lr]
        assert r["config"]["algo.lr"] == lr
        assert r["rollouts"] == 6 and r["status"] == ("failed" if lr == 1e-5 else "finished")
        assert r["metrics"]["rollout/raw_reward"]["final"] == pytest.approx(min(1, 0.1 + rate * 5), rel=1e-6)
        assert r["metrics"]["eval/aime"]["best"] == pytest.approx(0.1 + rate, rel=1e-6)
    code, out, _ = cli("compare", str(sweep_dir), "--wide")
    assert code == 0 and "algo.lr" in out and "rollout/raw_reward final" in out and "eval/aime best" in out
    assert all(rid in out for rid in ids.values())


@pytest.mark.parametrize("columns", [80, 100])
def test_table_is_readable_at_the_terminal_width(sweep, monkeypatch, columns):
    """Every value shown whole (never `0.…`); what does not fit is left out by priority and named."""
    sweep_dir, ids = sweep
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = cli("compare", str(sweep_dir))
    assert code == 0
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= columns, out
    assert "…" not in out
    for lr, rid in ids.items():  # the run, the swept value and the final reward, each whole
        final = f"{min(1, 0.1 + RATES[lr] * 5):.4g}"
        row = [ln for ln in lines if ln.startswith("│") and f" {final} " in ln]
        assert row, (final, out)
        assert any(rid[:10] in ln for ln in lines) and f"{lr:.4g}" in out
    assert "algo.lr" in out and "rollouts" in out
    hidden = re.search(r"left out to fit \d+ columns: (.*); --wide shows all", " ".join(lines))
    if columns == 80:
        assert hidden and "eval/aime best" in hidden.group(1)
    code, wide, _ = cli("compare", str(sweep_dir), "--wide")
    assert "eval/aime best" in wide and "left out" not in wide


def test_a_dest_is_one_column_whatever_group_set_it(in_tmp):
    """The tiny model preset sets lr; a run with algo.lr=2e-3 on the command line overrides it: one
    `algo.lr` column with both values (the preset's run is not `-`)."""
    a, run_a = write_run_dir(in_tmp / "runs", [], curves(0.05))
    b, run_b = write_run_dir(in_tmp / "runs", ["algo.lr=2e-3"], curves(0.1))
    for d, run in ((a, run_a), (b, run_b)):  # what the lifecycle writes: the resolved args
        (d / "args.json").write_text(json.dumps(run.args, default=str))
    sweep_dir = write_sweep(in_tmp, "lr-mixed", [(a, run_a, []), (b, run_b, ["algo.lr=2e-3"])])
    t = table_json(str(sweep_dir))
    assert t["varying_keys"] == ["algo.lr"]
    assert [r["config"]["algo.lr"] for r in t["rows"]] == [0.001, 0.002]
    for d in (a, b):  # without args.json (older run dirs): the same, from config.yaml and provenance.json
        (d / "args.json").unlink()
    t = table_json(str(sweep_dir))
    assert t["varying_keys"] == ["algo.lr"] and [r["config"]["algo.lr"] for r in t["rows"]] == [0.001, 0.002]


def test_sort_and_lower_is_better(sweep):
    sweep_dir, ids = sweep
    t = table_json(str(sweep_dir), "--sort", "rollout/raw_reward", "--desc", "-m", "rollout/*", "-m", "train/loss")
    assert [r["run_id"] for r in t["rows"]] == [ids[3e-6], ids[1e-6], ids[1e-5]]
    t2 = table_json(str(sweep_dir), "--sort", "rollout/raw_reward")
    assert [r["run_id"] for r in t2["rows"]] == [ids[1e-5], ids[1e-6], ids[3e-6]]
    loss = t["rows"][0]["metrics"]["train/loss"]
    assert loss["best"] == loss["final"] == pytest.approx(1 / (6 + RATES[3e-6]), rel=1e-3)  # min for a loss
    t3 = table_json(str(sweep_dir), "--sort", "algo.lr", "--desc")
    assert [r["config"]["algo.lr"] for r in t3["rows"]] == [1e-5, 3e-6, 1e-6]


def test_same_table_from_every_local_source(sweep, in_tmp):
    sweep_dir, ids = sweep
    # a real offline wandb run for each (tensorboard/jsonl removed so auto must find wandb)
    from tests.fakes import write_wandb_offline

    for lr, rid in ids.items():
        write_wandb_offline(in_tmp / "runs" / rid, rid, "lr-sweep", curves(RATES[lr]))
    tables = {s: table_json(str(sweep_dir), "--source", s, "-m", "rollout/raw_reward", "-m", "eval/*")
              for s in ("tensorboard", "jsonl", "wandb-offline")}
    norm = lambda t: [(r["run_id"], r["rollouts"], {m: {k: round(v, 5) if isinstance(v, float) else v  # noqa: E731
                                                       for k, v in s.items()} for m, s in r["metrics"].items()})
                      for r in t["rows"]]
    assert norm(tables["tensorboard"]) == norm(tables["jsonl"]) == norm(tables["wandb-offline"])
    assert {r["source"] for r in tables["wandb-offline"]["rows"]} == {"wandb-offline"}
    for rid in ids.values():
        for name in ("tensorboard", "metrics.jsonl"):
            p = in_tmp / "runs" / rid / name
            (p.unlink() if p.is_file() else __import__("shutil").rmtree(p))
    t = table_json(str(sweep_dir))
    assert {r["source"] for r in t["rows"]} == {"wandb-offline"}
    assert norm(t) == norm(tables["tensorboard"])


def test_plot_csv_and_group(sweep, in_tmp):
    sweep_dir, ids = sweep
    png, csv_path = in_tmp / "cmp.png", in_tmp / "cmp.csv"
    t = table_json(str(sweep_dir), "-m", "rollout/raw_reward", "-m", "train/loss", "--plot", str(png), "--csv", str(csv_path))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert t["plotted"] == {"rollout/raw_reward": sorted(ids.values()), "train/loss": sorted(ids.values())}
    # both axes labelled, each line named by the swept value (not a run-id hash)
    assert t["plot"]["rollout/raw_reward"]["x"] == "rollout/step" and t["plot"]["train/loss"]["x"] == "train/step"
    assert t["plot"]["rollout/raw_reward"]["y"] == "rollout/raw_reward" and t["plot"]["train/loss"]["y"] == "train/loss"
    assert t["plot"]["rollout/raw_reward"]["legend"] == {rid: f"algo.lr={lr:.4g}" for lr, rid in ids.items()}
    from trainstack.reports.compare import attach_metrics, collect, plot

    records = attach_metrics(collect([str(sweep_dir)], None, "runs"), "auto")
    drawn = plot(records, ["rollout/raw_reward"], str(in_tmp / "p2.png"))
    assert set(drawn["rollout/raw_reward"].lines) == set(ids.values())  # one line per run
    xs, ys = drawn["rollout/raw_reward"].lines[ids[3e-6]]
    assert xs == [0, 1, 2, 3, 4, 5] and ys[-1] == pytest.approx(0.7, rel=1e-6)
    rows = list(csv.DictReader(csv_path.open()))
    assert {r["run_id"] for r in rows} == set(ids.values())
    assert {float(r["algo.lr"]) for r in rows} == set(LRS)
    # --group: every run whose config name is the group
    t = table_json("--group", "qwen3-4B-grpo-dapo")
    assert {r["run_id"] for r in t["rows"]} == set(ids.values())
    # run ids given one by one
    t = table_json(ids[1e-6], ids[3e-6])
    assert len(t["rows"]) == 2 and t["varying_keys"] == ["algo.lr"]


def test_bad_input_exit_2(sweep):
    sweep_dir, ids = sweep
    code, _, err = cli("compare", ids[1e-6][:-1] + "z")
    assert code == 2 and f"did you mean {ids[1e-6]}" in err and "Traceback" not in err
    code, _, err = cli("compare", str(sweep_dir), "--sort", "rollout/raw_rewrd")
    assert code == 2 and "rollout/raw_reward" in err
    code, _, err = cli("compare")
    assert code == 2 and "--group" in err
    code, _, err = cli("compare", "--group", "nope")
    assert code == 2 and "nope" in err
    code, _, err = cli("compare", str(sweep_dir), "--source", "wandb")
    assert code == 2 and "--project" in err


def test_heavy_imports_stay_in_their_modules():
    code = ("import sys, trainstack.reports.compare, trainstack.reports.diff, trainstack.metrics, trainstack.cli.main;"
            "print(sorted(m for m in ('tensorboard', 'wandb', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


# -- docs/compare.md, run for real -------------------------------------------------------------
def doc_commands() -> list[str]:
    text = (ROOT / "docs" / "compare.md").read_text()
    cmds = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        cmds += [ln.split(" #")[0].strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    return cmds


@pytest.mark.slow
def test_docs_walkthrough_runs_for_real(tmp_path):
    """Every command of docs/compare.md, in order, on real tiny-trainer runs (`python run.py -m ...`)."""
    if not (ROOT / "conf" / "model" / "tiny.yaml").is_file():
        pytest.skip("the tiny trainer config (conf/model/tiny.yaml) is not in this checkout yet")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    subs: dict[str, str] = {}
    cmds = doc_commands()
    assert any(c.startswith("python run.py -m") for c in cmds) and any(c.startswith("trainstack diff") for c in cmds)
    for cmd in cmds:
        for k, v in subs.items():
            cmd = cmd.replace(k, v)
        argv = shlex.split(cmd)
        if argv[:2] == ["python", "run.py"]:
            argv = [sys.executable, str(ROOT / "run.py"), *argv[2:]]
        elif argv[0] == "trainstack":
            argv = [sys.executable, "-m", "trainstack.cli.main", *argv[1:]]
        p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode in ((0, 1) if argv[3:4] == ["diff"] else (0,)), f"{cmd}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        if "--json" in argv and "compare" in argv:
            rows = json.loads(p.stdout)["rows"]
            assert len(rows) == 2 and all(r["status"] == "finished" for r in rows)
            assert all(r["metrics"]["rollout/raw_reward"]["final"] is not None for r in rows)
            subs = {"RUN_A": rows[0]["run_id"], "RUN_B": rows[1]["run_id"]}
            doc_ids = set(re.findall(r"\blr-compare-[0-9a-f]{8}\b", (ROOT / "docs" / "compare.md").read_text()))
            assert doc_ids == {r["run_id"] for r in rows}, doc_ids  # the doc shows the ids this sweep makes
        if argv[3:4] == ["diff"]:
            assert p.returncode == 1 and "algo.lr" in p.stdout
    assert (tmp_path / "lr.png").stat().st_size > 20_000
