"""The fake Lium as pytest fixtures: an in-process fake (devtools/trainstack_dev/fakes/lium.py) and the
environment that points the real `lium.io` SDK at it (temporary HOME, its own SSH key)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from trainstack_dev.fakes.lium_pods import missing_requirements


@dataclass
class FakeLiumEnv:
    fake: "object"  # trainstack_dev.fakes.lium.FakeLium
    url: str
    env: dict[str, str]  # LIUM_* + HOME for the SDK (apply with monkeypatch or pass to a subprocess)
    home: Path

    def sdk(self):
        from lium import Config, Lium

        return Lium(config=Config(api_key=self.env["LIUM_API_KEY"], base_url=self.url,
                                  ssh_key_path=Path(self.env["LIUM_SSH_KEY_PATH"])))


def skip_without_pods() -> None:
    problem = missing_requirements()
    if problem:
        if os.environ.get("TRAINSTACK_REQUIRE_LIUM_FAKE") == "1":
            pytest.fail(f"fake Lium pods unavailable: {problem}")
        pytest.skip(problem)


@pytest.fixture
def fake_lium(tmp_path_factory, monkeypatch) -> Iterator[FakeLiumEnv]:
    """A fake Lium for one test; the SDK in this process points at it; every pod is killed after."""
    skip_without_pods()
    from trainstack_dev.fakes.lium import FakeLium, client_env, ensure_ssh_key

    base = tmp_path_factory.mktemp("lium")
    fake = FakeLium(base / "fake")
    url = fake.serve()
    home = base / "home"
    key = ensure_ssh_key(home / ".ssh" / "id_ed25519")
    env = client_env(url, fake.api_key, home=home, ssh_key=key)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        yield FakeLiumEnv(fake, url, env, home)
    finally:
        fake.close()
