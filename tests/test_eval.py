"""`trainstack eval` and `eval.every`: eval-only runs of checkpoints through slime's num_rollout=0 path.

One tiny run (4 rollouts, a checkpoint and an eval every 2) with background evaluation is trained once for
the module; the tests read what it left and run `trainstack eval` on it.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, SMALL_BATCH, run_py


def trainstack(*argv: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainstack", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def own_evals(run_dir: Path) -> dict[int, float]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["step_key"] == "eval/step":
            out[rec["step"]] = rec["metrics"]["eval/arithmetic"]
    return out


def snapshot(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("evals")
    res = run_py("run_id=src", "env.num_rollout=4", "args.save_interval=2", "args.eval_interval=2", *SMALL_BATCH,
                 "eval.every=2", cwd=cwd, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return cwd


@pytest.mark.slow
def test_background_evals_give_the_training_runs_own_eval_numbers(trained):
    """eval.every=2: each checkpoint (rollouts 1 and 3) was evaluated by a run of its own while the source trained,
    and an eval of an iteration measures exactly what the training run's own eval measured there (same seed)."""
    src = trained / "runs" / "src"
    records = [json.loads(x) for x in (src / "evals.jsonl").read_text().splitlines()]
    assert sorted(r["step"] for r in records) == [1, 3]
    own = own_evals(src)
    for r in records:
        eval_dir = trained / "runs" / r["eval_run"]
        assert r["metrics"]["eval/arithmetic"] == own[r["step"]], (eval_dir / "logs" / "trainer.log").read_text()[-3000:]
        spec = json.loads((eval_dir / "spec.json").read_text())
        assert spec["extra"]["eval_of"]["iteration"] == r["step"] and spec["args"]["num_rollout"] == 0
        assert json.loads((eval_dir / "status.json").read_text())["state"] == "finished"
        assert not any((eval_dir / "checkpoints").iterdir())  # an eval-only run saves nothing
    status = trainstack("status", "--json", cwd=trained)
    states = {row["run_id"]: row["state"] for row in json.loads(status.stdout)}
    assert states["src-eval-1"] == states["src-eval-3"] == "finished"


@pytest.mark.slow
def test_cli_eval_is_resumable_tags_overrides_and_never_writes_into_the_source(trained):
    src = trained / "runs" / "src"
    before = snapshot(src / "checkpoints")
    again = trainstack("eval", "src", "--all", cwd=trained)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("done earlier") == 2  # finished and attached: not redone
    res = trainstack("eval", "src", "--iter", "3", "args.n_samples_per_eval_prompt=2", "--json", cwd=trained)
    assert res.returncode == 0, res.stderr[-3000:]
    row = json.loads(res.stdout)["evals"][0]
    tag = row["eval_run"].rsplit("-", 1)[1]
    assert row["iteration"] == 3 and row["state"] == "finished" and f"eval/arithmetic@{tag}" in row["metrics"]
    assert snapshot(src / "checkpoints") == before  # nothing written into the source's checkpoints
    table = json.loads(trainstack("compare", "src", "--metric", "eval/*", "--json", cwd=trained).stdout)
    assert {"eval/arithmetic", f"eval/arithmetic@{tag}"} <= set(table["metrics"])


@pytest.mark.slow
@pytest.mark.parametrize("argv, key, words", [
    (["src", "args.lr=0.1"], "args.lr", "only eval settings can change"),
    (["src", "args.eval_temprature=0"], "args.eval_temprature", "eval_temperature"),
    (["src", "--iter", "2"], "--iter", "no complete checkpoint at rollout 2"),
    (["src-eval-1"], "RUN", "is an eval run"),
    (["nope"], "nope", "not a sweep directory"),
])
def test_bad_eval_requests_are_one_message_and_write_nothing(trained, argv, key, words):
    before = sorted(p.name for p in (trained / "runs").iterdir())
    res = trainstack("eval", *argv, cwd=trained)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"error: {key}" in res.stderr and words in res.stderr, res.stderr
    assert sorted(p.name for p in (trained / "runs").iterdir()) == before


def _dests():
    from trainstack.argtable import load_table

    return sorted(load_table().dests())


@given(dest=st.sampled_from(_dests()), value=st.sampled_from(["1", "0.5", "true", "x", "[a, b]"]),
       ns=st.sampled_from(["", "args.", "env.", "algo.", "model."]))
@settings(max_examples=300, deadline=None)
def test_only_eval_settings_are_accepted_and_each_refusal_names_its_key(dest, value, ns):
    """Any slime dest, any value: an eval accepts it only if it is an eval setting of the right type; a refusal is
    a ConfigErrors naming the key as typed, never another exception."""
    from trainstack.errors import ConfigErrors
    from trainstack.evals.plan import is_eval_dest, parse_overrides

    token = f"{ns}{dest}={value}"
    try:
        got = parse_overrides([token])
    except ConfigErrors as err:
        assert [e.key for e in err.errors] == [f"{ns}{dest}"]
        if not is_eval_dest(dest):
            assert "only eval settings" in err.errors[0].problem
        return
    assert is_eval_dest(dest) and list(got) == [dest]


def test_eval_spec_keeps_the_stored_argv_and_changes_only_the_eval_only_dests(tmp_path):
    """The eval run's command is the source's stored argv with slime's eval-only settings: --num-rollout 0,
    --load <source save> --ckpt-step N, its own --save; paths under the source run dir move to the eval's."""
    import dataclasses

    from trainstack.api import Run
    from trainstack.evals.plan import eval_spec
    from trainstack.render import flag_spans
    from trainstack.runspec import RunSpec

    resolved, command = Run.compose(["run_id=src", f"paths.runs_root={tmp_path}/runs", "env.num_rollout=4"])._composed("t")
    source = RunSpec.from_run(resolved, command)
    spec = eval_spec(source, 3, {"eval_temperature": 0.5}, tmp_path / "runs")
    before = dict(flag_spans(source.slime_command().argv))
    after = dict(flag_spans(spec.slime_command().argv))
    src_dir, eval_dir = source.run_dir, spec.run_dir
    assert after["--num-rollout"] == ["0"] and after["--ckpt-step"] == ["3"] and after["--eval-temperature"] == ["0.5"]
    assert after["--load"] == [f"{src_dir}/checkpoints"] and after["--save"] == [f"{eval_dir}/checkpoints"]
    assert "--no-load-optim" in after and "--no-load-rng" in after and "--save-interval" not in after
    changed = {f for f in set(before) | set(after) if before.get(f) != after.get(f)}
    assert changed == {"--num-rollout", "--ckpt-step", "--eval-temperature", "--save", "--no-load-optim",
                       "--no-load-rng", "--save-interval"}  # --load: the source's save dir, as the source had it
    assert spec.command["env"]["TENSORBOARD_DIR"].startswith(eval_dir)
    assert not spec.hub.enabled and spec.extra["eval_of"] == {"run_id": "src", "run_dir": src_dir, "iteration": 3,
                                                               "overrides": {"eval_temperature": 0.5},
                                                               "tag": spec.run_id.rsplit("-", 1)[1]}
    assert dataclasses.asdict(spec.resume) == dataclasses.asdict(source.resume)
