"""Run identity (docs/resume.md): input paths count in full, their content is checked on resume and
when a stored run executes, trainstack-managed dests cannot be overridden, secrets are refused in
every form."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import ROOT, files_under, run_py

from trainstack.errors import ConfigErrors
from trainstack.config.input_identity import fingerprint, input_changes, inputs_of
from trainstack.render.pipeline import build_from_overrides

SMALL = ["env.num_rollout=4", "args.save_interval=2", "env.rollout_batch_size=4", "env.n_samples_per_prompt=4",
         "env.global_batch_size=16", "env.eval_interval=null"]


def _arith(tmp_path):
    from trainstack.tiny.arithmetic import prepare

    prepare(tmp_path / "data")
    return tmp_path / "data" / "arithmetic" / "train.jsonl"


def test_input_paths_count_in_full_in_the_run_id():
    a, _ = build_from_overrides(["env.prompt_data=/data/A/train.jsonl"])
    b, _ = build_from_overrides(["env.prompt_data=/data/B/train.jsonl"])
    assert a.run_id != b.run_id
    v1, _ = build_from_overrides(["experiment=qwen3-4B-grpo-dapo", "model.hf_checkpoint=/models/v1/Qwen3-4B"])
    v2, _ = build_from_overrides(["experiment=qwen3-4B-grpo-dapo", "model.hf_checkpoint=/models/v2/Qwen3-4B"])
    assert v1.run_id != v2.run_id


def test_fingerprint_is_content_not_location(tmp_path):
    a = tmp_path / "a.jsonl"
    a.write_text('{"prompt": "1+1=", "label": "2"}\n')
    b = tmp_path / "copy.jsonl"
    shutil.copy(a, b)
    assert fingerprint(str(a)) == fingerprint(str(b)) and fingerprint(str(tmp_path / "none")) is None
    before, moved = inputs_of({"prompt_data": str(a)}), inputs_of({"prompt_data": str(b)})
    assert input_changes(before, moved) == {}  # moved, same content: same input
    b.write_text('{"prompt": "1+2=", "label": "3"}\n')
    assert list(input_changes(before, inputs_of({"prompt_data": str(b)}))) == ["prompt_data"]
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text("{}")
    fp = fingerprint(str(d))
    (d / "config.json").write_text('{"hidden_size": 2}')
    assert fingerprint(str(d)) != fp


# a stored record in any JSON shape (a damaged or hand-edited spec.json / checkpoint identity)
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(before=st.dictionaries(st.sampled_from(["prompt_data", "hf_checkpoint", "x"]), _JSON, max_size=3))
def test_a_stored_input_record_of_any_shape_compares_as_a_named_change_never_a_traceback(before):
    """Found by the corrupt-run-dir property test: spec.json's inputs {'': True} raised AttributeError."""
    after = {"prompt_data": {"path": "/d/train.jsonl", "fingerprint": {"kind": "file", "size": 3, "head_sha256": "ab"}}}
    changes = input_changes(before, after)
    for was, now in changes.values():
        assert isinstance(was, str) and isinstance(now, str)
    if not isinstance(before.get("prompt_data"), dict):  # absent or unreadable: never the same input
        assert "prompt_data" in changes
    assert set(changes) <= set(before) | set(after)



@pytest.mark.parametrize("override,key", [
    ("args.save=/tmp/elsewhere", "args.save"), ("args.load=/tmp/elsewhere", "args.load"),
    ("args.ckpt_step=3", "args.ckpt_step"), ("args.start_rollout_id=2", "args.start_rollout_id"),
])
def test_managed_dests_are_refused_with_the_fix(override, key):
    with pytest.raises(ConfigErrors) as err:
        build_from_overrides([override])
    (e,) = [e for e in err.value.errors if e.key == key]
    assert "managed by trainstack" in e.problem and e.fix


@pytest.mark.parametrize("overrides,key", [
    (["args.wandb_key=abc123secret"], "args.wandb_key"),
    (["args.router_control_plane_api_keys=[abc123secret,def456secret]"], "args.router_control_plane_api_keys"),
    (["args.train_env_vars={HF_TOKEN:abc123secret}"], "args.train_env_vars.HF_TOKEN"),
    (["+args.train_env_vars={A:'1',nested:{MY_API_KEY:abc123secret}}"], "args.train_env_vars.nested.MY_API_KEY"),
    (["runtime_env.env_vars.WANDB_API_KEY=abc123secret"], "runtime_env.env_vars.WANDB_API_KEY"),
    (["cluster.lium.pod={lium_api_key:abc123secret}"], "cluster.lium.pod.lium_api_key"),
])
def test_secrets_are_refused_in_every_form(overrides, key):
    with pytest.raises(ConfigErrors) as err:
        build_from_overrides(overrides)
    keys = [e.key for e in err.value.errors]
    assert any(key == k or key.startswith(k + ".") for k in keys), keys  # the command-line check names the override
    assert "abc123secret" not in str(err.value) and all("abc123secret" not in str(e.value) for e in err.value.errors)


def test_secret_in_an_experiment_file_is_refused(tmp_path):
    exp = tmp_path / "experiment"
    exp.mkdir()
    (exp / "leaky.yaml").write_text("# @package _global_\nargs:\n  wandb_key: abc123secret\n")
    res = run_py("--config-dir", str(tmp_path), "experiment=leaky", "dry_run=true", cwd=tmp_path)
    assert res.returncode == 2 and "args.wandb_key" in res.stderr and "export WANDB_API_KEY" in res.stderr
    assert "abc123secret" not in res.stdout + res.stderr


