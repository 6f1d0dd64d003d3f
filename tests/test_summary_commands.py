"""The commands a finished run prints (resume, more) paste back into `run.py` as they are, including
overrides that add a key the presets do not have (`+env.meta.http_env.serve.options=...`)."""
from __future__ import annotations

import io
import shlex

import pytest

from trainstack.reports.display import pasteable, print_summary
from trainstack.errors import ConfigErrors
from trainstack.render.pipeline import build_from_overrides
from trainstack.run.spec import RunSpec

TYPED = ["experiment=cpu-agentic", "+env.meta.http_env.serve.options={turns: 9}", "env.num_rollout=2", "algo.lr=2e-6", "run_id=paste-1"]


def printed(tmp_path, monkeypatch) -> dict[str, str]:
    monkeypatch.chdir(tmp_path)
    run, cmd = build_from_overrides(TYPED)
    out = io.StringIO()
    print_summary(RunSpec.from_run(run, cmd), 0, file=out)
    lines = {ln.split()[0]: ln for ln in out.getvalue().splitlines() if ln.strip()}
    return {k: lines[k].split(None, 1)[1].split("  #")[0].strip() for k in ("resume", "more")}


def test_the_stored_spec_drops_the_plus_that_pasting_needs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run, cmd = build_from_overrides(TYPED)
    stored = RunSpec.from_run(run, cmd).overrides
    assert stored[1] == "env.meta.http_env.serve.options={turns: 9}"
    with pytest.raises(ConfigErrors):  # what the summary printed before: not a command that runs
        build_from_overrides(stored)


def test_resume_and_more_commands_compose_to_the_same_run(tmp_path, monkeypatch):
    cmds = printed(tmp_path, monkeypatch)
    resume = shlex.split(cmds["resume"])
    assert resume[:2] == ["trainstack", "run"] and "++env.meta.http_env.serve.options={turns: 9}" in resume  # not in a checkout
    again, _ = build_from_overrides(resume[2:])
    assert again.run_id == "paste-1" and again.meta["env"]["http_env"]["serve"]["options"] == {"turns": 9}
    more = shlex.split(cmds["more"].replace("<N>", "5"))
    assert "env.num_rollout=2" not in more
    grown, _ = build_from_overrides(more[2:])
    assert grown.run_id == "paste-1" and grown.args["num_rollout"] == 5 and grown.args["lr"] == 2e-6


def test_pasteable_keeps_what_already_pastes():
    assert pasteable("env.num_rollout=3") == "env.num_rollout=3"
    assert pasteable("model=qwen3-4B") == "model=qwen3-4B"
    assert pasteable("++env.meta.x=1") == "++env.meta.x=1"
    assert pasteable("~env.meta.prepare") == "~env.meta.prepare"
    assert pasteable("model.meta.params=5") == "++model.meta.params=5"


def test_the_summary_fits_a_narrow_terminal_and_its_commands_still_paste(tmp_path, monkeypatch):
    import subprocess

    whole = printed(tmp_path, monkeypatch)["resume"]
    monkeypatch.setenv("COLUMNS", "60")
    run, cmd = build_from_overrides([*TYPED, "paths.runs_root=" + str(tmp_path / "a-long-runs-root-directory-name")])
    out = io.StringIO()
    print_summary(RunSpec.from_run(run, cmd), 0, file=out)
    lines = out.getvalue().splitlines()
    assert lines and all(len(ln) <= 60 for ln in lines), [ln for ln in lines if len(ln) > 60]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("resume "))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("exec "))
    folded = "\n".join(ln for ln in lines[start:end] if not ln.lstrip().startswith("#"))[len("resume   "):]
    assert "\\\n" in folded
    script = "set -- " + folded + "\nprintf '%s\\0' \"$@\""
    words = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
    assert words == shlex.split(whole) + ["paths.runs_root=" + str(tmp_path / "a-long-runs-root-directory-name")]
