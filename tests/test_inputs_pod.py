"""Where a Lium pod finds its inputs (docs/inputs.md, "On Lium"), without pods: the pod's copy of the
spec runs slime from the image's slime root and keeps models on the run's volume; cache links survive
the volume being mounted elsewhere; a failed exec's reason is its first error line."""
from __future__ import annotations

import os
import re
import shutil

from conftest import ROOT

RECIPE = ["experiment=qwen3-4B-grpo-dapo", "cluster=lium_8xh100"]


def _pod_spec(tmp_path, *extra: str) -> dict:
    from trainstack.launch.lium import pod_request, pod_spec
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.run.spec import RunSpec

    run, cmd = build_from_overrides([*RECIPE, f"paths.runs_root={tmp_path}/runs", *extra])
    spec = RunSpec.from_run(run, cmd)
    return pod_spec(spec, pod_request(spec))


def test_the_pod_runs_slime_from_the_images_root_and_keeps_models_on_the_volume(tmp_path):
    from trainstack.commander.provider import PodRequest
    from trainstack.inputs.prepare import for_run

    d = _pod_spec(tmp_path)
    image_root = PodRequest().slime_root
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert re.search(rf"TRAINSTACK_SLIME_ROOT={re.escape(image_root)}\b", dockerfile)  # one slime root: the image's
    assert d["command"]["entrypoint"][1] == f"{image_root}/train.py" and d["command"]["cwd"] == image_root
    assert d["args"]["hf_checkpoint"] == "/mnt/trainstack/models/Qwen3-4B"
    assert d["args"]["ref_load"] == "/mnt/trainstack/models/Qwen3-4B_torch_dist"
    assert d["config"]["paths"]["models_root"] == "/mnt/trainstack/models"
    assert d["config"]["paths"]["data_root"] == "/workspace/trainstack/data"
    assert d["args"]["prompt_data"] == "/workspace/trainstack/data/dapo-math-17k/dapo-math-17k.jsonl"

    class Cluster:
        backend, gpus_per_node = "slime", 8

    sources, conv = for_run(d["config"], d["args"], Cluster, "")  # what the prepare step on the pod reads
    assert sources.model is not None and sources.model.models_root == "/mnt/trainstack/models"
    assert sources.paths() and all(p.startswith(("/mnt/trainstack/models/", "/workspace/trainstack/data/"))
                                   for p in sources.paths())
    assert conv is not None and conv.argv("H", "S")[4] == f"{image_root}/tools/convert_hf_to_torch_dist.py"


def test_the_image_slime_root_is_a_pod_setting(tmp_path):
    d = _pod_spec(tmp_path, "cluster.lium.pod.slime_root=/opt/slime", "cluster.lium.pod.volume=null")
    assert d["command"]["entrypoint"][1] == "/opt/slime/train.py"
    assert d["args"]["hf_checkpoint"] == "/workspace/trainstack/models/Qwen3-4B"  # no volume: pod-local


def test_cache_links_are_relative_and_survive_a_move(tmp_path):
    from trainstack.inputs import cache

    entry = tmp_path / "vol" / "models" / cache.CACHE_DIR / "models" / "x-1"
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("{}")
    at = tmp_path / "vol" / "models" / "X"
    cache.link(str(entry), str(at))
    assert not os.path.isabs(os.readlink(at)) and cache.managed(str(at))
    shutil.move(str(tmp_path / "vol"), str(tmp_path / "mounted-elsewhere"))
    assert (tmp_path / "mounted-elsewhere" / "models" / "X" / "config.json").read_text() == "{}"
    (tmp_path / "own").mkdir()
    os.symlink(str(tmp_path / "own"), str(tmp_path / "users-link"))
    assert not cache.managed(str(tmp_path / "users-link"))  # a link the user made is theirs


def test_a_failed_execs_reason_is_its_first_error_line():
    from trainstack.launch.lium_worker import failure_reason

    stderr = ("trainstack prepare: downloading a/b@0123 (1 KiB) into /mnt/x\n"
              "trainstack: 2 problems in the run config; nothing was launched.\n"
              "error: model.meta.hf_repo: downloading a/b@0123 failed (HfHubHTTPError: 403 Forbidden)\n"
              "  fix   : check the network\nerror: args.prompt_data: missing\n")
    assert failure_reason(stderr) == "error: model.meta.hf_repo: downloading a/b@0123 failed (HfHubHTTPError: 403 " \
                                     "Forbidden)"
    assert failure_reason("Killed\n") == "Killed" and failure_reason("") == ""


def test_links_resolve_from_any_input_path_to_any_entry(tmp_path_factory):
    """A class of inputs: wherever the input path sits relative to the cache entry (a deeper dataset
    path, a sibling root), the relative link resolves to the entry and stays trainstack's to repoint."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from trainstack.inputs import cache

    part = st.text(alphabet="abcxyz-_.0", min_size=1, max_size=6).filter(lambda p: p not in (".", ".."))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(part, min_size=0, max_size=3), st.lists(part, min_size=1, max_size=3))
    def check(entry_parts, at_parts):
        base = tmp_path_factory.mktemp("v")
        entry = base.joinpath("root", cache.CACHE_DIR, "models", *entry_parts, "entry")
        entry.mkdir(parents=True)
        (entry / "f").write_text("x")
        at = base.joinpath("root", *at_parts, "input")
        if str(at).startswith(str(entry)) or str(entry).startswith(str(at)):
            return
        cache.link(str(entry), str(at))
        assert not os.path.isabs(os.readlink(at)) and (at / "f").read_text() == "x" and cache.managed(str(at))
        moved = base.parent / (base.name + "-moved")
        shutil.move(str(base), str(moved))
        assert (moved.joinpath("root", *at_parts, "input") / "f").read_text() == "x"

    check()
