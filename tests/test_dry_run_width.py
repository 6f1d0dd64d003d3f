"""The dry run fits the terminal: at COLUMNS=80 (and 200) no line is wider, the rules follow the width,
the command folds into a shell line that still runs as the one-line form, a path in a flag table folds
after a `/`, `-`, `.` (never `runs/ti` + `ny-grpo`), the numbers that decide a run are added up for the
reader, and the verdict comes first, with the summary under it (run, fresh/resume, launcher, GPUs, batch,
inputs, problems), and again last. `dry_run=short` prints only that block."""
from __future__ import annotations

import re
import subprocess

import pytest
from hypothesis import given, settings, strategies as st

from conftest import run_py
from tests.fakes import fake_gpu_host
from trainstack.terminal.tables import SOFT_CHARS

QWEN = ["experiment=qwen3-4B-grpo-dapo", "args.no_save_optim=true"]


def dry_run(tmp_path, overrides, columns, mode="true"):
    res = run_py(*overrides, f"dry_run={mode}", cwd=tmp_path, env={"COLUMNS": str(columns)})
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def flat(lines: list[str]) -> str:
    """The output's words with folding undone (a folded phrase reads as one)."""
    return re.sub(r"\s+", " ", " ".join(ln.strip() for ln in lines))


def command_of(lines: list[str]) -> str:
    """The command section's lines as printed (between the `command` rule and the verdict)."""
    start = next(i for i, ln in enumerate(lines) if ln.startswith("── command "))
    return "\n".join(lines[start + 1:-1])


def head(lines: list[str]) -> dict[str, str]:
    """The summary block under the verdict: {label: its text, folding undone}, up to the closing hint."""
    rows: dict[str, str] = {}
    label = ""
    for ln in lines[1:]:
        if ln.startswith("("):
            return rows
        m = re.match(r"  (\w[\w ]*?)  +(\S.*)", ln)
        if m and not ln.startswith("   "):
            label = m.group(1)
            rows[label] = m.group(2)
        else:
            rows[label] += " " + ln.strip()
    raise AssertionError(f"no closing hint under the summary: {lines[:30]}")


def value_pieces(lines: list[str], flag: str) -> list[str]:
    """A flag table row's value column, one piece per printed line."""
    i = next(i for i, ln in enumerate(lines) if ln.startswith(f"  {flag} "))
    col = len(lines[i]) - len(lines[i][len(flag) + 2:].lstrip())
    pieces = [lines[i][col:].split("  ")[0]]
    for ln in lines[i + 1:]:
        if ln[:col].strip() or not ln[col:col + 1].strip():
            break
        pieces.append(ln[col:].split("  ")[0])
    return pieces


def shell_words(command: str) -> list[str]:
    """The words bash makes of a command (backslash-newlines removed, quotes resolved)."""
    script = "set -- " + command + "\nprintf '%s\\0' \"$@\""
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.split("\0")[:-1]


@pytest.mark.parametrize("columns", [80, 200])
def test_cpu_default_fits_and_ends_with_the_verdict(tmp_path, columns):
    lines = dry_run(tmp_path, ["run_id=w1"], columns)
    too_wide = [ln for ln in lines if len(ln) > columns]
    assert not too_wide, too_wide
    rules = [ln for ln in lines if ln.startswith("── ")]
    assert len(rules) >= 7 and all(len(r) == columns for r in rules)  # not a fixed 100
    assert lines[0] == lines[-1] == "ok: ready to launch w1 on local"
    summary = head(lines)
    assert summary["run"] == "w1: fresh start (no run directory yet)" and summary["launcher"].startswith("local")
    assert summary["problems"] == "none" and "(env.prompt_data, env.eval_prompt_data)" in summary["inputs"]
    assert summary["batch"].startswith("16 prompts x 16 samples") and len(summary) <= 10
    save = value_pieces(lines, "--save")
    assert "".join(save) == f"{tmp_path}/runs/w1/checkpoints"
    assert all(p[-1] in SOFT_CHARS for p in save[:-1]), save  # folded after a `/` or `-`, never mid-word
    text = flat(lines)
    assert "16 prompts x 16 samples = 256 per rollout / global batch 128 = 2 optimizer steps per rollout" in text
    assert "ckpts 6 (every 50 of 300 rollouts, and the last) x 1.5 MiB = 9.2 MiB;" in text and " free at " in text
    assert "# unset (null or empty): name, output, objective, args, slime.root," in text  # one line, not a line each
    assert not [ln for ln in lines if re.match(r"\s*\w+: (null|\[\]|\{\})$", ln)]


