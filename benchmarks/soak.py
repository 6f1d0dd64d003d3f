"""Soak: random SIGKILL / SIGSTOP / SIGHUP faults against a run's launcher, its trainer and a reward
plugin's child process, with relaunches racing the frozen or dying holder.

Invariants checked (docs/resume.md): never two trainers publishing checkpoints for one run (the
publish log's lease epochs never go back), 0 partial loads (no trainer ever refused or tripped on a
checkpoint), 0 restarts from zero (every start after the first checkpoint is a resume), and the
final weights bit-identical to an uninterrupted run.

    python benchmarks/soak.py [--faults 50] [--seed 7]      # results: benchmarks/results/soak.json
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
RUN = ["env.rollout_batch_size=4", "env.n_samples_per_prompt=4", "env.global_batch_size=16", "env.eval_interval=null",
       "args.save_interval=1", "resume.lease_ttl_s=9", "resume.grace_s=1",
       "args.custom_rm_path=soak_plugin.reward"]
PLUGIN = '''
"""A reward plugin that starts a helper process (as real reward servers do) and scores like arithmetic."""
import os, subprocess
from trainstack.tiny.arithmetic import reward as _reward

_child = None


def reward(args, sample, **kw):
    global _child
    if _child is None:
        _child = subprocess.Popen(["sleep", "3600"])
        with open(os.path.join(os.environ["SOAK_DIR"], f"child.{os.getpid()}"), "w") as f:
            f.write(str(_child.pid))
    return _reward(args, sample, **kw)
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _members(pgid: int) -> list[int]:
    from trainstack.lease import group_members

    return group_members(pgid)


class Soak:
    def __init__(self, work: Path, num_rollout: int, seed: int):
        self.work = work
        self.rng = random.Random(seed)
        self.num_rollout = num_rollout
        (work / "plugins").mkdir(parents=True, exist_ok=True)
        (work / "plugins" / "soak_plugin.py").write_text(PLUGIN)
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(work / "plugins")]),
                    "SOAK_DIR": str(work)}
        self.launchers: list[subprocess.Popen] = []
        self.exits: Counter = Counter()
        self.faults: Counter = Counter()
        self.frozen: list[tuple[str, int]] = []  # (kind, pid or -pgid) to SIGCONT later

    def argv(self, run_id: str) -> list[str]:
        return [PY, str(ROOT / "run.py"), *RUN, f"env.num_rollout={self.num_rollout}", f"run_id={run_id}",
                f"runtime_env.pythonpath=[{self.work / 'plugins'}]"]

    def start(self, run_id: str = "soak") -> subprocess.Popen:
        # slowed saves (sleeps between checkpoint files) widen the window for faults in the middle of one
        p = subprocess.Popen(self.argv(run_id), cwd=self.work, env={**self.env, "TRAINSTACK_TINY_SLOW_SAVE": "0.03"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.launchers.append(p)
        return p

    @property
    def rd(self) -> Path:
        return self.work / "runs" / "soak"

    def published(self) -> int:
        try:
            return (self.rd / "checkpoints" / "publish.jsonl").read_text().count("\n")
        except OSError:
            return 0

    def wait_for_progress(self, timeout: float) -> None:
        """Let the holder train a little (a fresh trainer needs seconds to start) before the next fault."""
        n, end = self.published(), time.monotonic() + timeout
        while self.published() <= n and time.monotonic() < end:
            time.sleep(0.1)

    def lease(self) -> dict:
        try:
            return json.loads((self.rd / "lease.json").read_text())
        except (OSError, ValueError):
            return {}

    def reap(self) -> None:
        for p in self.launchers:
            if p.returncode is None and p.poll() is not None:
                self.exits[p.returncode] += 1

    def live(self) -> list[subprocess.Popen]:
        self.reap()
        return [p for p in self.launchers if p.returncode is None]

    def targets(self) -> dict[str, int]:
        """What a fault can hit now: the live holder's launcher, its trainer, the plugin's child."""
        out = {}
        lease = self.lease()
        holder = next((p for p in self.live() if p.pid == lease.get("pid")), None)
        if holder is not None:
            out["launcher"] = holder.pid
        pgid = lease.get("trainer_pgid")
        if pgid:
            members = [m for m in _members(pgid) if m != pgid]
            children = {int(f.read_text()) for f in self.work.glob("child.*") if f.read_text().strip().isdigit()}
            trainers = [m for m in members if m not in children]
            if trainers:
                out["trainer"] = min(trainers)
            kids = [m for m in members if m in children]
            if kids:
                out["plugin child"] = kids[0]
            out["trainer group"] = -pgid
        return out

    def fault(self) -> str | None:
        targets = self.targets()
        if not targets:
            return None
        what = self.rng.choice(sorted(targets))
        sig = self.rng.choice([signal.SIGKILL, signal.SIGSTOP, signal.SIGHUP])
        pid = targets[what]
        try:
            if pid < 0:
                os.killpg(-pid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return None
        if sig == signal.SIGSTOP:
            self.frozen.append((what, pid))
        label = f"{signal.Signals(sig).name} {what}"
        self.faults[label] += 1
        return label

    def thaw_some(self, all_: bool = False) -> None:
        keep = []
        for what, pid in self.frozen:
            if all_ or self.rng.random() < 0.5:
                try:
                    (os.killpg(-pid, signal.SIGCONT) if pid < 0 else os.kill(pid, signal.SIGCONT))
                except ProcessLookupError:
                    pass
            else:
                keep.append((what, pid))
        self.frozen = keep

    def cleanup(self) -> None:
        self.thaw_some(all_=True)
        for p in self.launchers:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        for f in self.work.glob("child.*"):
            try:
                os.kill(int(f.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def weights(run_dir: Path, n: int) -> dict:
    import torch

    return torch.load(run_dir / "checkpoints" / f"iter_{n - 1:07d}" / "model.pt", weights_only=True)


def run_soak(work: Path, faults: int = 50, seed: int = 7, num_rollout: int = 600) -> dict:
    from trainstack.tiny.arithmetic import prepare

    prepare(work / "data")
    soak = Soak(work, num_rollout, seed)
    t0 = time.monotonic()
    ref = subprocess.run(soak.argv("reference"), cwd=work, env=soak.env, capture_output=True, text=True, timeout=900)
    assert ref.returncode == 0, ref.stderr[-3000:]
    t_ref = time.monotonic() - t0
    t1 = time.monotonic()
    done = 0
    try:
        soak.start()
        while done < faults:
            soak.wait_for_progress(timeout=4)
            time.sleep(soak.rng.uniform(0.0, 1.0))
            if soak.rng.random() < 0.85 and soak.fault():
                done += 1
            if soak.rd.joinpath("status.json").exists() and \
                    json.loads(soak.rd.joinpath("status.json").read_text()).get("state") == "finished":
                break  # the run outran the faults: reported as fewer faults
            if soak.rng.random() < 0.5:  # a relaunch racing whatever holds the run now
                soak.start()
            if soak.rng.random() < 0.5:
                soak.thaw_some()
            if not soak.live() and not soak.frozen:
                soak.start()
            if time.monotonic() - t1 > 1800:
                raise TimeoutError(f"soak did not finish its faults in 30 minutes ({done} done)")
        soak.thaw_some(all_=True)
        final = None
        for _ in range(20):  # relaunch until one run finishes the rollouts
            for p in soak.live():
                p.wait(timeout=900)
            soak.reap()
            final = subprocess.run(soak.argv("soak"), cwd=work, env=soak.env, capture_output=True, text=True,
                                   timeout=900)
            if final.returncode == 0:
                break
            time.sleep(1)
        assert final is not None and final.returncode == 0, final.stderr[-3000:] if final else "no final run"
    finally:
        soak.cleanup()
    t_soak = time.monotonic() - t1
    rd = soak.rd
    pubs = [json.loads(x) for x in (rd / "checkpoints" / "publish.jsonl").read_text().splitlines()]
    regressions = sum(1 for a, b in zip(pubs, pubs[1:]) if b["epoch"] < a["epoch"])
    events = [json.loads(x) for x in (rd / "events.jsonl").read_text().splitlines()]
    starts = [e for e in events if e["event"] in ("launch", "resume")]
    first_ckpt = next((i for i, e in enumerate(events) if e.get("latest_checkpoint") is not None), len(events))
    zero_restarts = sum(1 for i, e in enumerate(events) if e["event"] == "launch" and i > first_ckpt)
    log = (rd / "logs" / "trainer.log").read_text(errors="replace")
    partial_loads = log.count("not a complete checkpoint") + log.count("cannot resume")
    a, b = weights(work / "runs" / "reference", num_rollout), weights(rd, num_rollout)
    import torch

    identical = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    orphans = [int(f.read_text()) for f in work.glob("child.*") if _alive(int(f.read_text()))]
    return {
        "faults": done, "faults_by_kind": dict(sorted(soak.faults.items())), "launches": len(soak.launchers),
        "launcher_exit_codes": {str(k): v for k, v in sorted(soak.exits.items())},
        "starts": len(starts), "resumes": sum(e["event"] == "resume" for e in starts),
        "lease_epochs": max(p["epoch"] for p in pubs), "publishes": len(pubs), "epoch_regressions": regressions,
        "fenced_exits": sum(e["event"] == "exit" and e.get("state") == "fenced" for e in events),
        "recoveries": sum(e["event"] == "checkpoint_recovery" for e in events),
        "partial_loads": partial_loads, "restarts_from_zero": zero_restarts, "bit_identical": identical,
        "orphans_left": len(orphans), "reference_s": round(t_ref, 1), "soak_s": round(t_soak, 1),
    }


def main() -> int:
    import benchlib

    quick = benchlib.quick()  # short mode: 4 faults in a 60-rollout run (benchmarks/benchlib.py)
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--faults", type=int, default=4 if quick else 50)
    p.add_argument("--seed", type=int, default=7)
    ns = p.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        result = run_soak(Path(tmp), ns.faults, ns.seed, num_rollout=60 if quick else 600)
    benchlib.write("soak.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
