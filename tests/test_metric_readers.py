"""The fast metric readers read what the reference readers read: TensorBoard event files decoded with
array operations (trainstack/metrics/tensorboard.py) against tensorboard's own record loader, and
metrics.jsonl parsed in one call against a line-by-line parse; status reads and checks only the
file's end; a sweep point's plain tree equals OmegaConf's conversion minus the hydra node."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT

from trainstack.metrics import finish, jsonl
from trainstack.metrics import tensorboard as tb


def reference(paths: list[Path]):
    """tensorboard's own loader, record by record, CRCs and all (what trainstack used before)."""
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
    from tensorboard.util import tensor_util

    raw: dict[str, dict[float, float]] = {}
    for path in sorted(paths, key=lambda p: p.name):
        for event in LegacyEventFileLoader(str(path)).Load():
            if not event.HasField("summary"):
                continue
            for v in event.summary.value:
                kind = v.WhichOneof("value")
                if kind == "simple_value":
                    raw.setdefault(v.tag, {})[float(event.step)] = float(v.simple_value)
                elif kind == "tensor":
                    arr = tensor_util.make_ndarray(v.tensor)
                    if arr.size == 1:
                        raw.setdefault(v.tag, {})[float(event.step)] = float(arr.reshape(-1)[0])
    return finish(raw)


def write_events(d: Path, events: list[tuple[int, str, float]], histogram_at: int | None = None) -> Path:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    d.mkdir(parents=True, exist_ok=True)
    w = EventFileWriter(str(d))
    for i, (step, tag, value) in enumerate(events):
        w.add_event(Event(step=step, wall_time=1.7e9 + i, summary=Summary(value=[Summary.Value(tag=tag,
                                                                                               simple_value=value)])))
        if histogram_at == i:
            w.add_event(Event(step=step, wall_time=1.7e9 + i, summary=Summary(value=[Summary.Value(
                tag="hist", histo=HistogramProto(min=0, max=1, num=2))])))
    w.close()
    return next(d.glob("events.out.tfevents.*"))


EVENTS = [(s, t, (s * 7 % 13) / 3 + k) for s in (0, 1, 2, 127, 128, 300, 16383, 16384, 2**21 + 5)
          for k, t in enumerate(("rollout/raw_reward", "train/loss", "eval/arithmetic-truncated_ratio"))]


@pytest.fixture(params=["arrays", "plain"])
def decoder(request, monkeypatch):
    """Both fast decoders: numpy's array operations (a large file) and plain Python (a small one)."""
    monkeypatch.setattr(tb, "SMALL_FILE", 0 if request.param == "arrays" else 2**40)
    return request.param


def test_scalar_file_decoded_at_once_equals_the_record_loader(tmp_path, decoder):
    path = write_events(tmp_path / "tb", EVENTS + [(2, "rollout/raw_reward", 9.5)])  # step 2 written again
    data = path.read_bytes()
    raw: dict = {}
    assert tb._fast(data, raw)  # a fast path took it (no fallback)
    assert finish(raw) == reference([path])
    assert finish(raw)["rollout/raw_reward"][2] == (2.0, 9.5)  # the last write of a step wins


def test_torn_last_record_and_other_summaries(tmp_path, decoder):
    path = write_events(tmp_path / "a", EVENTS)
    data = path.read_bytes()
    for cut in (1, 4, 9, 15, 30):  # a write cut by a kill: the whole records before it are read
        path.write_bytes(data[:-cut])
        assert tb.read_files([path]) == reference([path]), cut
    mixed = write_events(tmp_path / "b", EVENTS, histogram_at=4)
    assert not tb._fast(mixed.read_bytes(), {})  # a histogram: decoded event by event instead
    assert tb.read_files([mixed]) == reference([mixed])