@pytest.mark.parametrize("columns", [80, 200])
def test_gpu_recipe_fits_and_adds_up(tmp_path, columns):
    fake_gpu_host(tmp_path, QWEN)
    lines = dry_run(tmp_path, QWEN, columns)
    too_wide = [ln for ln in lines if len(ln) > columns]
    assert not too_wide, too_wide
    text = flat(lines)
    assert "data-parallel 4 = 8 GPUs / (TP 2 x PP 1 x CP 1)" in text
    assert "4 engines x 2 GPUs per engine" in text
    assert "32 prompts x 8 samples = 256 per rollout / global batch 256 = 1 optimizer step per rollout" in text
    assert "150 (every 20 of 3000 rollouts, and the last) x 7.5 GiB = 1.1 TiB" in text
    assert lines[-1].startswith("ok: ready to launch qwen3-4B-grpo-dapo-") and lines[-1].endswith(" on ray_job")
    assert lines[0] == lines[-1]
    summary = head(lines)
    assert summary["gpus"].startswith("8 (8 training on 1 node x 8") and "TP 2" in summary["parallel"]
    assert "1 optimizer step per rollout" in summary["batch"] and summary["run"].endswith("fresh start (no run "
                                                                                           "directory yet)")
    folded = command_of(lines)
    assert "\\\n" in folded and len(folded.splitlines()) > 5
    one_line = run_py(*QWEN, "dry_run=true", cwd=tmp_path, env={"COLUMNS": "100000"}).stdout.splitlines()[-2]
    words = shell_words(folded)
    assert words == shell_words(one_line)  # the folded command is the same command
    assert words[:3] == ["ray", "job", "submit"] and "--tensor-model-parallel-size" in words


def test_lium_preset_shows_its_price_and_a_sweep_fits(tmp_path):
    lines = dry_run(tmp_path, ["experiment=qwen3-4B-grpo-dapo", "cluster=lium_8xh100", "cluster.lium.pod.image=you/trainstack-slime:0.1"], 80)
    assert not [ln for ln in lines if len(ln) > 80]
    text = flat(lines)
    assert "at most $25.00 per hour (cluster.lium.pod.max_price_per_hour); no spend limit" in text
    assert lines[-1].startswith("ok: ready to launch qwen3-4B-grpo-dapo-") and lines[-1].endswith(" on lium")
    summary = head(lines)
    assert summary["launcher"] == "lium: the trainer runs on a lium host" and "$25.00 per hour" in summary["cost"]
    assert re.match(r"none \(8 host checks deferred to the lium host", summary["problems"]), summary
    short = dry_run(tmp_path, ["experiment=qwen3-4B-grpo-dapo", "cluster=lium_8xh100",
                               "cluster.lium.pod.image=you/trainstack-slime:0.1"], 80, "short")
    assert short[0] == lines[0] and head(short) == summary and len(short) <= 20, short  # the block, nothing else
    assert not [ln for ln in short if ln.startswith("── ") or len(ln) > 80]
    res = run_py("-m", "hydra/launcher=lium", "cluster=lium_8xh100", "cluster.lium.pod.image=you/trainstack-slime:0.1", "experiment=qwen3-4B-grpo-dapo",
                 "algo.lr=1e-6,2e-6", "+env.meta.http_env.url=http://127.0.0.1:9/a-very-long-path-for-the-env-server",
                 "dry_run=true", f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path, env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert sum(ln.startswith("ok  qwen3-4B-grpo-dapo-") for ln in out) == 2
    assert not (tmp_path / "sweep").exists()  # a dry sweep leaves no multirun.yaml behind
    assert not [ln for ln in out if len(ln) > 80], out


def test_a_pipe_without_columns_keeps_whole_lines(tmp_path):
    res = run_py("run_id=w2", "dry_run=true", cwd=tmp_path, env={"COLUMNS": ""})
    lines = res.stdout.splitlines()
    assert lines[-1] == "ok: ready to launch w2 on local"
    assert lines[-2].startswith("cd ") and " -m trainstack.tiny.train " in lines[-2]  # one line: grep-able


def test_a_bad_dry_run_value_names_the_choices(tmp_path):
    res = run_py("dry_run=shrt", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "error: dry_run: wrong type (str)" in res.stderr and "dry_run=short (the verdict and the summary)" in res.stderr
    assert not list(tmp_path.iterdir())  # nothing written


@settings(max_examples=100, deadline=None)
@given(value=st.one_of(st.text(max_size=12), st.integers(), st.floats(allow_nan=False), st.none(), st.booleans()))
def test_dry_run_takes_a_bool_or_short_only(value):
    from trainstack.config.schema import ROOT_SCALARS, check_value

    assert check_value(ROOT_SCALARS["dry_run"], value) == (isinstance(value, bool) or value == "short")
