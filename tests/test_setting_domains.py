"""Every launcher's typed settings have a domain (trainstack/config/setting_domains.py, issue #36): a property
over setting x out-of-range value for every launcher's settings class, checked where configs are
typed (schema.to_typed), plus the reference grammars on their own."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainstack.config import setting_domains as sd
from trainstack.config.schema import to_typed


def _classes() -> dict[str, type]:
    from trainstack.commander.provider import PodRequest
    from trainstack.launch.lium_commander import LiumSettings
    from trainstack.launch.ray_job import RayJobSettings
    from trainstack.launch.slurm import SlurmSettings

    return {c.__name__: c for c in (PodRequest, LiumSettings, SlurmSettings, RayJobSettings)}


def test_every_domain_names_a_real_field_and_every_launcher_is_covered():
    from trainstack import registry

    classes = _classes()
    assert set(sd.DOMAINS) <= set(classes)
    for name, table in sd.DOMAINS.items():
        assert set(table) <= {f.name for f in dataclasses.fields(classes[name])}, name
    for launcher in registry.names():  # every launcher's settings are typed, and typed by domain where it has any
        settings_cls = registry.launcher_class(launcher).Settings
        numeric = [f.name for f in dataclasses.fields(settings_cls) if f.type in ("int", "float", "Optional[int]",
                                                                                  "Optional[float]", "str")]
        assert not numeric or settings_cls.__name__ in sd.DOMAINS, launcher


# out-of-range values by domain, of the field's own type (so the type check passes and the domain decides)
BAD = {
    sd.PORT: st.one_of(st.integers(max_value=0), st.integers(min_value=65536)),
    sd.COUNT: st.integers(max_value=0),
    sd.GPUS: st.one_of(st.integers(max_value=0), st.integers(min_value=65)),
    sd.NONNEG: st.floats(max_value=-1e-6, allow_nan=False, allow_infinity=False),
    sd.NONNEG_INT: st.integers(max_value=-1),
    sd.SECONDS: st.floats(max_value=0, allow_nan=False, allow_infinity=False),
    sd.USD: st.one_of(st.floats(max_value=0, allow_nan=False, allow_infinity=False),
                      st.floats(min_value=1e6 + 1, allow_nan=False, allow_infinity=False)),
    sd.URL: st.sampled_from(["not-a-url", "ftp://h:8780", "http://", "http://h:99999", "h:8780", ""]),
    sd.IMAGE: st.sampled_from(["You/Image:1", "a b", "img:", ":tag", "UPPER", "x//y", "-x/y", "x@sha256:zz"]),
    sd.NONEMPTY: st.sampled_from(["", " ", "\t"]),
    sd.ABS_PATH: st.sampled_from(["mnt", "./x", "~/x", ""]),
    sd.COUNTRY: st.sampled_from([["USA"], ["1x"], ["US", "Germany"]]),
    sd.SLURM_MEM: st.sampled_from(["lots", "0", "-5G", "5X", "1.5G"]),
}
GOOD = {sd.PORT: 8780, sd.COUNT: 2, sd.GPUS: 8, sd.NONNEG: 0.0, sd.NONNEG_INT: 0, sd.SECONDS: 5.0, sd.USD: 20.0,
        sd.URL: "https://commander.example:8780/", sd.IMAGE: "ghcr.io/you/trainstack-slime:0.1",
        sd.NONEMPTY: "gpu", sd.ABS_PATH: "/mnt", sd.COUNTRY: ["US", "de"], sd.SLURM_MEM: "80G"}
CASES = [(cls, field, d) for cls, table in sd.DOMAINS.items() for field, d in table.items()]


def _errors(cls_name: str, node: dict) -> list:
    _, errors = to_typed(_classes()[cls_name], node, "cluster.x.", lambda _k: "")
    return errors


@settings(max_examples=150, deadline=None)
@given(case=st.sampled_from(CASES), data=st.data())
def test_any_setting_out_of_its_domain_is_refused_with_the_fix(case, data):
    cls_name, field, domain = case
    bad = data.draw(BAD[domain])
    hints = {f.name: f.type for f in dataclasses.fields(_classes()[cls_name])}
    if "int" in str(hints[field]) and isinstance(bad, float):
        bad = int(bad) if abs(bad) < 2**62 else -1
    errors = _errors(cls_name, {field: bad})
    assert errors, (cls_name, field, bad)
    assert errors[0].key == f"cluster.x.{field}" and errors[0].fix, errors[0]
    assert _errors(cls_name, {field: GOOD[domain]}) == []  # the value in range is taken


@pytest.mark.parametrize("value,ok", [
    ("ubuntu", True), ("ubuntu:22.04", True), ("you/trainstack-slime:0.1", True),
    ("ghcr.io/thudm/slime:v0.3.1", True), ("localhost:5000/a/b_c__d-e:t", True),
    ("Registry.Example.com:443/ns/img@sha256:" + "a" * 64, True), ("a/b:tag@sha256:" + "0" * 64, True),
    ("You/Image", False), ("a b", False), ("img:", False), ("img:-tag", False), ("a/-b", False), ("a_/b", False),
])
def test_the_image_reference_grammar(value, ok):
    assert (sd._image(value) is None) is ok


@pytest.mark.parametrize("value,ok", [
    (60, True), ("60", True), ("1:30", True), ("2:00:00", True), ("1-12", True), ("1-12:30:00", True),
    ("UNLIMITED", True), (-5, False), (0, False), ("0", False), ("00:00:00", False), ("soon", False),
    ("1-", False), (True, False),
])
def test_slurm_times(value, ok):
    assert (sd._slurm_time(value) is None) is ok


def test_sbatch_options_are_checked_by_name_in_either_spelling():
    errors = _errors("SlurmSettings", {"sbatch": {"time": -5, "mem-per-gpu": "lots", "hold": True, "nodes": 0}})
    assert [e.key for e in errors] == ["cluster.x.sbatch.time", "cluster.x.sbatch.mem-per-gpu", "cluster.x.sbatch.nodes"]
    assert all(e.fix.startswith("set cluster.x.sbatch.") for e in errors)
