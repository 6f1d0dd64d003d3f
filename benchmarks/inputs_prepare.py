"""Benchmark: a run's inputs (docs/inputs.md) against the fake Hub.

1. Download throughput: trainstack's prepare step fetching a model repo at `main` into an empty
   models_root (resolve the branch, list the tree for the disk check, download, marker, link)
   against huggingface_hub's own `snapshot_download` of the same repo at `main` (it resolves and
   lists too) into an empty directory, each in a fresh process (huggingface_hub's import counted on
   both sides; trainstack's own modules are loaded before an exec's prepare step, so not counted), alternating which goes first, `--reps` pairs; the ratio of the median throughputs
   (target >= 0.9). Files stay below 10 MiB each (the fake Hub answers larger ones as LFS, or may
   refuse them as regular files): the model is `--files` files of `--file-mib` MiB.
2. A second run's prepare step, everything cached: the tiny model (HF layout), its torch_dist
   conversion and a transformed dataset are prepared once, then `--reps` fresh processes each run
   the prepare step as `trainstack exec` does (`prepare()`, which resolves `main` with one request and
   finds every entry complete); its own timer (what inputs.json records) and the process's wall time.
   Target: <= 1 s.

The fake Hub runs in its own process (it stands in for a remote service). Writes
benchmarks/results/inputs_prepare.json.

    .venv/bin/python benchmarks/inputs_prepare.py [--reps 5] [--files 8] [--file-mib 8]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench/model"
TINY = "bench/tiny-char"
DATA = "bench/arith-qa"
TINY_FLAGS = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--ffn-hidden-size", "256",
              "--seq-length", "32", "--max-position-embeddings", "32"]


def start_hub(tmp: Path) -> tuple[subprocess.Popen, str]:
    ready = tmp / "hub.url"
    proc = subprocess.Popen([sys.executable, "-m", "trainstack_dev.fakes.hub", "--port", "0", "--ready-file",
                             str(ready)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'devtools'}"},
                            start_new_session=True)
    for _ in range(200):
        if ready.exists():
            return proc, ready.read_text().strip()
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the fake Hub did not start")


def upload(url: str, tmp: Path, files: int, file_mib: int) -> str:
    from huggingface_hub import HfApi

    from trainstack.inputs.convert_tiny import export_hf
    from trainstack.tiny.arithmetic import write_task

    api = HfApi(endpoint=url)
    src = tmp / "model-src"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "bench"}')
    for i in range(files):
        (src / f"model-{i:05d}-of-{files:05d}.safetensors").write_bytes(os.urandom(file_mib << 20))
    api.create_repo(MODEL)
    sha = api.upload_folder(repo_id=MODEL, folder_path=str(src)).oid
    api.create_repo(TINY)
    api.upload_folder(repo_id=TINY, folder_path=export_hf(str(tmp / "tiny-src"), TINY_FLAGS))
    task = tmp / "task"
    write_task(task)
    train = next(task.rglob("train.jsonl"))
    rows = [json.loads(ln) for ln in train.read_text().splitlines()]
    qa = tmp / "qa.jsonl"
    qa.write_text("".join(json.dumps({"question": r["prompt"], "answer": r["label"]}) + "\n" for r in rows))
    api.create_repo(DATA, repo_type="dataset")
    api.upload_file(path_or_fileobj=str(qa), path_in_repo="train.jsonl", repo_id=DATA, repo_type="dataset")
    return sha


# the two downloaders, each in a fresh process (imports and connection pools start cold for both)
TRAINSTACK = """
import sys, time
from trainstack.inputs.prepare import prepare  # loaded long before the prepare step in a real exec
from trainstack.inputs.sources import ModelSource, Sources
root = sys.argv[1]
t0 = time.perf_counter()
prepare(Sources(ModelSource(sys.argv[2], "main", root + "/model", None, root), []), None, log=lambda m: None)
print(time.perf_counter() - t0)
"""
HF = """
import sys, time
t0 = time.perf_counter()
from huggingface_hub import snapshot_download
snapshot_download(sys.argv[2], revision="main", local_dir=sys.argv[1] + "/model")
print(time.perf_counter() - t0)
"""


def timed(code: str, env: dict[str, str], *argv: str) -> float:
    out = subprocess.run([sys.executable, "-c", code, *argv], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def throughput(env: dict[str, str], tmp: Path, sha: str, nbytes: int, reps: int) -> dict:
    ours, theirs, pairs = [], [], []
    for rep in range(reps):
        got = {}
        for who in (("trainstack", "hf") if rep % 2 == 0 else ("hf", "trainstack")):
            dest = tmp / f"dl-{who}-{rep}"
            dest.mkdir()
            got[who] = (timed(TRAINSTACK, env, str(dest), MODEL) if who == "trainstack"
                        else timed(HF, env, str(dest), MODEL, sha))
            shutil.rmtree(dest)
        ours.append(nbytes / got["trainstack"] / 2**20)
        theirs.append(nbytes / got["hf"] / 2**20)
        pairs.append(round(ours[-1] / theirs[-1], 3))
    return {"bytes": nbytes, "trainstack_mib_s": [round(x, 1) for x in ours],
            "snapshot_download_mib_s": [round(x, 1) for x in theirs], "pair_ratios": pairs,
            "trainstack_median_mib_s": round(statistics.median(ours), 1),
            "snapshot_download_median_mib_s": round(statistics.median(theirs), 1),
            "ratio": round(statistics.median(ours) / statistics.median(theirs), 3)}


# the prepare step of a run whose inputs are all cached, as exec runs it (fresh process)
SECOND = """
import json, sys, time
t0 = time.perf_counter()
from trainstack.inputs.prepare import for_run, prepare
from trainstack.render.pipeline import build_from_overrides
run, cmd = build_from_overrides(json.loads(sys.argv[1]))
sources, conv = for_run(run.config, run.args, run.cluster, "")
result = prepare(sources, conv, log=lambda m: None)
assert {i.state for i in result.items} == {"cached"}, [i.line() for i in result.items]
print(json.dumps({"step_s": result.seconds, "items": len(result.items)}))
"""


def tiny_overrides(tmp: Path) -> list[str]:
    return [f"paths.runs_root={tmp}/runs", f"paths.models_root={tmp}/models", f"paths.data_root={tmp}/data",
            f"model.meta.hf_repo={TINY}", "+model.meta.revision=main",
            "+model.hf_checkpoint=${paths.models_root}/tiny-char",
            "+model.ref_load=${paths.models_root}/tiny-char_torch_dist",
            f"+env.meta.data=[{{repo: '{DATA}', files: {{train.jsonl: arith-qa/train.jsonl}}, transform: keys, "
            "keys: {question: prompt, answer: label}}]",
            "env.prompt_data=${paths.data_root}/arith-qa/train.jsonl", "env.eval_interval=null",
            "env.eval_prompt_data=null"]


def second_run(env: dict[str, str], tmp: Path, reps: int) -> dict:
    over = tiny_overrides(tmp)
    first = subprocess.run([sys.executable, "-m", "trainstack", "prepare", *over], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    if first.returncode != 0:
        raise RuntimeError(first.stderr[-2000:])
    steps, walls = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", SECOND, json.dumps(over)], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        walls.append(time.perf_counter() - t0)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        steps.append(json.loads(out.stdout.strip().splitlines()[-1])["step_s"])
    return {"items": 3, "step_s": [round(x, 4) for x in steps], "step_median_s": round(statistics.median(steps), 4),
            "step_max_s": round(max(steps), 4), "process_wall_median_s": round(statistics.median(walls), 2),
            "within_target": max(steps) <= 1.0}


def main() -> int:
    short = benchlib.quick()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=benchlib.pick(5, 2))
    p.add_argument("--files", type=int, default=benchlib.pick(8, 2))
    p.add_argument("--file-mib", type=int, default=benchlib.pick(8, 1))
    ns = p.parse_args()
    if ns.file_mib >= 10:
        p.error("--file-mib must stay below 10 (the fake Hub's regular-file limit)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-inputs-"))
    hub, url = start_hub(tmp)
    try:
        env = {**os.environ, "HF_ENDPOINT": url, "HF_HOME": str(tmp / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1",
               "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PYTHONPATH": str(ROOT),
               "HF_HUB_DISABLE_XET": "1"}  # both sides on the LFS path, as recorded (Xet: hub_push.py)
        env.pop("HF_TOKEN", None)
        os.environ.update({k: env[k] for k in ("HF_ENDPOINT", "HF_HOME", "HF_HUB_DISABLE_XET")})
        sha = upload(url, tmp, ns.files, ns.file_mib)
        nbytes = ns.files * (ns.file_mib << 20) + len('{"model_type": "bench"}')
        result = {"short": short, "download": throughput(env, tmp, sha, nbytes, ns.reps),
                  "second_run": second_run(env, tmp, ns.reps)}
    finally:
        hub.terminate()
        hub.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    benchlib.write("inputs_prepare.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
