"""A run brings its own inputs (docs/inputs.md): the tiny model and a dataset served by the fake Hub are
downloaded, transformed and converted (with the converter argv slime's tool takes) into an empty
models_root/data_root, then trained from; a second run prepares nothing; concurrent preparers prepare
once; a killed download or conversion is never used; a pinned revision is part of the run id."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from conftest import ROOT, run_py

MODEL = "tiny-org/tiny-char"
DATA = "tiny-org/arith-qa"
TINY_FLAGS = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--ffn-hidden-size", "256",
              "--seq-length", "32", "--max-position-embeddings", "32"]


@pytest.fixture
def hub_inputs(fake_hub, tmp_path):
    """The fake Hub with the tiny model in the HF layout (config, weights, tokenizer) and a dataset repo
    whose rows use other keys than slime's (question/answer): the env source renames them."""
    from huggingface_hub import HfApi

    from trainstack.inputs.convert_tiny import export_hf
    from trainstack.tiny.arithmetic import write_task

    api = HfApi(endpoint=fake_hub.url)
    src = export_hf(str(tmp_path / "hf-src"), TINY_FLAGS)
    api.create_repo(MODEL)
    sha = api.upload_folder(repo_id=MODEL, folder_path=src).oid
    task = tmp_path / "task"
    write_task(task)
    rows = [json.loads(ln) for ln in (task / "arithmetic" / "train.jsonl").read_text().splitlines()] \
        if (task / "arithmetic").is_dir() else [json.loads(ln) for ln in (task / "train.jsonl").read_text().splitlines()]
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps({"question": r["prompt"], "answer": r["label"]}) + "\n" for r in rows))
    api.create_repo(DATA, repo_type="dataset")
    api.upload_file(path_or_fileobj=str(qa), path_in_repo="train.jsonl", repo_id=DATA, repo_type="dataset")
    return fake_hub, sha, rows


def overrides(tmp: Path, revision: str = "main", *extra: str) -> list[str]:
    return [f"paths.runs_root={tmp}/runs", f"paths.models_root={tmp}/models", f"paths.data_root={tmp}/data",
            f"model.meta.hf_repo={MODEL}", f"+model.meta.revision={revision}",
            "+model.hf_checkpoint=${paths.models_root}/tiny-char",
            "+model.ref_load=${paths.models_root}/tiny-char_torch_dist",
            f"+env.meta.data=[{{repo: '{DATA}', files: {{train.jsonl: arith-qa/train.jsonl}}, transform: keys, "
            "keys: {question: prompt, answer: label}}]",
            "env.prompt_data=${paths.data_root}/arith-qa/train.jsonl", "env.eval_interval=null",
            "env.eval_prompt_data=null", "env.num_rollout=2", "env.save_interval=2", *extra]


def downloads(hub, name: str) -> int:
    """GETs of one file's content (HEADs only read its metadata); LFS files from the storage host (`/_cdn/`)."""
    return sum(1 for r in hub.requests if r["method"] == "GET" and ("/resolve/" in r["path"]
               or r["path"].startswith("/_cdn/")) and r["path"].endswith("/" + name))


def record(run_dir: Path) -> dict:
    return json.loads((run_dir / "inputs.json").read_text())


def run_dir_of(out: str) -> Path:
    line = next(ln for ln in out.splitlines() if ln.startswith("run dir"))
    return Path(line.split()[-1])


