"""`trainstack compare --source wandb` against a local fake of the W&B public API.

The server (tests/fakes/wandb_api.py) is a local fake of the public API's GraphQL endpoint,
bound to 127.0.0.1: it answers the operations ``wandb.Api()`` 0.31.0 sends for what trainstack
does (``Viewer``, ``GetDefaultEntity``, ``Runs`` with filters, ``RunFullHistory``), shaped after
``wandb/apis/public/runs.py`` and checked by recording the client's real request bodies
(``fake.requests``). No network, no W&B account.
"""
from __future__ import annotations

import pytest

from tests.fakes import write_run_dir, write_sweep
from tests.fakes.wandb_api import API_KEY, FakeRun, FakeWandbAPI
from tests.test_compare import EXP, LRS, RATES, curves, table_json


def history_rows(c: dict) -> list[dict]:
    rows = []
    for name, pts in c.items():
        sk = {"train": "train/step", "eval": "eval/step"}.get(name.split("/")[0], "rollout/step")
        rows += [{sk: s, name: v} for s, v in pts]
    return [{**r, "_step": i} for i, r in enumerate(rows)]


@pytest.fixture
def api_env(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_API_KEY", API_KEY)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandbcfg"))
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)


def test_same_table_from_the_api_as_from_local_files(in_tmp, api_env):
    made = []
    for lr in LRS:
        ov = [f"experiment={EXP}", f"algo.lr={lr}"]
        d, run = write_run_dir(in_tmp / "runs", ov, curves(RATES[lr]))
        made.append((d, run, ov))
    sweep = write_sweep(in_tmp, "lr", made)
    ids = [run.run_id for _, run, _ in made]
    fake_runs = [FakeRun(rid, group="lr-sweep", config={"lr": lr}, history=history_rows(curves(RATES[lr])))
                 for rid, lr in zip(ids, LRS)]
    fake_runs.append(FakeRun("someone-else", group="other", history=[{"_step": 0, "rollout/step": 0,
                                                                       "rollout/raw_reward": 9.0}]))
    local = table_json(str(sweep), "--source", "jsonl", "--sort", "rollout/raw_reward", "--desc")
    with FakeWandbAPI({("ent", "proj"): fake_runs}) as fake:
        remote = table_json(str(sweep), "--source", "wandb", "--project", "proj", "--entity", "ent",
                            "--base-url", fake.url, "--sort", "rollout/raw_reward", "--desc")
        ops = [r["operationName"] for r in fake.requests if r["operationName"]]
        runs_req = next(r for r in fake.requests if r["operationName"] == "Runs")
    assert "Runs" in ops and ops.count("RunFullHistory") == 3
    assert runs_req["variables"]["entity"] == "ent" and runs_req["variables"]["project"] == "proj"
    assert sorted(__import__("json").loads(runs_req["variables"]["filters"])["name"]["$in"]) == sorted(ids)
    strip = lambda t: [(r["run_id"], r["config"], r["rollouts"], r["metrics"]) for r in t["rows"]]  # noqa: E731
    assert strip(remote) == strip(local)  # the same table whatever the source
    assert {r["source"] for r in remote["rows"]} == {"wandb"}
    assert "someone-else" not in {r["run_id"] for r in remote["rows"]}


def test_group_from_the_api_only(in_tmp, api_env):
    """--group G with no local runs: the API's runs of that group, their W&B config as the config."""
    fake_runs = [FakeRun(f"r{i}", group="lr-sweep", config={"lr": lr, "seed": 1},
                         history=history_rows(curves(RATES[lr]))) for i, lr in enumerate(LRS)]
    fake_runs.append(FakeRun("x", group="other", history=[]))
    with FakeWandbAPI({("ent", "proj"): fake_runs}) as fake:
        t = table_json("--group", "lr-sweep", "--source", "wandb", "--project", "proj", "--entity", "ent",
                       "--base-url", fake.url, "--sort", "rollout/raw_reward", "--desc")
    assert [r["run_id"] for r in t["rows"]] == ["r1", "r0", "r2"]
    assert t["varying_keys"] == ["lr"]
    assert t["rows"][0]["metrics"]["rollout/raw_reward"]["final"] == pytest.approx(0.1 + 5 * RATES[3e-6])


def test_unknown_project_is_one_clear_error(in_tmp, api_env):
    from tests.test_diff import cli

    with FakeWandbAPI({("ent", "proj"): []}) as fake:
        code, _, err = cli("compare", "--group", "g", "--source", "wandb", "--project", "nope", "--entity", "ent",
                           "--base-url", fake.url)
    assert code == 2 and "ent/nope" in err and "Traceback" not in err
