"""`trainstack eval`, `eval.every` and `trainstack export`: eval-only runs of checkpoints (slime's num_rollout=0 path) and exports.

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
        # an eval-only run saves no checkpoint (its launch's identity record, checkpoints/identity.json, aside)
        assert [p.name for p in (eval_dir / "checkpoints").iterdir()] in ([], ["identity.json"])
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
    (["src", "args.lr"], "args.lr", "not a sweep directory"),  # a KEY without =VALUE is not a run either
])
def test_bad_eval_requests_are_one_message_and_write_nothing(trained, argv, key, words):
    before = sorted(p.name for p in (trained / "runs").iterdir())
    res = trainstack("eval", *argv, cwd=trained)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"error: {key}" in res.stderr and words in res.stderr, res.stderr
    assert sorted(p.name for p in (trained / "runs").iterdir()) == before


def _dests():
    from trainstack.upstream.argtable import load_table

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
    from trainstack.render.command import flag_spans
    from trainstack.run.spec import RunSpec

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


# --- trainstack export ---------------------------------------------------------------------------
PROMPTS = ("23+4=", "3+4=7+2=", "51+3=")


def _trainer_model(run_dir: Path, iteration: int):
    """The model the trainer trained, as its checkpoint holds it (the trainer's own loader)."""
    from trainstack.tiny.checkpoint import load_checkpoint
    from trainstack.tiny.model import ModelConfig, TinyQwen3

    _, state = load_checkpoint(str(run_dir / "checkpoints"), iteration, load_optim=False, load_rng=False)
    model = TinyQwen3(ModelConfig(**state.meta["arch"]))
    model.load_state_dict(state.model)
    return model.eval()


def _round_trip(export_dir: Path, model) -> None:
    """The export generates the tokens the trainer generates: greedy generate() == the trainer's greedy
    decoding, and the trainer's sampler on the loaded model's logits draws the trainer's samples."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainstack.tiny.generate import sample
    from trainstack.tiny.tokenizer import TinyTokenizer

    tok = TinyTokenizer()
    auto = AutoModelForCausalLM.from_pretrained(str(export_dir), attn_implementation="eager").eval()
    auto_tok = AutoTokenizer.from_pretrained(str(export_dir))
    prompts = [auto_tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    assert prompts == [tok.encode(p) for p in PROMPTS]
    for p, g in zip(prompts, sample(model, prompts, max_new_tokens=4, temperature=0.0)):
        assert auto.generate(torch.tensor([p]), max_new_tokens=4, do_sample=False)[0, len(p):].tolist() == g.output_ids

    class Loaded(torch.nn.Module):
        config = model.config

        def forward(self, ids):
            return auto(input_ids=ids).logits

    mine, theirs = (sample(m, prompts, max_new_tokens=4, temperature=1.0, seed="export") for m in (model, Loaded()))
    assert [(r.output_ids, r.logprobs) for r in mine] == [(r.output_ids, r.logprobs) for r in theirs]


@pytest.mark.slow
def test_a_cpu_export_holds_the_checkpoint_and_records_where_it_came_from(trained):
    res = trainstack("export", "src", "--to", "hf-out", "--json", cwd=trained)
    assert res.returncode == 0, res.stderr[-3000:]
    record = json.loads(res.stdout)
    spec = json.loads((trained / "runs" / "src" / "spec.json").read_text())
    assert (record["source_run"], record["iteration"]) == ("src", 3)
    assert record["slime_commit"] == spec["provenance"]["slime_commit"] and len(record["slime_commit"]) == 40
    config = json.loads((trained / "hf-out" / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["trainstack"] == {
        "source_run": "src", "iteration": 3, "slime_commit": record["slime_commit"]}
    from trainstack.tiny import hf_model  # the weights are the checkpoint's (the Hub test loads one with transformers)

    exported, trained_model = hf_model.load(trained / "hf-out"), _trainer_model(trained / "runs" / "src", 3)
    assert all(__import__("torch").equal(a, b) for a, b in
               zip(exported.state_dict().values(), trained_model.state_dict().values()))
    again = trainstack("export", "src", "--to", "hf-out", cwd=trained)
    assert again.returncode == 2 and "exists and is not empty" in again.stderr


@pytest.mark.slow
def test_an_export_pushed_to_the_hub_round_trips_through_transformers(trained, fake_hub, tmp_path):
    import os

    from huggingface_hub import snapshot_download

    res = subprocess.run([sys.executable, "-m", "trainstack", "export", "src", "--iter", "1", "--hub", "alice/tiny-src",
                          "--json"], cwd=trained, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr[-3000:]
    record = json.loads(res.stdout)
    assert record["hub"]["repo"] == "alice/tiny-src" and record["iteration"] == 1
    got = Path(snapshot_download("alice/tiny-src", endpoint=fake_hub.url, token=os.environ["HF_TOKEN"],
                                 local_dir=str(tmp_path / "pulled")))
    assert json.loads((got / "trainstack_export.json").read_text())["source_run"] == "src"
    _round_trip(got, _trainer_model(trained / "runs" / "src", 1))


def _converter_parser():
    """slime's own argparse of tools/convert_torch_dist_to_hf.py: the parser statements of its __main__ block,
    executed from its source (the module itself imports torch, Megatron and transformers)."""
    import argparse
    import ast

    source = (ROOT / "slime" / "tools" / "convert_torch_dist_to_hf.py").read_text()
    main = next(n for n in ast.parse(source).body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test))
    wanted = [s for s in main.body if "parser" in ast.unparse(s) and "parse_args" not in ast.unparse(s)]
    scope: dict = {"argparse": argparse}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), "convert_torch_dist_to_hf.py", "exec"), scope)
    parser = scope["parser"]
    assert len(parser._actions) >= 8  # --help and the converter's own seven
    return parser


@given(iteration=st.integers(0, 10**6), vocab=st.one_of(st.none(), st.integers(1, 300000)),
       exists=st.booleans(), name=st.text("abcxyz-_0123", min_size=1, max_size=12))
@settings(max_examples=60, deadline=None)
def test_the_slime_export_argv_parses_with_the_converters_own_parser(iteration, vocab, exists, name):
    """A GPU run's export is slime's converter: its argv, for any checkpoint and output, parses with the converter's
    own argparse (strict: an unknown flag fails) to exactly the checkpoint, output, origin and vocab intended."""
    from types import SimpleNamespace

    from trainstack.export.plan import Export, converter_argv

    spec = SimpleNamespace(run_id="r", command={"cwd": "/opt/slime"}, args={"hf_checkpoint": f"/models/{name}"})
    out = Path(f"/tmp/exports/{name}")
    ex = Export(spec, iteration, f"/runs/{name}/checkpoints", out)
    argv = converter_argv(ex, vocab) if not exists else _with_existing(ex, vocab)
    assert argv[:2] == ["python3", "/opt/slime/tools/convert_torch_dist_to_hf.py"]
    got = _converter_parser().parse_args(argv[2:])
    assert got.input_dir == f"/runs/{name}/checkpoints/iter_{iteration:07d}" and got.output_dir == str(out)
    assert got.origin_hf_dir == f"/models/{name}" and got.vocab_size == vocab and got.force == exists


def _with_existing(ex, vocab):
    from unittest import mock

    from trainstack.export.plan import converter_argv

    with mock.patch.object(Path, "exists", lambda self: True):
        return converter_argv(ex, vocab)
