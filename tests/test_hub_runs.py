"""Hub sync on real CPU runs (`python run.py`, the tiny trainer, the fake Hub with the real client):
selected checkpoints pushed and final weights equal to a run without sync; a lost disk resumes from
the Hub bit-identically; SIGTERM pushes the final checkpoint within the grace period; rollout data
and HF exports go along; refusals; no token anywhere; docs/hub.md's commands as written."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, SMALL_BATCH, run_py
from hubtools import events
from trainstack.procgroup import group_members

pytestmark = pytest.mark.slow
REPO = "team/ckpts"
QUICK = ("env.eval_interval=null", "env.eval_prompt_data=null", *SMALL_BATCH)


def launch(tmp: Path, *overrides: str, env: dict | None = None, timeout: float = 300):
    return run_py(f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data", *QUICK, *overrides, cwd=tmp,
                  env=env, timeout=timeout)


def popen(tmp: Path, *overrides: str, env: dict | None = None) -> subprocess.Popen:
    argv = [sys.executable, str(ROOT / "run.py"), f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data",
            *QUICK, *overrides]
    return subprocess.Popen(argv, cwd=tmp, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def weights(path: Path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def same_weights(a: Path, b: Path) -> bool:
    import torch

    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def status(rd: Path) -> dict:
    try:
        return json.loads((rd / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def hub_pointer(hub, run_id: str) -> dict | None:
    raw = hub.files(REPO).get(f"{run_id}/latest.json") if hub.repo(REPO) else None
    return json.loads(raw) if raw else None


def test_sync_pushes_the_selected_checkpoints_and_trains_the_same_weights(fake_hub, tmp_path):
    common = ("env.num_rollout=8", "args.save_interval=1")
    plain = launch(tmp_path, "run_id=plain", *common)
    assert plain.returncode == 0, plain.stderr
    synced = launch(tmp_path, "run_id=synced", *common, f"hub.repo_id={REPO}", "hub.every=3",
                    env={"TRAINSTACK_TINY_SLOW_SAVE": "0.4"})  # saves far apart: each selected one gets through
    assert synced.returncode == 0, synced.stderr
    rd = tmp_path / "runs" / "synced"
    evs = events(rd)
    assert [e["iteration"] for e in evs if e["event"] == "hub_push"] == [2, 5, 7]  # every 3rd, and the last
    assert {e["transfer"] for e in evs if e["event"] == "hub_push"} == {"lfs"}  # HF_HUB_DISABLE_XET=1 (fixture)
    kinds = [e["event"] for e in evs]
    assert kinds.index("exit") > max(i for i, k in enumerate(kinds) if k == "hub_push")  # pushed, then reported
    last = [e for e in evs if e["event"] == "hub_push"][-1]
    st = status(rd)
    assert st["state"] == "finished" and st["hub"]["last_pushed"] == 7 and st["hub"]["commit"] == last["commit"]
    assert last["commit"] == fake_hub.repo(REPO).branches["main"]
    final = Path("checkpoints") / "iter_0000007" / "model.pt"
    assert same_weights(tmp_path / "runs" / "plain" / final, rd / final)  # sync never touches training
    assert fake_hub.files(REPO)["synced/iter_0000007/model.pt"] == (rd / final).read_bytes()
    # no token in any file of the run, in what was printed, or in the fake's request log
    token = os.environ["HF_TOKEN"]
    leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]
    assert not leaks and token not in synced.stdout + synced.stderr


def test_a_lost_disk_resumes_from_the_hub_with_bit_identical_weights(fake_hub_xet, tmp_path):
    """On the client's default large-file path, Xet (the LFS path: the other tests here)."""
    fake_hub = fake_hub_xet
    common = ("env.num_rollout=12", "args.save_interval=2")
    assert launch(tmp_path, "run_id=reference", *common).returncode == 0
    argv = ("run_id=lost", *common, f"hub.repo_id={REPO}")
    rd = tmp_path / "runs" / "lost"
    proc = popen(tmp_path, *argv, env={"TRAINSTACK_TINY_SLOW_SAVE": "0.2"})
    deadline = time.monotonic() + 120
    while (status(rd).get("hub") or {}).get("last_pushed") is None:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    trainer_group = json.loads((rd / "lease.json").read_text()).get("trainer_pgid")
    os.killpg(proc.pid, signal.SIGKILL)  # the machine is gone: launcher and trainer (PDEATHSIG)...
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 30  # the death signal is asynchronous: a dying trainer may still be writing
    while trainer_group and group_members(trainer_group):
        assert time.monotonic() < deadline, "the trainer outlived its launcher"
        time.sleep(0.05)
    pushed = status(rd)["hub"]["last_pushed"]
    shutil.rmtree(rd / "checkpoints")  # ... and its disk
    again = launch(tmp_path, *argv)
    assert again.returncode == 0, again.stderr
    evs = events(rd)
    restore = [e for e in evs if e["event"] == "hub_restore"]
    assert len(restore) == 1 and restore[0]["iteration"] == pushed and restore[0]["repo_id"] == REPO
    resume = [e for e in evs if e["event"] == "resume"][-1]
    assert resume["from_rollout"] == pushed + 1 and resume["checkpoint"] == pushed
    assert f"resuming from rollout {pushed} on the Hub" in again.stderr
    final = Path("checkpoints") / "iter_0000011" / "model.pt"
    assert same_weights(tmp_path / "runs" / "reference" / final, rd / final)
    assert hub_pointer(fake_hub, "lost")["iteration"] == 11
    assert {e.get("transfer") for e in evs if e["event"] == "hub_push"} == {"xet"}
    assert any(r["path"].startswith("/v1/xorbs/") for r in fake_hub.requests)
    assert any(r["path"].startswith("/v1/reconstructions/") for r in fake_hub.requests)  # the restore


