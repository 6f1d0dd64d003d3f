"""Secrets by value, everywhere (issue #36): a value equal to a secret in the environment is hidden
wherever trainstack prints or writes it (the CLI's echoes, the files it writes, the trainer's
captured output), and only such values: ordinary words next to a colon are not scrubbed."""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from trainstack import secrets

SECRET = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=10, max_size=32)


@contextlib.contextmanager
def env_secret(value: str):
    old = os.environ.get("MY_SERVICE_TOKEN")
    os.environ["MY_SERVICE_TOKEN"] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MY_SERVICE_TOKEN", None)
        else:
            os.environ["MY_SERVICE_TOKEN"] = old


def _cli(*argv: str) -> str:
    from trainstack.cli import main as cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
        cli.main(list(argv))
    return out.getvalue() + err.getvalue()


def _config_error(secret: str) -> str:
    from trainstack.errors import ConfigError

    return ConfigError("hub.repo_id", f"cannot read alice/{secret}", f"check alice/{secret}", value=secret,
                       related={"x": secret}).render()


def _events(secret: str, tmp) -> str:
    from trainstack.run.rundir import RunDir

    rd = RunDir(tmp)
    rd.event("start_failed", error=f"plugin raised: token {secret} refused")
    rd.update_status(state="failed", error=f"401 for {secret}")
    return (tmp / "events.jsonl").read_text() + (tmp / "status.json").read_text()


CHANNELS = {
    "trainstack args": lambda s, tmp: _cli("args", s),
    "trainstack args --search": lambda s, tmp: _cli("args", "--search", s),
    "trainstack status": lambda s, tmp: _cli("status", s, "--runs-root", str(tmp)),
    "trainstack render override": lambda s, tmp: _cli("render", f"args.rollout_function_path=pkg.{s}.fn"),
    "an error's screen": lambda s, tmp: _config_error(s),
    "run dir records": _events,
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=SECRET, channel=st.sampled_from(sorted(CHANNELS)))
def test_a_secret_s_value_never_leaves_through_any_channel(secret, channel, tmp_path_factory):
    """Property over secret x output channel. Issue: `trainstack args $HF_TOKEN` printed the token."""
    tmp = tmp_path_factory.mktemp("ch")
    with env_secret(secret):
        out = CHANNELS[channel](secret, tmp)
    assert secret not in out, (channel, out[-500:])


def test_hub_ls_does_not_echo_a_secret_in_the_repo_id(tmp_path, monkeypatch):
    """Issue: `trainstack hub ls RUN --repo-id alice/$HF_TOKEN` printed the token in its error."""
    secret = "sekretvalue4242"
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "status.json").write_text("{}")
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: the client's error names the repo
    out = _cli("hub", "ls", "r1", "--runs-root", str(tmp_path), "--repo-id", f"alice/{secret}")
    assert "alice/<redacted>" in out and secret not in out


def test_the_trainer_s_output_is_scrubbed_in_its_log_and_on_the_console(tmp_path):
    """Issue: a plugin exception holding the token landed verbatim in logs/trainer.log."""
    secret = "sekret-from-the-env-77"
    log = tmp_path / "trainer.log"
    child = "import os, sys; print('Traceback: auth failed for', os.environ['HF_TOKEN']); print('rollout 1 ok')"
    res = subprocess.run([sys.executable, "-m", "trainstack.run.trainer_guard", "--log", str(log), "--", sys.executable, "-c",
                          child], env={**os.environ, "PYTHONPATH": str(ROOT), "HF_TOKEN": secret},
                         capture_output=True, text=True, timeout=60, start_new_session=True)  # the guard leads its group
    assert res.returncode == 0, res.stderr
    for text in (log.read_text(), res.stdout):
        assert secret not in text and "auth failed for <redacted>" in text and "rollout 1 ok" in text


WORDS = ["/etc/passwd", "key", "token", "secret", "password", "api_key", "passwd", "run", "not", "a", "sweep",
         "directory", "unknown", "the", "/runs/my_token", "keys", "hf_checkpoint", "x.key"]


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), seps=st.data())
def test_only_secret_values_are_scrubbed_never_ordinary_words(words, seps):
    """Issue: "/etc/passwd: <redacted> a sweep directory". Prose, paths and `word: word` in the middle of
    a line are no assignments (after `{`, `[` or `,` a name is a flow mapping's key, and hidden); with no
    secret in the environment nothing is hidden."""
    text = "error: " + "".join(w + seps.draw(st.sampled_from([" ", ": ", " ("])) for w in words)
    old = {k: os.environ.pop(k) for k in list(os.environ) if secrets.is_secret_name(k)}
    try:
        assert secrets.redact_text(text) == text
    finally:
        os.environ.update(old)


def test_assignments_by_name_are_still_hidden():
    for text, value in {"args.wandb_key=abc123": "abc123", '{"HF_TOKEN": "hf-secret-1"}': "hf-secret-1",
                        "router_api_key: [k1234, k5678]": "k1234", "  password: hunter22": "hunter22",
                        "error: bad value\n- token: abcdef12": "abcdef12"}.items():
        assert value not in secrets.redact_text(text), text


@pytest.mark.parametrize("text", ["error: /etc/passwd: not a sweep directory", "error: unknown key: foo",
                                  "error: runs/api_key: is not a run directory"])
def test_the_reported_over_scrubbing_cases(text):
    assert secrets.redact_text(text) == text
    assert json.loads(json.dumps(text)) == text
