"""The Python API (docs/api.md): the doc's code runs as written, with the CLI's semantics and typed errors."""
from __future__ import annotations

import re
import subprocess
import dataclasses
import sys

import pytest

from conftest import ROOT

DOC = ROOT / "docs" / "api.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_importing_trainstack_does_not_import_the_api():
    code = "import sys, trainstack; assert 'trainstack.api' not in sys.modules; trainstack.Run; " \
           "assert 'trainstack.api' in sys.modules; print(trainstack.ConfigErrors.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "trainstack.errors"


def test_doc_examples_run_as_written(tmp_path, monkeypatch, capsys):
    """Every python block of docs/api.md, in order, in one namespace, in a scratch directory: a short CPU run."""
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks()
    assert len(blocks) >= 3
    scope: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), scope)  # noqa: S102 - the documented example itself
    out = capsys.readouterr().out
    assert "ok: ready to launch api-demo on local" in out and "fresh start (no run directory yet)" in out
    assert "16 prompts x 16 samples = 256 per rollout / global batch 128 = 2 optimizer steps per rollout" in out
    assert "resuming from rollout 1 (next: 2)" in out and "env.num_rollout: 2 -> 3" in out
    assert "env.num_rolout -> did you mean 'env.num_rollout'?" in out
    assert (tmp_path / "runs" / "api-demo" / "spec.json").is_file()
    # the same run as the CLI sees it
    res = subprocess.run([sys.executable, "-m", "trainstack.cli.main", "status", "api-demo", "--json"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert res.returncode == 0 and '"state": "finished"' in res.stdout, res.stdout + res.stderr


def test_compose_matches_the_cli_and_errors_are_typed(tmp_path, monkeypatch):
    import trainstack
    from trainstack.render.pipeline import build_from_overrides

    monkeypatch.chdir(tmp_path)
    run = trainstack.Run.compose(["algo.lr=2e-6"], experiment="cpu-smoke")
    ref, cmd = build_from_overrides(["experiment=cpu-smoke", "algo.lr=2e-6"])
    assert (run.run_id, run.argv, run.launcher) == (ref.run_id, cmd.full_argv(), "local")
    check = run.dry_run()
    assert check.argv == cmd.full_argv() and check.env == cmd.redacted_env() and not check.deferred
    with pytest.raises(trainstack.ConfigErrors) as err:
        trainstack.Run.compose(["args.rollout_batchsize=64", "cluster.num_nodes=0"])
    keys = {e.key: e for e in err.value.errors}
    assert "args.rollout_batchsize" in keys and keys["args.rollout_batchsize"].fix
    assert "nothing was launched" in str(err.value)
    with pytest.raises(trainstack.ConfigErrors, match="list of overrides"):
        trainstack.Run.compose("env.num_rollout=2")  # type: ignore[arg-type]


def test_opened_runs_and_diff_sides(tmp_path, monkeypatch):
    import trainstack

    monkeypatch.chdir(tmp_path)
    with pytest.raises(trainstack.ConfigErrors) as err:
        trainstack.Run.open("no-such-run")
    assert err.value.errors[0].key == "no-such-run"
    d = trainstack.diff_runs("default", ["algo.lr=2e-6"])
    assert not d.equal and [c["key"] for c in d.config["changed"]] == ["algo.lr"] and "--lr 0.001 -> 2e-06" in d.text
    assert trainstack.diff_runs(["env.num_rollout=4"], "env.num_rollout=4").equal
    with pytest.raises(trainstack.ConfigErrors) as err:
        trainstack.diff_runs("nope-1", "nope-2")
    assert [e.key for e in err.value.errors] == ["nope-1", "nope-2"]  # both sides named at once


def test_a_failed_launch_raises_with_its_result(tmp_path, monkeypatch):
    import trainstack

    monkeypatch.chdir(tmp_path)
    run = trainstack.Run.compose(["env.num_rollout=1", "run_id=api-fail"])
    run.launch()
    opened = trainstack.Run.open("api-fail")
    assert opened.status().state == "finished" and opened.argv == run.argv
    with pytest.raises(trainstack.ConfigErrors, match="needs a composed run"):
        opened.dry_run()
    assert opened.wait(timeout=5).state == "finished"
    status_file = tmp_path / "runs" / "api-fail" / "status.json"
    status_file.write_text(status_file.read_text().replace('"finished"', '"running"'))
    # "running" with no live lease holder is a lost run: waiting for it ends at once, saying so
    assert opened.wait(timeout=5, interval=0.1).state.startswith("lost (")
    live = dataclasses.replace(opened.status(), state="running")
    with monkeypatch.context() as m:  # a run whose holder is alive: waiting times out
        m.setattr(opened, "status", lambda: live)
        with pytest.raises(TimeoutError, match="api-fail is still running"):
            opened.wait(timeout=0.3, interval=0.1)
    refused = trainstack.Run.compose(["env.num_rollout=1", "run_id=api-fail-2", "env.custom_rm_path=json.loads"])
    with pytest.raises(trainstack.ConfigErrors, match="but slime calls it as await fn"):  # refused before launch
        refused.launch()
    (tmp_path / "raising_rm.py").write_text("async def reward(args, sample, **kwargs):\n    raise RuntimeError('down')\n")
    bad = trainstack.Run.compose(["env.num_rollout=1", "run_id=api-fail-2", "env.custom_rm_path=raising_rm.reward",
                                  f"runtime_env.pythonpath=[{tmp_path}]"])
    with pytest.raises(trainstack.RunFailed) as failed:  # the reward function raises in rollout 0: exit 1
        bad.launch()
    assert failed.value.result.exit_code == 1 and failed.value.result.state == "failed"
    assert "api-fail-2" in str(failed.value)
    assert bad.launch(check=False).exit_code == 1


def test_version_names_the_package_and_the_slime_commit():
    from trainstack import __version__
    from trainstack.upstream.argtable import load_table

    res = subprocess.run([sys.executable, "-m", "trainstack.cli.main", "--version"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    commit = load_table().slime_commit
    assert res.stdout.strip() == f"trainstack {__version__} (slime argument table at commit {commit})"
    assert len(commit) == 40


def test_a_config_dir_adds_its_presets(tmp_path, monkeypatch):
    import trainstack

    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "my-conf" / "experiment"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("# @package _global_\ndefaults:\n  - override /env: arithmetic\n"
                                    "name: mine\nenv:\n  num_rollout: 7\n")
    run = trainstack.Run.compose(["algo.lr=2e-6"], experiment="mine", config_dir=tmp_path / "my-conf")
    assert run.run_id.startswith("mine-") and "--num-rollout" in run.argv
    assert run.argv[run.argv.index("--num-rollout") + 1] == "7" and run.argv[run.argv.index("--lr") + 1] == "2e-06"
    assert trainstack.Run.compose(experiment="cpu-smoke", config_dir=tmp_path / "my-conf").run_id.startswith(
        "cpu-smoke-")  # the packaged presets are still there
    with pytest.raises(trainstack.ConfigErrors) as err:
        trainstack.Run.compose(experiment="mine")  # not without the directory: the CLI's did-you-mean
    assert err.value.errors[0].key == "experiment"
    with pytest.raises(trainstack.ConfigErrors) as err:
        trainstack.Run.compose(config_dir=tmp_path / "nope")
    assert err.value.errors[0].key == "config_dir"


def test_readme_links_the_api_doc_and_every_doc_link_resolves():
    text = (ROOT / "README.md").read_text()
    assert "[docs/api.md](docs/api.md)" in text
    for path, anchor in re.findall(r"\]\((docs/[\w.-]+\.md)(?:#([\w-]+))?\)", text):
        doc = ROOT / path
        assert doc.is_file(), path
        if anchor:
            slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                     for h in re.findall(r"^#+ (.*)$", doc.read_text(), re.M)}
            assert anchor in slugs, (path, anchor)