def test_empty_roots_download_convert_train_then_nothing(hub_inputs, tmp_path):
    hub, sha, rows = hub_inputs
    first = run_py(*overrides(tmp_path), timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    rd = run_dir_of(first.stderr)
    assert "initial weights from " + str(tmp_path / "models" / "tiny-char_torch_dist") in first.stdout
    rec = record(rd)
    states = {i["kind"]: i["state"] for i in rec["items"]}
    assert states == {"model": "download", "torch_dist": "convert", "dataset": "download"}
    assert {i["sha"] for i in rec["items"] if i["kind"] != "dataset"} == {sha}  # 'main' resolved and recorded
    conv = next(i for i in rec["items"] if i["kind"] == "torch_dist")["command"]
    assert conv[1:3] == ["-m", "trainstack.inputs.convert_tiny"] and conv[3:3 + len(TINY_FLAGS)] == TINY_FLAGS
    assert conv[-4] == "--hf-checkpoint" and conv[-2] == "--save"  # slime's tool's argv shape
    # the dataset was renamed into slime's keys; the model dir is the Hub's bytes
    data = [json.loads(ln) for ln in (tmp_path / "data" / "arith-qa" / "train.jsonl").read_text().splitlines()]
    assert data[0] == {"prompt": rows[0]["prompt"], "label": rows[0]["label"]}
    assert (tmp_path / "models" / "tiny-char" / "model.safetensors").read_bytes() == hub.files(MODEL)["model.safetensors"]
    assert downloads(hub, "model.safetensors") == 1

    # a second run (another run id: another seed) downloads and converts nothing
    n_requests = len(hub.requests)
    second = run_py(*overrides(tmp_path, "main", "args.seed=7"), timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    rd2 = run_dir_of(second.stderr)
    assert rd2 != rd
    rec2 = record(rd2)
    assert {i["state"] for i in rec2["items"]} == {"cached"}
    assert downloads(hub, "model.safetensors") == 1 and downloads(hub, "train.jsonl") == 1
    assert not any("/resolve/" in r["path"] for r in hub.requests[n_requests:])  # only 'main' is re-resolved
    print(f"\nsecond run's prepare step: {rec2['seconds']:.3f} s")
    assert rec2["seconds"] <= 1.0


def _prepare_cmd(tmp: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "trainstack", "prepare", *overrides(tmp), *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_two_runs_started_together_prepare_once(hub_inputs, tmp_path):
    hub, sha, _ = hub_inputs
    hub.inject("delay", match=f"GET /{MODEL}/resolve", delay_s=0.5, count=None)  # the two overlap
    procs = [subprocess.Popen([sys.executable, str(ROOT / "run.py"), *overrides(tmp_path, "main", f"args.seed={seed}")],
                              cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for seed in (1, 2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert downloads(hub, "model.safetensors") == 1 and downloads(hub, "train.jsonl") == 1
    recs = [record(run_dir_of(o[1])) for o in outs]
    states = sorted(i["state"] for rec in recs for i in rec["items"])
    assert states.count("convert") == 1 and states.count("download") == 2  # model + dataset, once each
    assert states.count("cached") + states.count("transform") == 3
    assert {i["sha"] for rec in recs for i in rec["items"] if i["kind"] == "model"} == {sha}


def test_killed_download_is_resumed_never_used(hub_inputs, tmp_path):
    hub, sha, _ = hub_inputs
    # the weights are an LFS file: their bytes come from the fake's storage host (`/_cdn/<sha256>/<name>`)
    hub.inject("delay", match="GET /_cdn/", delay_s=30, count=1)
    p = subprocess.Popen(_prepare_cmd(tmp_path), cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not any(r["path"].endswith("/tokenizer.json") and r["method"] == "GET" for r in hub.requests):
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.2)
    time.sleep(1.0)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    link = tmp_path / "models" / "tiny-char"
    assert not os.path.lexists(link)  # never pointed at a partial download
    entries = list((tmp_path / "models" / ".trainstack-cache" / "models").iterdir())
    partial = [e for e in entries if e.is_dir()]
    assert partial and not (partial[0] / ".complete.json").exists()
    hub.clear_faults()
    again = subprocess.run(_prepare_cmd(tmp_path), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (link / "model.safetensors").read_bytes() == hub.files(MODEL)["model.safetensors"]
    assert (link / ".complete.json").exists()


def test_killed_conversion_is_redone(hub_inputs, tmp_path):
    from trainstack.inputs.cache import MARKER

    first = subprocess.run(_prepare_cmd(tmp_path), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    out = Path(os.path.realpath(tmp_path / "models" / "tiny-char_torch_dist"))
    # as a conversion killed mid-way leaves it: no marker, a half-written file, the link gone
    (out / MARKER).unlink()
    (out / "release" / "model.pt").write_bytes(b"half")
    os.unlink(tmp_path / "models" / "tiny-char_torch_dist")
    plan = subprocess.run(_prepare_cmd(tmp_path, "--plan"), cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert "torch_dist" in plan.stdout and ": convert" in plan.stdout and "conversion: " in plan.stdout
    again = subprocess.run(_prepare_cmd(tmp_path), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "removing an incomplete conversion" in again.stderr
    assert (out / MARKER).exists() and (out / "release" / "model.pt").read_bytes() != b"half"


def test_revision_is_part_of_the_run_id(hub_inputs, tmp_path):
    from huggingface_hub import HfApi

    from trainstack.render.pipeline import build_from_overrides

    hub, sha1, _ = hub_inputs
    sha2 = HfApi(endpoint=hub.url).upload_file(path_or_fileobj=b"v2\n", path_in_repo="notes.txt", repo_id=MODEL).oid
    ids = {rev: build_from_overrides(overrides(tmp_path, rev))[0].run_id for rev in (sha1, sha2, "main")}
    assert len(set(ids.values())) == 3
    assert ids[sha1] == build_from_overrides(overrides(tmp_path, sha1))[0].run_id  # stable


def test_dry_run_plan_reads_no_network(hub_inputs, tmp_path):
    hub, sha, _ = hub_inputs
    n = len(hub.requests)
    dry = run_py(*overrides(tmp_path), "dry_run=true", timeout=120)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert f"model {MODEL}@main -> {tmp_path}/models/tiny-char: download" in dry.stdout
    assert "conversion: " in dry.stdout and "convert_tiny" in dry.stdout
    assert len(hub.requests) == n  # no network in a dry run
    assert not (tmp_path / "models").exists()
    asked = subprocess.run(_prepare_cmd(tmp_path, "--plan", "--lookup"), cwd=ROOT, env=_env(), capture_output=True,
                           text=True, timeout=120)  # unless asked: commits and sizes from the Hub
    assert asked.returncode == 0, asked.stderr[-2000:]
    size = len(b"".join(c for p, c in hub.files(MODEL).items()))
    assert f"model {MODEL}@main (commit {sha[:12]}) -> {tmp_path}/models/tiny-char: download, {size / 1024:.1f} KiB" \
        in asked.stdout
    assert not os.path.lexists(tmp_path / "models" / "tiny-char")


def test_bad_source_is_bad_input(tmp_path):
    r = run_py(f"paths.runs_root={tmp_path}/runs", "dry_run=true",
               "+env.meta.data=[{repo: a/b, files: {x: y}, transform: bogus}]")
    assert r.returncode == 2 and "env.meta.data[0].transform" in r.stderr and "Traceback" not in r.stderr


def test_a_bad_revision_is_one_clear_error(hub_inputs, tmp_path):
    r = subprocess.run(_prepare_cmd(tmp_path, "model.meta.revision=no-such-branch"), cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "error: model.meta.revision:" in r.stderr, r.stderr[-2000:]
    assert "the Hub answered 404" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "models" / "tiny-char").exists()


def test_no_room_is_refused_before_downloading(tmp_path):
    from trainstack.errors import ConfigErrors
    from trainstack.inputs.prepare import _check_disk

    with pytest.raises(ConfigErrors) as err:
        _check_disk(str(tmp_path / "entry"), {"model.bin": 1 << 60}, "paths.models_root", "big/model@abc")
    e = err.value.errors[0]
    assert e.key == "paths.models_root" and "big/model@abc needs " in e.problem and "free" in e.problem
    (tmp_path / "entry").mkdir()
    (tmp_path / "entry" / "model.bin").write_bytes(b"x" * 10)
    assert _check_disk(str(tmp_path / "entry"), {"model.bin": 10, "other": 5}, "k", "w") == 5  # resumed: only the rest


def test_transforms_produce_slimes_keys(tmp_path):
    from trainstack.inputs.transforms import apply

    src = tmp_path / "oh.json"
    src.write_text(json.dumps([{"conversations": [{"from": "system", "value": "be brief"},
                                                  {"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}]))
    apply("openhermes", str(src), str(tmp_path / "oh.jsonl"), {})
    row = json.loads((tmp_path / "oh.jsonl").read_text())
    assert row == {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                                {"role": "assistant", "content": "hello"}]}
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "1+1=", "answer": "2", "id": 3}\n')
    apply("keys", str(qa), str(tmp_path / "out.jsonl"), {"question": "prompt", "answer": "label"})
    assert json.loads((tmp_path / "out.jsonl").read_text()) == {"prompt": "1+1=", "label": "2", "id": 3}
    pq = pytest.importorskip("pyarrow.parquet")  # slime's environment has it (datasets); this venv may not
    apply("openhermes", str(src), str(tmp_path / "oh.parquet"), {})
    assert pq.read_table(str(tmp_path / "oh.parquet")).to_pylist() == [row]


def test_exec_prepares_a_stored_run_on_the_executing_host(hub_inputs, tmp_path):
    """What a SLURM job or a Lium pod runs: `trainstack exec` of a spec stored elsewhere, whose inputs this
    host has never seen: its host checks trust what the prepare step makes, which runs before the trainer."""
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.run.rundir import RunDir
    from trainstack.run.spec import RunSpec

    hub, sha, _ = hub_inputs
    run, cmd = build_from_overrides(overrides(tmp_path))
    spec = RunSpec.from_run(run, cmd)
    RunDir(spec.run_dir).write_spec(spec)
    assert not (tmp_path / "models").exists()
    r = subprocess.run([sys.executable, "-m", "trainstack", "exec", run.run_id, "--runs-root", str(tmp_path / "runs")],
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = record(Path(spec.run_dir))
    assert {i["kind"]: i["state"] for i in rec["items"]} == {"model": "download", "torch_dist": "convert",
                                                            "dataset": "download"}
    events = [json.loads(ln)["event"] for ln in (Path(spec.run_dir) / "events.jsonl").read_text().splitlines()]
    assert events.index("inputs_prepared") < events.index("launch")


def test_a_resume_keeps_the_commits_its_first_launch_resolved(hub_inputs, tmp_path):
    from huggingface_hub import HfApi

    from trainstack.inputs.prepare import for_run, prepare
    from trainstack.render.pipeline import build_from_overrides

    hub, sha1, _ = hub_inputs
    run, cmd = build_from_overrides(overrides(tmp_path))
    sources, conv = for_run(run.config, run.args, run.cluster, "")
    first = prepare(sources, conv, log=lambda _m: None)
    assert {i.sha for i in first.items if i.kind == "model"} == {sha1}
    sha2 = HfApi(endpoint=hub.url).upload_file(path_or_fileobj=b"v2\n", path_in_repo="notes.txt", repo_id=MODEL).oid
    resumed = prepare(sources, conv, log=lambda _m: None, recorded={MODEL: sha1})  # main moved; the run did not
    assert [(i.kind, i.sha, i.state) for i in resumed.items if i.kind != "dataset"] == [
        ("model", sha1, "cached"), ("torch_dist", sha1, "cached")]
    fresh = prepare(sources, conv, log=lambda _m: None)  # a new run follows main
    assert [(i.kind, i.sha, i.state) for i in fresh.items if i.kind != "dataset"] == [
        ("model", sha2, "download"), ("torch_dist", sha2, "convert")]
    assert (tmp_path / "models" / "tiny-char" / "notes.txt").read_bytes() == b"v2\n"  # the link follows the run


def test_a_failed_download_is_one_clear_error_and_resumes(hub_inputs, tmp_path):
    hub, sha, _ = hub_inputs
    hub.inject("status", match="GET /_cdn/", status=403, count=None)  # the weights: an LFS file, from storage
    r = subprocess.run(_prepare_cmd(tmp_path), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "error: model.meta.hf_repo: downloading " + f"{MODEL}@{sha} failed" in r.stderr and "Traceback" not in r.stderr
    assert "\ntrainstack: 1 problem getting the run's inputs (the run config is fine); nothing was launched.\n" in \
        r.stderr  # a network error once read "1 problem in the run config"
    assert not os.path.lexists(tmp_path / "models" / "tiny-char")
    hub.clear_faults()
    again = subprocess.run(_prepare_cmd(tmp_path), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert downloads(hub, "tokenizer.json") == 1  # kept from the failed attempt, not fetched again


def test_the_default_runs_plan_says_there_is_nothing_to_prepare(tmp_path, monkeypatch, capsys):
    """`prepare --plan` printed nothing at all for the CPU default (it names no Hub input)."""
    from trainstack.cli.main import main

    monkeypatch.chdir(tmp_path)
    for argv in (["prepare", "--plan"], ["prepare"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert out.startswith("nothing to download or convert for tiny-grpo-arithmetic-") and \
            "the env's data hook (trainstack.tiny.arithmetic.prepare)" in out, out


@settings(max_examples=50, deadline=None)
@given(outside=st.lists(st.sampled_from(["", "getting the run's inputs"]), min_size=1, max_size=4))
def test_only_problems_of_the_config_are_called_so(outside):
    from trainstack.errors import ConfigError, ConfigErrors

    head = ConfigErrors([ConfigError("k", "p", outside=o) for o in outside]).render().splitlines()[0]
    assert ("in the run config" in head) == ("" in outside)
    assert ("the run config is fine" in head) == ("" not in outside)
