"""The commander's listing (`GET /v1/runs`) as SQLite builds it (store.listing_json) is the records the
store gives the rest of the commander (`[r.public() for r in store.runs(with_pods=True)]`), whatever
the runs, their leases, pods and progress; and a listed run's spec is decoded only when read."""
from __future__ import annotations

import json
import math
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainstack.commander import store as store_mod
from trainstack.commander.store import LazySpec, Store

NOW = 1_800_000_000.25

RUN = st.fixed_dictionaries({
    "sweep": st.one_of(st.none(), st.sampled_from(["s1", "s2"])),
    "phase": st.sampled_from(["pending", "starting", "running", "lost", "finished", "paused"]),
    "holder": st.one_of(st.none(), st.just(""), st.text("abc", min_size=1, max_size=4)),
    "expires": st.one_of(st.none(), st.floats(NOW - 100, NOW + 100)),
    "progress": st.dictionaries(st.sampled_from(["reward", "state", "last_checkpoint"]),
                                st.one_of(st.integers(0, 9), st.floats(0, 1), st.text("xyz", max_size=3)), max_size=3),
    "spend_limit": st.one_of(st.none(), st.floats(0, 100)),
    "message": st.one_of(st.none(), st.text(max_size=6)),
    "pods": st.lists(st.tuples(st.floats(0, 10), st.floats(NOW - 5000, NOW), st.one_of(st.none(), st.floats(0, 100))),
                     max_size=3),
})


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-12,
                                                                                             abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.lists(RUN, max_size=6), sweep=st.sampled_from([None, "s1"]))
def test_the_sql_listing_is_the_stores_records(runs, sweep, tmp_path_factory, monkeypatch):
    store = Store(tmp_path_factory.mktemp("c") / "c.db")
    with store.tx() as db:
        for i, r in enumerate(runs):
            db.execute("INSERT INTO runs(run_id, sweep, spec, settings, desired, phase, epoch, lease_holder, "
                       "lease_expires, progress, spend_limit, message, created, updated) "
                       "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       (f"run-{i}", r["sweep"], json.dumps({"run_id": f"run-{i}"}), json.dumps({"gpu_count": 8}),
                        "running", r["phase"], i, r["holder"], r["expires"], json.dumps(r["progress"]),
                        r["spend_limit"], r["message"], NOW - 10 + i % 2, NOW))
            for j, (price, rented, lived) in enumerate(r["pods"]):
                db.execute("INSERT INTO pods(pod_id, run_id, epoch, name, price_per_hour, rented, removed) "
                           "VALUES (?,?,?,?,?,?,?)", (f"p{i}-{j}", f"run-{i}", j, f"pod-{j}", price, rented + j,
                                                      None if lived is None else rented + j + lived))
    monkeypatch.setattr(store_mod.time, "time", lambda: NOW)
    expected = [r.public() for r in store.runs(sweep=sweep, with_pods=True)]
    got = json.loads(store.listing_json(sweep, now=NOW))
    store.close()
    assert _close(got, expected), (got, expected)


def test_a_listed_spec_is_decoded_only_when_read(tmp_path):
    spec = LazySpec('{"hub": {"repo_id": "a/b"}}')
    assert spec._data is None
    assert (spec.get("hub") or {}).get("repo_id") == "a/b" and dict(spec) == {"hub": {"repo_id": "a/b"}}
    assert spec == {"hub": {"repo_id": "a/b"}} and time.time() > 0
