"""`trainstack diff`: resolved-config and argv differences, YAML edits, exit codes, secrets."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tests.fakes import write_run_dir
from trainstack.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
EXP = "qwen3-4B-grpo-dapo"  # sets algo.lr=1e-6 (conf/experiment/qwen3-4B-grpo-dapo.yaml)
CURVE = {"rollout/raw_reward": [(0, 0.1), (1, 0.2)]}


def cli(*argv: str) -> tuple[int, str, str]:
    """The real CLI in-process; exit 2 comes as SystemExit from report_and_exit."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as ex:
            code = ex.code
    return code, out.getvalue(), err.getvalue()


def test_composed_specs_changed_added_and_argv_groups():
    code, out, _ = cli("diff", EXP, f"experiment={EXP} algo.lr=2e-6 args.sglang_mem_fraction_static=0.5")
    assert code == 1
    assert f"~ algo.lr: 1e-06 -> 2e-06   [conf/experiment/{EXP}.yaml -> command line `algo.lr=2e-6`]" in out
    assert "~ args.sglang_mem_fraction_static: 0.7 -> 0.5" in out  # the value that won, as the argv says
    meg = out.split("megatron argv:")[1].split("argv:")[0]
    assert "~ --lr 1e-06 -> 2e-06" in meg
    assert "~ --sglang-mem-fraction-static 0.7 -> 0.5" in out.split("sglang argv:")[1]


def test_equal_specs_exit_0_and_json():
    code, out, _ = cli("diff", EXP, f"experiment={EXP}", "--json")
    assert code == 0
    assert json.loads(out)["equal"] is True
    code, out, _ = cli("diff", f"experiment={EXP} algo.lr=2e-6", EXP, "--json")
    d = json.loads(out)
    assert code == 1 and not d["equal"]
    assert d["config"]["changed"] == [{"key": "algo.lr", "a": 2e-06, "b": 1e-06, "source_a": "command line `algo.lr=2e-6`",
                                       "source_b": f"conf/experiment/{EXP}.yaml"}]
    assert [e["flag"] for e in d["argv"]["megatron"]["changed"]][0] == "--lr"


def test_run_dirs_by_id_and_path(in_tmp):
    runs = in_tmp / "runs"
    a, ra = write_run_dir(runs, [f"experiment={EXP}"], CURVE)
    b, rb = write_run_dir(runs, [f"experiment={EXP}", "algo.eps_clip=0.3"], CURVE)
    code, out, _ = cli("diff", ra.run_id, str(b), "--runs-root", str(runs))
    assert code == 1
    assert "~ algo.eps_clip: 0.2 -> 0.3   [conf/algo/grpo.yaml -> command line `algo.eps_clip=0.3`]" in out
    assert "~ --eps-clip 0.2 -> 0.3" in out
    code, out, _ = cli("diff", ra.run_id, ra.run_id, "--runs-root", str(runs))
    assert code == 0 and "no differences" in out
    # --against-defaults: the run's experiment alone is the base; only the command-line change shows
    code, out, _ = cli("diff", str(b), "--against-defaults", "--json")
    d = json.loads(out)
    assert code == 1 and d["a"]["label"].startswith(f"experiment={EXP}")
    assert [c["key"] for c in d["config"]["changed"]] == ["algo.eps_clip"]


def test_yaml_edit_shows_up(tmp_path):
    """A change inside a YAML file (no override anywhere) is in the diff, attributed to that file."""
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    grpo = conf / "algo" / "grpo.yaml"
    grpo.write_text(grpo.read_text().replace("eps_clip_high: 0.28", "eps_clip_high: 0.35"))
    runs = tmp_path / "runs"
    a, _ = write_run_dir(runs, [f"experiment={EXP}"], CURVE)
    b, _ = write_run_dir(runs, [f"experiment={EXP}"], CURVE, conf_dir=str(conf))
    assert b != a  # a training-relevant change: a new run id
    code, out, _ = cli("diff", str(a), str(b))
    assert code == 1
    assert "~ algo.eps_clip_high: 0.28 -> 0.35   [conf/algo/grpo.yaml]" in out
    assert "~ --eps-clip-high 0.28 -> 0.35" in out
    # composed from the edited tree (--config-dir) against the run made with the original tree
    code, out, _ = cli("diff", "--config-dir", str(conf), str(a), EXP)
    assert code == 1 and "~ algo.eps_clip_high: 0.28 -> 0.35" in out
    code, out, _ = cli("diff", "--config-dir", str(conf), EXP, str(b))
    assert "algo.eps_clip_high" not in out


