"""Lium pods get their inputs (docs/inputs.md, "On Lium"): the documented GPU recipe
`experiment=qwen3-4B-grpo-dapo cluster=lium_8xh100`, registered with a real commander that rents a
fake Lium pod, downloads the model and both datasets from the fake Hub on the pod, converts the model
with the converter at the image's slime root, and starts the trainer at that root. The pod has no GPU,
so the image's slime is a stand-in (tests/data/inputs_stub_slime: same argv, records it, stops);
the test observes the trainer's start through the file the stand-in `train.py` writes in the run dir
on the run's volume. A failure on the pod (the prepare step here) reaches `trainstack status` with its
reason and `trainstack logs` with its last lines."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from commander_helpers import TOKEN, CommanderProc, wait_for
from conftest import ROOT, run_py

pytestmark = pytest.mark.slow

STUB = ROOT / "tests" / "data" / "inputs_stub_slime"
# the fake's pods of a `trainstack` image have trainstack (the presets leave the image to the user)
# (no optimizer state in checkpoints: the pod's free-space check then needs ~8 GiB of this host's disk, not 52)
RECIPE = ["experiment=qwen3-4B-grpo-dapo", "cluster=lium_8xh100", "cluster.lium.pod.image=trainstack/trainstack-slime:test",
          "args.no_save_optim=true"]


@pytest.fixture
def image_slime():
    """The stand-in slime where a pod sees it (the pod hides the host's /tmp), with the pinned slime's argument
    files (the pod's version check identifies a checkout by their content) and its git HEAD."""
    from tests.fakes import fake_slime_git

    root = Path("/var/tmp") / f"trainstack-image-slime-{uuid.uuid4().hex[:8]}"
    shutil.copytree(STUB, root)
    fake_slime_git(root)
    (root / "Megatron-LM").mkdir()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def serve_recipe_inputs(hub) -> None:
    """A small stand-in for Qwen/Qwen3-4B (HF layout) and the two datasets, under the presets' repo names."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.url)
    api.create_repo("Qwen/Qwen3-4B")
    for name, data in (("config.json", b'{"model_type": "qwen3", "num_hidden_layers": 36}'),
                       ("tokenizer.json", b"{}"), ("model.safetensors", os.urandom(256 * 1024))):
        api.upload_file(path_or_fileobj=data, path_in_repo=name, repo_id="Qwen/Qwen3-4B")
    for repo, name, row in (("zhuzilin/dapo-math-17k", "dapo-math-17k.jsonl", {"prompt": "1+1?", "label": "2"}),
                            ("zhuzilin/aime-2024", "aime-2024.jsonl", {"prompt": "2+2?", "label": "4"})):
        api.create_repo(repo, repo_type="dataset")
        api.upload_file(path_or_fileobj=(json.dumps(row) + "\n").encode(), path_in_repo=name, repo_id=repo,
                        repo_type="dataset")


class Stack:
    def __init__(self, fake_lium, tmp: Path):
        self.fake, self.tmp = fake_lium.fake, tmp
        self.cmd = CommanderProc(tmp, fake_lium.env).start()
        self.env = {**fake_lium.env, "TRAINSTACK_COMMANDER_URL": self.cmd.url, "TRAINSTACK_COMMANDER_TOKEN": TOKEN}
        self.admin = self.cmd.client()

    def launch(self, slime: Path, *extra: str):
        return run_py(*RECIPE, f"paths.runs_root={self.tmp}/runs", f"slime.root={slime}",
                      f"slime.megatron_root={slime}/Megatron-LM", f"cluster.lium.pod.slime_root={slime}", *extra,
                      cwd=self.tmp, env=self.env, timeout=180)

    def trainstack(self, *argv: str):
        return subprocess.run([sys.executable, "-m", "trainstack", *argv, "--runs-root", str(self.tmp / "runs")],
                              cwd=self.tmp, env={**os.environ, **self.env, "PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True, timeout=120)

    def ended(self, run_id: str, timeout: float = 420) -> dict:
        def done():
            rec = self.admin.get(f"/v1/runs/{run_id}")
            return rec if rec["phase"] in ("finished", "failed", "cancelled", "paused") else None
        try:
            return wait_for(done, timeout, f"{run_id} ended", every=0.5)
        except AssertionError as ex:
            raise AssertionError(f"{ex}\nrecord: {self.admin.get(f'/v1/runs/{run_id}')}\ncommander log: "
                                 f"{self.cmd.log.read_text()[-3000:]}") from None

    def volume_run_dir(self, run_id: str) -> Path:
        rec = self.admin.get(f"/v1/runs/{run_id}")
        return self.fake.volume_dir(rec["volume_id"]) / "trainstack" / "runs" / run_id

    def close(self) -> None:
        wait_for(lambda: not self.fake.live_pods(), 60, "every pod removed")
        self.cmd.stop()


def run_id_of(stack: Stack) -> str:
    return next(p.name for p in (stack.tmp / "runs").iterdir() if p.is_dir())


def test_gpu_recipe_on_lium_prepares_inputs_and_starts_the_trainer(fake_hub, fake_lium, image_slime, tmp_path):
    serve_recipe_inputs(fake_hub)
    stack = Stack(fake_lium, tmp_path)
    try:
        res = stack.launch(image_slime, "cluster.lium.restart_limit=0")
        assert res.returncode == 0, res.stderr[-3000:]
        rid = run_id_of(stack)
        rec = stack.ended(rid)
        vol_run = stack.volume_run_dir(rid)
        said = [p.read_text()[-3000:] for p in sorted((vol_run / "logs").glob("*"))] if (vol_run / "logs").is_dir() else []
        assert (vol_run / "stub_trainer_started.json").exists(), f"{rec}\n{said}"
        started = json.loads((vol_run / "stub_trainer_started.json").read_text())
        # the trainer started at the image's slime root, with the model, its conversion and the data present
        assert started["cwd"] == str(image_slime)
        assert started["exists"] == {"--hf-checkpoint": True, "--ref-load": True, "--prompt-data": True}, started
        assert started["paths"]["--hf-checkpoint"] == "/mnt/trainstack/models/Qwen3-4B"  # on the run's volume
        assert started["paths"]["--ref-load"] == "/mnt/trainstack/models/Qwen3-4B_torch_dist"
        assert started["ref_load_tracker"] == "release"
        volume = vol_run.parents[1]
        assert (volume / "models" / "Qwen3-4B" / "model.safetensors").read_bytes() == \
            fake_hub.files("Qwen/Qwen3-4B")["model.safetensors"]
        conv = json.loads((volume / "models" / "Qwen3-4B_torch_dist" / "release" / "argv.json").read_text())
        assert conv["world_size"] == "8"  # torch.distributed.run with the pod's 8 GPUs' worth of ranks
        flags = " ".join(conv["argv"])  # the preset's MODEL_ARGS, as slime's scripts/models/qwen3-4B.sh has them
        assert "--num-layers 36 " in flags and "--hidden-size 2560 " in flags and "--swiglu" in flags
        assert "--tensor-model-parallel-size" not in flags and "--lr " not in flags  # training settings left out
        assert conv["argv"][-4] == "--hf-checkpoint" and conv["argv"][-2] == "--save"  # slime's tool's argv
        assert conv["argv"][-3].startswith("/mnt/trainstack/models/.trainstack-cache/models/")  # the cached snapshot
        inputs = json.loads((vol_run / "inputs.json").read_text())
        assert {i["kind"]: i["state"] for i in inputs["items"]} == {"model": "download", "torch_dist": "convert",
                                                                    "dataset": "download"}
        # the stand-in trainer stops (exit 1): the failure and its last lines reach status and logs
        assert rec["phase"] == "failed" and "exited with 1" in rec["message"]
        logs = stack.trainstack("logs", rid)
        assert "stub slime train.py: started with every input present" in logs.stdout, logs.stderr
        stack.close()
    finally:
        stack.cmd.stop()


def test_a_failed_prepare_on_the_pod_reaches_status_and_logs(fake_hub, fake_lium, image_slime, tmp_path):
    serve_recipe_inputs(fake_hub)
    fake_hub.inject("status", match="GET /Qwen/Qwen3-4B/resolve", status=403, count=None)
    stack = Stack(fake_lium, tmp_path)
    try:
        res = stack.launch(image_slime, "cluster.lium.restart_limit=0")
        assert res.returncode == 0, res.stderr[-3000:]
        rid = run_id_of(stack)
        rec = stack.ended(rid)
        assert rec["phase"] == "failed"
        assert "trainstack exec exited with 2: error: model.meta.hf_repo: downloading Qwen/Qwen3-4B@" in rec["message"]
        status = stack.trainstack("status", rid, "--json")
        assert status.returncode == 0, status.stderr
        row = json.loads(status.stdout)[0]
        assert "downloading Qwen/Qwen3-4B@" in (row.get("reason") or ""), row
        logs = stack.trainstack("logs", rid)
        assert logs.returncode == 0 and "no saved log tail" not in logs.stderr, logs.stderr
        assert "trainstack exec's stderr" in logs.stdout, logs.stdout[-2000:]
        assert "error: model.meta.hf_repo: downloading Qwen/Qwen3-4B@" in logs.stdout and "injected 403" in logs.stdout
        stack.close()
    finally:
        stack.cmd.stop()