@pytest.mark.slow
def test_changed_data_is_refused_on_resume_and_when_a_stored_run_executes(tmp_path):
    train = _arith(tmp_path)
    mine = tmp_path / "mine.jsonl"
    shutil.copy(train, mine)
    base = [*[o for o in SMALL if "num_rollout" not in o], "env.num_rollout=400", f"env.prompt_data={mine}",
            "run_id=ident"]
    tracker = tmp_path / "runs" / "ident" / "checkpoints" / "latest_checkpointed_iteration.txt"
    launcher = subprocess.Popen([sys.executable, str(ROOT / "run.py"), *base], cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not tracker.exists():
        assert time.monotonic() < deadline and launcher.poll() is None
        time.sleep(0.1)
    launcher.send_signal(signal.SIGTERM)  # a final checkpoint, then interrupted
    assert launcher.wait(timeout=60) == 128 + signal.SIGTERM
    lines = mine.read_text().splitlines()
    mine.write_text("\n".join(reversed(lines)) + "\n")  # same path, other data
    res = run_py(*base, cwd=tmp_path)
    assert res.returncode == 2 and "prompt_data" in res.stderr and "different training config" in res.stderr
    assert "resume.allow_changes=[prompt_data]" in res.stderr
    # the stored run (spec.json) executed after its data changed: refused on this host too
    res = subprocess.run([sys.executable, "-m", "trainstack", "exec", "ident"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 2 and "inputs of run ident changed since it was submitted" in res.stderr, res.stderr
    # the same data under another path is the same input: the resume goes on
    moved = tmp_path / "moved.jsonl"
    mine.write_text("\n".join(lines) + "\n")
    shutil.copy(mine, moved)
    short = [o.replace(str(mine), str(moved)).replace("num_rollout=400", "num_rollout=4") for o in base]
    res = run_py(*short, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    events = [json.loads(x) for x in (tmp_path / "runs" / "ident" / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events if e["event"] in ("launch", "resume", "finished")][:1] == ["launch"]
    assert [e["event"] for e in events][-1] in ("exit", "finished")


def test_refusals_write_nothing(tmp_path):
    res = run_py("args.save=/tmp/x", "run_id=never", cwd=tmp_path)
    assert res.returncode == 2 and files_under(tmp_path) == []


# --- which dests count in the run_id: each by name (trainstack/data/run_identity.json) ---------------


def test_every_dest_of_the_table_counts_or_is_excluded_by_name():
    from trainstack.upstream.argtable import load_table
    from trainstack.config.input_identity import excluded_dests, identity_table

    table, doc = load_table(), identity_table()
    groups = {name: set(g["dests"]) for name, g in doc["excluded"].items()}
    counted = set(doc["identity"])
    assert doc["meta"]["slime_commit"] == table.slime_commit  # reviewed against this table
    for name, dests in groups.items():
        assert doc["excluded"][name]["why"].strip(), name
        assert not dests & counted, (name, sorted(dests & counted)[:5])
        assert dests <= set(table.dests()), (name, sorted(dests - set(table.dests())))
        for other, more in groups.items():
            assert other == name or not dests & more, (name, other)
    assert counted | excluded_dests() == set(table.dests())
    # the former prefix rules, now names: every W&B, TensorBoard, SGLang and router dest is listed by name
    assert {"wandb_project", "sglang_mem_fraction_static", "router_policy", "tensorboard_dir"} <= excluded_dests()
    assert {"lr", "kl_coef", "rollout_temperature", "advantage_estimator"} <= counted


def test_the_identity_file_is_in_step_with_the_table():
    res = subprocess.run([sys.executable, "-m", "trainstack.upstream.sync_slime", "identity", "--check"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0 and res.stdout == "", res.stdout + res.stderr


def _table_with(tmp_path, dest: str, flag: str):
    """A copy of the argument table with one more slime dest (a regenerated table at a newer slime)."""
    from trainstack.upstream.sync_slime import ARGS_JSON

    raw = json.loads(ARGS_JSON.read_text(encoding="utf-8"))
    raw["arguments"].append({"option_strings": [flag], "dest": dest, "source": "slime", "action": "_StoreAction",
                             "type": "float", "default": None, "choices": None, "nargs": None})
    path = tmp_path / "slime_args.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize("dest,flag", [("wandb_reward_shaping", "--wandb-reward-shaping"),
                                       ("sglang_logprob_temperature", "--sglang-logprob-temperature")])
def test_a_new_dest_with_a_formerly_excluded_prefix_changes_the_run_id(tmp_path, monkeypatch, dest, flag):
    """A prefix rule would have left these out of the identity; by name, a new dest counts until a
    reviewer says otherwise, and `sync_slime identity` names it for review."""
    from trainstack.upstream import argtable as at

    path = _table_with(tmp_path, dest, flag)
    out = tmp_path / "run_identity.json"
    shutil.copy(ROOT / "trainstack" / "data" / "run_identity.json", out)
    res = subprocess.run([sys.executable, "-m", "trainstack.upstream.sync_slime", "identity", "--table", str(path),
                          "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0 and f"new dest {dest} counts in the run_id" in res.stdout, res.stdout + res.stderr
    assert dest in json.loads(out.read_text())["identity"]
    table = at.ArgTable(json.loads(path.read_text()))
    monkeypatch.setattr(at, "load_table", lambda path=None: table)
    base, _ = build_from_overrides([])
    same, _ = build_from_overrides(["args.sglang_mem_fraction_static=0.5", "args.wandb_project=elsewhere"])
    new, _ = build_from_overrides([f"args.{dest}=0.5"])
    assert base.run_id == same.run_id  # listed as excluded: engine tuning, tracking
    assert new.run_id != base.run_id
