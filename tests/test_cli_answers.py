"""Every subcommand answers bad input with the real cause and the fix that applies (issue #36): the
run directory Hydra is told to use, Hydra's own flags, an env server's port, an unreadable file that
is not corrupt, a corrupt spec whose fix is to move it aside, one broken run among many in `status`,
and the runs root every command looks under."""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, files_under, run_py
from trainstack.cli import main as cli

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def trainstack(*argv: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainstack", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**ENV, **env})


def test_a_run_dir_hydra_cannot_create_is_refused_and_a_refused_run_leaves_none(tmp_path):
    """Issue: hydra.run.dir=/proc/x was a FileNotFoundError traceback, and a refused run kept the
    directory Hydra had created for it."""
    res = run_py("hydra.run.dir=/proc/x", "dry_run=true", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "error: hydra.run.dir: /proc/x cannot be created in /proc" in res.stderr
    res = run_py(f"hydra.run.dir={tmp_path}/new/deeper", "args.lr=-1", "dry_run=true", cwd=tmp_path)
    assert res.returncode == 2 and "args.lr" in res.stderr
    assert files_under(tmp_path) == []  # not even new/deeper


def test_an_env_server_port_out_of_range_or_taken(tmp_path):
    for port in ("-1", "99999"):
        res = trainstack("env", "serve", "chain_sum", "--port", port, cwd=tmp_path)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
        assert f"error: --port: {port} is not a TCP port" in res.stderr and "[1, 65535]" in res.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = trainstack("env", "serve", "chain_sum", "--port", str(port), cwd=tmp_path)
    assert res.returncode == 5 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"cannot listen on 127.0.0.1:{port}" in res.stderr and "pick another --port" in res.stderr


def test_an_unreadable_file_is_not_called_corrupt(tmp_path, monkeypatch):
    from trainstack.run.rundir import check

    (tmp_path / "status.json").write_text('{"state": "finished"}')
    real = Path.read_bytes

    def denied(self):
        if self.name == "status.json":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    err = check.file_problem(tmp_path, "status.json")
    assert err is not None and "corrupt" not in err.problem and "cannot be read (Permission denied)" in err.problem
    assert "chmod u+r" in err.fix and "nothing needs restoring" in err.fix


def test_a_corrupt_spec_s_fix_is_to_move_it_aside_and_relaunch(tmp_path):
    from trainstack.run.rundir import check

    (tmp_path / "spec.json").write_text("{bad")
    err = check.file_problem(tmp_path, "spec.json")
    assert err is not None and "is corrupt" in err.problem
    assert f"mv {tmp_path}/spec.json {tmp_path}/spec.json.corrupt" in err.fix and "resumes" in err.fix
    assert "starts from scratch" not in err.fix


def _run_dir(root: Path, run_id: str, state: str = "finished") -> Path:
    rd = root / run_id
    rd.mkdir(parents=True)
    (rd / "status.json").write_text(json.dumps({"state": state, "run_id": run_id}))
    return rd


def test_status_shows_the_readable_runs_and_names_the_broken_one(tmp_path, capsys):
    from trainstack.reports.status import run_status

    _run_dir(tmp_path, "good")
    (_run_dir(tmp_path, "broken") / "spec.json").write_text("{bad")
    with pytest.raises(SystemExit) as exc:
        run_status([], runs_root=str(tmp_path), wide=True)
    out = capsys.readouterr()
    assert exc.value.code == 2
    assert "good" in out.out and "finished" in out.out and "corrupt: spec.json (below)" in out.out
    assert f"error: {tmp_path}/broken/spec.json: spec.json is corrupt" in out.err and "Traceback" not in out.err


def _runs_root_defaults(monkeypatch) -> dict[str, str]:
    """Every subcommand's --runs-root default, read off the parser trainstack builds."""
    seen: dict[str, str] = {}

    def capture(self, args=None, namespace=None):
        def walk(parser: argparse.ArgumentParser, path: str) -> None:
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    for name, sub in action.choices.items():
                        walk(sub, f"{path} {name}".strip())
                elif action.dest == "runs_root":
                    seen[path] = action.default
        walk(self, "")
        raise SystemExit(0)

    monkeypatch.setattr(cli._Parser, "parse_args", capture)
    monkeypatch.setattr(cli._Parser, "parse_known_args", capture)  # what main() calls (trailing positionals)
    with pytest.raises(SystemExit):
        cli.main(["status"])
    return seen


def test_every_command_honours_the_runs_root_of_the_environment(monkeypatch, tmp_path):
    """Issue: `trainstack resume` and `trainstack hub` looked under ./runs whatever $TRAINSTACK_RUNS_ROOT said."""
    monkeypatch.setenv("TRAINSTACK_RUNS_ROOT", str(tmp_path / "elsewhere"))
    defaults = _runs_root_defaults(monkeypatch)
    assert {"resume", "hub ls", "hub pull", "status", "cancel", "exec", "compare"} <= set(defaults)
    assert {k: v for k, v in defaults.items() if v != str(tmp_path / "elsewhere")} == {}