def test_sigterm_pushes_the_final_checkpoint_within_the_grace_period(fake_hub, tmp_path):
    rd = tmp_path / "runs" / "term"
    proc = popen(tmp_path, "run_id=term", "env.num_rollout=400", "args.save_interval=50", f"hub.repo_id={REPO}",
                 "resume.grace_s=20")
    deadline = time.monotonic() + 120
    while not (rd / "metrics.jsonl").exists() or len((rd / "metrics.jsonl").read_text().splitlines()) < 30:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)  # what SLURM/Kubernetes send to the launcher
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 20, err
    assert proc.returncode == 128 + signal.SIGTERM, err
    last = status(rd)["last_checkpoint"]
    assert last is not None and 0 < last < 399  # the trainer's final checkpoint, not a scheduled one
    kinds = [e["event"] for e in events(rd)]
    pushes = [e for e in events(rd) if e["event"] == "hub_push"]
    assert pushes and pushes[-1]["iteration"] == last and hub_pointer(fake_hub, "term")["iteration"] == last
    assert kinds.index("signal") < kinds.index("hub_push") < kinds.index("exit")
    assert status(rd)["state"] == "interrupted" and status(rd)["hub"]["last_pushed"] == last


def test_rollout_data_and_hf_exports_are_pushed_with_the_checkpoints(fake_hub, tmp_path):
    import io

    import torch
    from safetensors.torch import load as safetensors_load

    res = launch(tmp_path, "run_id=extras", "env.num_rollout=4", "args.save_interval=2", f"hub.repo_id={REPO}",
                 "hub.push_rollouts=true", f"args.save_hf='{tmp_path}/hf/iter_{{rollout_id}}'")  # Hydra: quote braces
    assert res.returncode == 0, res.stderr
    rd = tmp_path / "runs" / "extras"
    files = fake_hub.files(REPO)
    assert {f"extras/rollout_data/rollout_{i}.pt" for i in range(4)} <= set(files)
    dump = torch.load(io.BytesIO(files["extras/rollout_data/rollout_2.pt"]), weights_only=False)
    assert dump["rollout_id"] == 2 and dump["samples"] and "reward" in dump["samples"][0]
    pushed = [e["iteration"] for e in events(rd) if e["event"] == "hub_push"]
    for i in pushed:  # each pushed save's HF export is there and is the checkpoint's weights
        hf = safetensors_load(files[f"extras/hf/iter_{i:07d}/model.safetensors"])
        ck = weights(rd / "checkpoints" / f"iter_{i:07d}" / "model.pt")
        assert all(torch.equal(hf[k], ck[k]) for k in hf) and set(ck) - set(hf) == {"lm_head.weight"}  # tied
        assert json.loads(files[f"extras/hf/iter_{i:07d}/config.json"])["model_type"] == "qwen3"
    rec = json.loads(files["extras/latest.json"])
    assert rec["hf"]["path"] == "extras/hf/iter_0000003" and rec["hf"]["commit"]