def test_secrets_redacted(tmp_path):
    import yaml

    runs = tmp_path / "runs"
    a, _ = write_run_dir(runs, [f"experiment={EXP}"], CURVE)
    b, _ = write_run_dir(runs, [f"experiment={EXP}", "algo.lr=3e-6"], CURVE)
    cfg = yaml.safe_load((b / "config.yaml").read_text())  # as an older/hand-made run could hold it
    cfg["args"]["wandb_key"] = "sk-very-secret-123"
    cfg["args"]["sglang_api_key"] = "also-secret-456"
    (b / "config.yaml").write_text(yaml.safe_dump(cfg))
    cmd = json.loads((b / "command.json").read_text())
    cmd["groups"]["slime"] += ["--wandb-key", "sk-very-secret-123"]
    (b / "command.json").write_text(json.dumps(cmd))
    for extra in ([], ["--json"]):
        code, out, err = cli("diff", str(a), str(b), *extra)
        assert code == 1
        assert "sk-very-secret-123" not in out + err and "also-secret-456" not in out + err
        assert "<redacted>" in out
    assert "+ args.wandb_key: <redacted>" in cli("diff", str(a), str(b))[1]
    assert "+ --wandb-key <redacted>" in cli("diff", str(a), str(b))[1]


def test_bad_input_exit_2_with_did_you_mean(tmp_path):
    runs = tmp_path / "runs"
    _, ra = write_run_dir(runs, [f"experiment={EXP}"], CURVE)
    code, out, err = cli("diff", ra.run_id[:-1] + "x", EXP, "--runs-root", str(runs))
    assert code == 2 and f"did you mean {ra.run_id}" in err and "Traceback" not in err
    code, _, err = cli("diff", "qwen3-4B-grpo-dap", EXP)
    assert code == 2 and f"did you mean {EXP}" in err
    code, _, err = cli("diff", f"experiment={EXP} algo.not_a_flag=1", EXP)
    assert code == 2 and "algo.not_a_flag" in err
    code, _, err = cli("diff", EXP)
    assert code == 2 and "--against-defaults" in err


def test_console_script_exit_codes(tmp_path):
    """The real `python -m trainstack.cli.main diff` process: 0 / 1 / 2 like diff(1)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(*a):
        return subprocess.run([sys.executable, "-m", "trainstack.cli.main", "diff", *a], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)

    assert run(EXP, EXP).returncode == 0
    assert run(EXP, f"experiment={EXP} algo.lr=5e-6").returncode == 1
    p = run("no-such-run", EXP)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "no-such-run" in p.stderr


def test_config_and_argv_say_the_same_change(tmp_path, monkeypatch):
    """The config part showed `env.num_rollout: 350 -> 300` while the argv part said `--num-rollout 350 -> 4`
    (B set it as args.num_rollout=4): a dest is compared by the value that won, as the argv renders it."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("diff", "env.num_rollout=350", "args.num_rollout=4")
    assert code == 1
    assert "~ args.num_rollout: 350 -> 4" in out and "~ --num-rollout 350 -> 4" in out
    assert "env.num_rollout: " not in out and "+ args.num_rollout" not in out  # not `350 -> 300` and an added 4
    assert max(len(ln) for ln in out.splitlines()) <= 80, out  # it was ~300 columns


def test_paths_under_each_runs_own_dir_are_hidden_unless_asked(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    a, _ = write_run_dir(runs, [f"experiment={EXP}", "run_id=own-a"], CURVE)
    b, _ = write_run_dir(runs, [f"experiment={EXP}", "run_id=own-b", "algo.lr=2e-6"], CURVE)
    code, out, _ = cli("diff", str(a), str(b))
    assert code == 1 and "--save" not in out.replace("(2 hidden: --save, --load", "") and "--lr" in out
    assert "(2 hidden: --save, --load name each run's own directory, which always differs; --paths shows them)" in \
        " ".join(out.split())
    code, out, _ = cli("diff", str(a), str(b), "--paths")
    assert f"~ --save {a}/checkpoints -> {b}/checkpoints" in out and "hidden" not in out


@settings(max_examples=6, deadline=None)
@given(dest=st.sampled_from([("num_rollout", "--num-rollout"), ("eps_clip", "--eps-clip"),
                             ("rollout_batch_size", "--rollout-batch-size")]),
       ns=st.tuples(st.sampled_from(["algo", "env", "args"]), st.sampled_from(["algo", "env", "args"])),
       values=st.tuples(st.integers(1, 9), st.integers(1, 9)))
def test_a_dest_set_under_any_namespace_is_one_change(dest, ns, values):
    """Over the class: a dest set under any namespace on either side is one config entry whose values are the
    argv's (the class of the reported num_rollout case)."""
    from trainstack.reports.diff import compose_side, diff_sides

    name, flag = dest
    va, vb = (v * 8 for v in values) if name != "eps_clip" else (v / 10 for v in values)
    d = diff_sides(compose_side([f"{ns[0]}.{name}={va}"], "a", None), compose_side([f"{ns[1]}.{name}={vb}"], "b", None))
    mine = [c for c in d["config"]["changed"] if c["key"].endswith(f".{name}")]
    argv = [e for g in d["argv"].values() for e in g["changed"] if e["flag"] == flag]
    if va == vb:
        assert not mine and not argv
    else:
        assert [(c["a"], c["b"]) for c in mine] == [(va, vb)] and mine[0]["key"] == f"{ns[1]}.{name}"
        assert [(float(e["a"]), float(e["b"])) for e in argv] == [(float(va), float(vb))]
