"""A commander without a Hub token refuses Hub-synced runs when they are registered (its pods get their
HF_TOKEN from its environment). Before, it registered them, rented a pod, every push failed 401 for
the whole run, and the run ended `finished`, exit 0, with nothing on the Hub."""
from __future__ import annotations

import pytest

TOKEN = "admin-token-for-these-tests-0123456789"


@pytest.fixture
def commander(tmp_path):
    from fastapi.testclient import TestClient

    from trainstack.commander.api import create_app
    from trainstack.commander.reconciler import CommanderConfig
    from trainstack.commander.store import Store

    app = create_app(Store(tmp_path / "c.db"), CommanderConfig(public_url="http://127.0.0.1:9"), TOKEN,
                     lambda run_id: f"worker-{run_id}-0123456789")
    with TestClient(app) as c:
        c.headers["Authorization"] = f"Bearer {TOKEN}"
        yield c


def body(run_id: str, repo_id: str | None) -> dict:
    spec = {"run_id": run_id, "spec_version": 1, "hub": {"repo_id": repo_id, "private": True}}
    return {"run_id": run_id, "spec": spec, "settings": {"gpu_type": "RTX4090", "gpu_count": 1, "volume": "auto"}}


@pytest.mark.parametrize("var", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"])
def test_a_hub_synced_run_is_refused_by_a_commander_without_a_token(commander, monkeypatch, var):
    for v in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(v, raising=False)
    r = commander.post("/v1/runs", json=body("synced", "team/ckpts"))
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert "synced" in detail and "hub.repo_id=team/ckpts" in detail and "HF_TOKEN" in detail and "401" in detail
    assert commander.get("/v1/runs/synced").status_code == 404  # nothing registered, nothing rented
    # a run without Hub sync is not the commander's token's business
    assert commander.post("/v1/runs", json=body("local-only", None)).json()["registered"] is True
    # with a token to hand the pods, the same run registers
    monkeypatch.setenv(var, "hf_" + "x" * 30)
    assert commander.post("/v1/runs", json=body("synced", "team/ckpts")).json()["registered"] is True


def test_the_refusal_reaches_the_user_as_one_message(monkeypatch):
    from trainstack.hub.feature import register_check

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    why = register_check({"run_id": "r", "hub": {"repo_id": "a/b"}})
    assert why is not None and "\n" not in why and "hub.repo_id=null" in why
    assert register_check({"run_id": "r", "hub": {"repo_id": None}}) is None
    assert register_check({"run_id": "r"}) is None  # specs from before Hub sync have no hub block


def test_a_push_refused_for_its_credentials_says_what_to_do(fake_hub, tmp_path, monkeypatch):
    """Where the run executes without a token (a local run, a pod of an older commander), the failed push
    names the fix instead of only repeating a 401."""
    from hubtools import write_checkpoint
    from trainstack.hub.client import HubClient, credentials_hint
    from trainstack.hub.push import PushJob, push_checkpoint

    monkeypatch.delenv("HF_TOKEN", raising=False)
    write_checkpoint(tmp_path / "ck", 1)
    with pytest.raises(Exception) as ex:
        push_checkpoint(HubClient("team/ckpts"), PushJob("r", 1, str(tmp_path / "ck"), 1, {}), lambda: True)
    hint = credentials_hint(ex.value, "team/ckpts")
    assert hint is not None and "HF_TOKEN" in hint and "team/ckpts" in hint
    assert credentials_hint(RuntimeError("connection reset"), "team/ckpts") is None