def test_launch_refusals_with_the_hub(fake_hub, tmp_path, monkeypatch):
    must = launch(tmp_path, "run_id=none", "env.num_rollout=2", "resume=must", f"hub.repo_id={REPO}")
    assert must.returncode == 2 and f"nor on the Hub ({REPO})" in must.stderr and "Traceback" not in must.stderr
    assert not (tmp_path / "runs" / "none" / "checkpoints").exists()
    with socket_closed() as dead:  # a Hub that does not answer, and no local checkpoint: refused, not fresh
        monkeypatch.setenv("HF_ENDPOINT", dead)
        down = launch(tmp_path, "run_id=down", "env.num_rollout=2", f"hub.repo_id={REPO}")
        assert down.returncode == 2 and "cannot read run down's checkpoint pointer" in down.stderr
        assert "hub.restore=false" in down.stderr and "Traceback" not in down.stderr
        anyway = launch(tmp_path, "run_id=down", "env.num_rollout=2", f"hub.repo_id={REPO}", "hub.restore=false",
                        "hub.final_timeout_s=2")
        assert anyway.returncode == 0, anyway.stderr  # trained; the push is recorded as behind
        kinds = [e["event"] for e in events(tmp_path / "runs" / "down")]
        assert "hub_push_failed" in kinds and "hub_behind" in kinds and kinds[-1] == "exit"
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)  # the Hub answers again: the same command pushes what it missed
    again = launch(tmp_path, "run_id=down", "env.num_rollout=2", f"hub.repo_id={REPO}")
    assert again.returncode == 0 and "is finished" in again.stderr, again.stderr
    assert [e["event"] for e in events(tmp_path / "runs" / "down")][-2:] == ["hub_push", "finished"]
    assert hub_pointer(fake_hub, "down")["iteration"] == 1


class socket_closed:
    """An HF_ENDPOINT where nothing listens."""

    def __enter__(self) -> str:
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        pass


# -------------------------------------------------------------------------------------------------
# docs/hub.md, as written (scripts/hub-local.sh runs the fake in its own process)
# -------------------------------------------------------------------------------------------------
DOC = {
    "up": 'eval "$(scripts/hub-local.sh up)"',
    "run": "python run.py run_id=demo env.num_rollout=6 args.save_interval=2 hub.repo_id=alice/rl-ckpts",
    "ls": "trainstack hub ls demo",
    "status": "trainstack status demo",
    "pull": "trainstack hub pull demo --iter 5 --to pulled",
    "lose": "rm -rf runs/demo/checkpoints",
    "more": "python run.py run_id=demo env.num_rollout=10 args.save_interval=2 hub.repo_id=alice/rl-ckpts",
    "slurm": "python run.py run_id=demo env.num_rollout=14 args.save_interval=2 hub.repo_id=alice/rl-ckpts "
             "cluster.launcher=slurm paths.runs_root=cluster-runs",
    "down": "scripts/hub-local.sh down",
}


def doc_argv(cmd: str) -> list[str]:
    toks = shlex.split(cmd)
    if toks[0] == "trainstack":
        return [sys.executable, "-m", "trainstack.cli.main", *toks[1:]]
    if toks[0] == "python":
        return [sys.executable, str(ROOT / toks[1]), *toks[2:]]
    if toks[0].startswith("scripts/"):
        return [str(ROOT / toks[0]), *toks[1:]]
    return toks