def test_several_files_in_order(tmp_path, decoder):
    import time

    first = write_events(tmp_path / "tb", EVENTS[:9])
    time.sleep(1.1)  # file names start with the creation second
    write_events(tmp_path / "tb", [(1, "rollout/raw_reward", 42.0)] + EVENTS[9:])
    files = sorted((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(files) == 2 and first in files
    assert tb.read(tmp_path) == {} and tb.read_files(files) == reference(files)
    assert dict(tb.read_files(files)["rollout/raw_reward"])[1.0] == 42.0


_TAGS = st.sampled_from(["rollout/raw_reward", "train/loss", "eval/x", "a" * 40, "é/ü"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(st.tuples(st.integers(0, 2**29), _TAGS, st.floats(width=32, allow_nan=False)), max_size=30),
       histogram_at=st.none() | st.integers(0, 30), cut=st.integers(0, 40))
def test_the_plain_decoder_answers_as_the_array_decoder_and_the_record_loader(tmp_path_factory, events, histogram_at,
                                                                              cut):
    """Any scalar file (steps past the 4-byte varint, repeated steps, a histogram among them, a torn end): a small
    file's plain-Python decode (what a run's end reads for its digest) gives what numpy's gives, and both what
    tensorboard's own loader reads; each either takes the whole file or adds nothing."""
    path = write_events(tmp_path_factory.mktemp("tb"), events, histogram_at)
    data = path.read_bytes()
    data = data[:len(data) - cut] if cut < len(data) else data
    path.write_bytes(data)
    plain: dict = {}
    arrays: dict = {}
    took_plain = tb._fast_small(data, plain)
    import numpy  # noqa: F401  (the array path, whatever the file's size)

    old = tb.SMALL_FILE
    tb.SMALL_FILE = 0
    try:
        took_arrays = tb._fast(data, arrays)
        assert tb.read_files([path]) == reference([path])
    finally:
        tb.SMALL_FILE = old
    assert took_plain == took_arrays
    assert finish(plain) == finish(arrays)
    if took_plain:
        assert finish(plain) == reference([path])
    else:
        assert plain == {}
    assert tb.read_files([path]) == reference([path])


def test_masked_crc_matches_tensorboards():
    import os

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    for _ in range(50):
        b = os.urandom(8)
        assert tb.masked_crc32c(b) == masked_crc32c(b)


def test_jsonl_one_parse_equals_line_by_line(tmp_path):
    lines = [json.dumps({"step_key": "rollout/step", "step": i, "metrics": {"rollout/raw_reward": i / 10}})
             for i in range(50)]
    assert jsonl.parse_lines(lines) == [json.loads(x) for x in lines]
    assert jsonl.parse_lines(['{"a": 1}, {"b": 2}']) is None  # two values on one line is not a record
    assert jsonl.parse_lines(["not json"]) is None
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines[:20] + ["garbage", "[1]"] + lines[20:]) + '\n{"cut')
    series = jsonl.read(tmp_path)
    assert [s for s, _ in series["rollout/raw_reward"]] == [float(i) for i in range(50)]


def test_tail_series_widens_until_it_holds_the_metric(tmp_path):
    lines = [json.dumps({"step_key": "rollout/step", "step": 0, "metrics": {"rollout/raw_reward": 0.5}})]
    lines += [json.dumps({"step_key": "train/step", "step": i, "metrics": {"train/loss": 1.0, "pad": "x" * 100}})
              for i in range(3000)]  # 400 KB of train lines after the only reward
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    got = jsonl.tail_series(tmp_path, "rollout/raw_reward", size=4096)
    assert got["rollout/raw_reward"] == [(0.0, 0.5)]
    assert got["train/loss"][-1] == (2999.0, 1.0)


def test_status_checks_the_tail_it_reads(tmp_path):
    from trainstack.errors import ConfigErrors
    from trainstack.run.rundir.progress import progress, require_readable_tails

    d = tmp_path / "run"
    d.mkdir()
    good = [json.dumps({"step_key": "rollout/step", "step": i, "metrics": {"rollout/raw_reward": i / 100}})
            for i in range(300)]
    (d / "metrics.jsonl").write_text("\n".join(good) + "\n")
    require_readable_tails([d])
    done = progress(d)
    assert (done.rollouts, done.reward) == (300, 2.99)
    (d / "metrics.jsonl").write_text("\n".join(good + ["{broken"] + good[:1]) + "\n")
    with pytest.raises(ConfigErrors) as err:
        require_readable_tails([d])
    assert "metrics.jsonl is corrupt" in err.value.errors[0].problem and "of its last" in err.value.errors[0].problem


def test_plain_tree_of_a_sweep_point_leaves_the_hydra_node_out():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    from trainstack.config.resolve import CONF_DIR, plain_tree

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", overrides=["experiment=qwen3-4B-grpo-dapo", "run_id=p-${hydra:job.num}"],
                          return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.job.num = 7
            cfg.hydra.job.id = "7"
        HydraConfig.instance().set_config(cfg)
        want = OmegaConf.to_container(cfg, resolve=True)
        want.pop("hydra")
        got = plain_tree(cfg)
        assert got == want and got["run_id"] == "p-7"
    finally:
        GlobalHydra.instance().clear()


def test_git_provenance_is_asked_once_per_process():
    from trainstack.run import spec as runspec

    runspec.checkout_state.cache_clear()
    a = runspec.make_provenance("x", "/")
    b = runspec.make_provenance("x", "/")
    assert (a.git_sha, a.git_dirty) == (b.git_sha, b.git_dirty)
    assert runspec.checkout_state.cache_info().misses == 1


def test_a_short_runs_metrics_are_read_without_numpy_or_protobuf(tmp_path):
    """A run's end sums its metrics up (metrics_digest.json): a small file is decoded in plain Python, so the
    launcher does not import numpy and protobuf (~70 ms) after its trainer has ended."""
    path = write_events(tmp_path / "tb", EVENTS)
    code = ("import sys; from pathlib import Path; from trainstack.metrics import tensorboard as tb; "
            f"got = tb.read_files([Path({str(path)!r})]); "
            "assert got and 'numpy' not in sys.modules and 'google.protobuf' not in sys.modules, sorted(sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
