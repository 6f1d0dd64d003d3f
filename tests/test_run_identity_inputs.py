"""Inputs that would let runs collide or write outside runs_root are refused before anything runs."""
from __future__ import annotations

import pytest

from trainstack.errors import ConfigErrors
from trainstack.render.pipeline import build_from_overrides


@pytest.mark.parametrize("run_id", [".", "..", "a" * 129, "a/b", "x y"])
def test_run_id_that_cannot_name_a_directory_is_refused(run_id):
    with pytest.raises(ConfigErrors) as err:
        build_from_overrides([f"run_id='{run_id}'"])
    assert [e.key for e in err.value.errors] == ["run_id"]


def test_longest_allowed_run_id_is_accepted():
    run, _ = build_from_overrides(["run_id=" + "a" * 128])
    assert run.run_dir.endswith("/" + "a" * 128)


@pytest.mark.parametrize("override,key", [
    ("resume.lease_ttl_s=0", "resume.lease_ttl_s"), ("resume.lease_ttl_s=-5", "resume.lease_ttl_s"),
    ("resume.lease_ttl_s=0.5", "resume.lease_ttl_s"), ("resume.lease_ttl_s=inf", "resume.lease_ttl_s"),
    ("resume.grace_s=-1", "resume.grace_s"), ("resume.grace_s=nan", "resume.grace_s"),
    ("resume.lease_ttl_s=60", "resume.lease_ttl_s"),  # too short for the default 30 s grace (>= 96)
    ("resume.lease_ttl_s=10 resume.grace_s=5", "resume.lease_ttl_s"),
])
def test_lease_ttl_and_grace_are_checked(override, key):
    with pytest.raises(ConfigErrors) as err:
        build_from_overrides(override.split())
    assert key in [e.key for e in err.value.errors]


def test_default_lease_settings_pass():
    build_from_overrides(["resume.lease_ttl_s=6", "resume.grace_s=0"])
    build_from_overrides(["resume.lease_ttl_s=96"])