def run_doc(key: str, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = DOC[key]
    if cmd.startswith('eval "$('):  # the shell form: run the inner command, the test applies the export
        cmd = cmd[len('eval "$('):-len(')"')]
    return subprocess.run(doc_argv(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_docs_commands_are_tested():
    """Every command in docs/hub.md's bash blocks is one of DOC, and every DOC command is in the doc."""
    text = (ROOT / "docs" / "hub.md").read_text()
    lines = [ln.split("  #", 1)[0].strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
             for ln in b.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert set(lines) == set(DOC.values()), set(lines) ^ set(DOC.values())


def test_docs_walkthrough_runs_as_written(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINSTACK_HUB_DIR": str(tmp_path / ".hub-local"),
           "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_TOKEN", None)
    up = run_doc("up", tmp_path, env)
    assert up.returncode == 0 and up.stdout.startswith("export HF_ENDPOINT=http://127.0.0.1:"), up.stderr
    env["HF_ENDPOINT"] = up.stdout.strip().split("=", 1)[1]
    try:
        for key in ("run", "ls", "status", "pull", "lose", "more"):
            res = run_doc(key, tmp_path, env)
            assert res.returncode == 0, f"{DOC[key]}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
            assert "Traceback" not in res.stderr
            if key == "ls":
                assert "iter_0000005" in res.stdout and "<- pointer" in res.stdout
            if key == "status":
                assert re.search(r"5 @ [0-9a-f]{8}", res.stdout), res.stdout
            if key == "pull":
                assert (tmp_path / "pulled" / "iter_0000005" / "model.pt").is_file()
            if key == "more":
                assert "resuming from rollout 5 on the Hub" in res.stderr
    finally:
        down = run_doc("down", tmp_path, env)
    assert down.returncode == 0, down.stderr
    assert "hub_restore" in [e["event"] for e in events(tmp_path / "runs" / "demo")]


# -------------------------------------------------------------------------------------------------
# another cluster and launcher: local -> SLURM (the local one-node cluster, scripts/slurm-local.sh)
# -------------------------------------------------------------------------------------------------
def _slurm_problem() -> str | None:
    if shutil.which("sbatch") is None or os.geteuid() != 0:
        return "no sbatch, or not root (scripts/slurm-local.sh up)"
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=10)
    return None if "UP" in ping.stdout else "slurmctld is not up (scripts/slurm-local.sh up)"


SLURM_PROBLEM = _slurm_problem()


@pytest.mark.skipif(SLURM_PROBLEM is not None and os.environ.get("TRAINSTACK_REQUIRE_SLURM") != "1",
                    reason=f"SLURM: {SLURM_PROBLEM}")
def test_a_run_started_locally_continues_on_slurm_from_the_hub(tmp_path):
    """docs/hub.md's cross-cluster line: the run starts with the local launcher, then the same run_id is
    submitted to SLURM with another runs root: the job finds no checkpoint in its run dir, restores the
    Hub's, passes the resume check against the config stored with it and ends with the weights of a run
    that never moved."""
    assert SLURM_PROBLEM is None, SLURM_PROBLEM
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins")]),
           "TRAINSTACK_HUB_DIR": str(tmp_path / ".hub-local"), "HF_HOME": str(tmp_path / "hf-home"),
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_TOKEN", None)
    up = run_doc("up", tmp_path, env)
    assert up.returncode == 0, up.stderr
    env["HF_ENDPOINT"] = up.stdout.strip().split("=", 1)[1]
    try:
        first = run_doc("run", tmp_path, env)
        assert first.returncode == 0, first.stderr
        ref = subprocess.run(doc_argv(DOC["slurm"].split(" hub.repo_id")[0].replace("run_id=demo", "run_id=ref")),
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert ref.returncode == 0, ref.stderr
        sub = run_doc("slurm", tmp_path, env)
        assert sub.returncode == 0 and "as SLURM job " in sub.stderr, sub.stderr
        job = sub.stderr.split("as SLURM job ")[1].split()[0]
        deadline = time.monotonic() + 240
        while job in subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split():
            assert time.monotonic() < deadline, f"SLURM job {job} still queued"
            time.sleep(1)
    finally:
        run_doc("down", tmp_path, env)
    rd = tmp_path / "cluster-runs" / "demo"
    evs = events(rd)
    kinds = [e["event"] for e in evs]
    assert "hub_restore" in kinds, (kinds, (rd / "slurm").exists() and list((rd / "slurm").rglob("*.err")))
    restore = next(e for e in evs if e["event"] == "hub_restore")
    assert restore["iteration"] == 5 and [e for e in evs if e["event"] == "resume"][-1]["from_rollout"] == 6
    assert status(rd)["state"] == "finished" and status(rd)["hub"]["last_pushed"] == 13
    final = Path("checkpoints") / "iter_0000013" / "model.pt"
    assert same_weights(tmp_path / "runs" / "ref" / final, rd / final)
