"""Soak: random SIGKILL / SIGSTOP / SIGHUP faults against a run's launcher, its trainer and a reward
plugin's child process, with relaunches racing the frozen or dying holder; and storage faults:
a deleted lease.json of the live holder, a full disk (every write under the run dir fails with
ENOSPC for a few seconds, in the launcher and the trainer alike) and a stalled write (a writer under
the holder's epoch reaches its tracker rename and hangs there, like an NFS rename, until a newer
epoch has published past it; then the rename lands).

Invariants checked (docs/resume.md): never two trainers publishing checkpoints for one run (the
publish log's lease epochs never go back, apart from the injected stalled landings), 0 rollbacks
(no epoch ever starts below what was published before it), lease epochs never repeat, 0 partial
loads (no trainer ever refused or tripped on a checkpoint), 0 restarts from zero (every start after
the first checkpoint is a resume), 0 launcher tracebacks, 0 copies of the launchers' secret values
in any file under the work dir (run dirs, captured output) or /tmp/tsray-*, and the final weights
bit-identical to an uninterrupted run.

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


# `SOAK_DISK_FULL_FLAG` exists: every write under `SOAK_DISK_FULL_ROOT` fails with ENOSPC (on this
# process's open()/os.open(): torch.save, json writes, the lease's and the run dir's writes).
DISK_FULL = '''
import builtins, errno, io, os

_flag, _root = os.environ.get("SOAK_DISK_FULL_FLAG"), os.environ.get("SOAK_DISK_FULL_ROOT")
if _flag and _root:
    def _full(path):
        try:
            return os.path.exists(_flag) and os.path.abspath(os.fsdecode(path)).startswith(_root)
        except (TypeError, ValueError):
            return False

    def _enospc(path):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fsdecode(path))

    _open, _os_open = builtins.open, os.open

    def open(file, mode="r", *a, **k):
        if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+") and _full(file):
            raise _enospc(file)
        return _open(file, mode, *a, **k)

    def os_open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and _full(path):
            raise _enospc(path)
        return _os_open(path, flags, mode, dir_fd=dir_fd)

    builtins.open = io.open = open
    os.open = os_open
'''

# A writer under the live holder's fence: it publishes iter_N (N ahead of the trainer), then hangs
# at its tracker rename (the tiny trainer's stall hook) until released.
STALLED_WRITER = '''
import os, sys
from trainstack.fencing.fence import Fence
from trainstack.tiny.checkpoint import TrainState, save_checkpoint
save, lease_file, token, epoch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
n = int(open(os.path.join(save, "latest_checkpointed_iteration.txt")).read().strip()) + 12
os.environ["TRAINSTACK_TINY_STALL_PUBLISH"] = str(n)
open(os.path.join(os.environ["SOAK_DIR"], "stalled.iter"), "w").write(f"{n} {epoch}")
st = TrainState(model={"w": 1}, optimizer={"o": 1}, scheduler={"s": 1}, rng={"r": 1}, meta={"stalled": 1})
save_checkpoint(save, n, st, cursor=b"stalled", fence=Fence(lease_file, token, epoch, 0.1))
'''
STORAGE_FAULTS = ("stalled write", "deleted lease.json", "disk full")
SECRET = "soak-secret-7f3a9c2e51d84b06"  # a launcher's token: never in any file, log or output


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _members(pgid: int) -> list[int]:
    from trainstack.fencing.lease import group_members

    return group_members(pgid)


class Soak:
    def __init__(self, work: Path, num_rollout: int, seed: int):
        self.work = work
        self.rng = random.Random(seed)
        self.num_rollout = num_rollout
        (work / "plugins").mkdir(parents=True, exist_ok=True)
        (work / "plugins" / "soak_plugin.py").write_text(PLUGIN)
        (work / "diskfull").mkdir(parents=True, exist_ok=True)
        (work / "diskfull" / "sitecustomize.py").write_text(DISK_FULL)
        (work / "out").mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(work / "diskfull"), str(ROOT), str(work / "plugins")]),
                    "SOAK_DIR": str(work), "SOAK_DISK_FULL_FLAG": str(work / "DISK_FULL"),
                    "SOAK_DISK_FULL_ROOT": str(work / "runs" / "soak"), "HF_TOKEN": SECRET, "WANDB_API_KEY": SECRET}
        self.disk_full_until = 0.0
        self.storage_share = 0.3  # of the faults: storage faults (the rest are signals)
        self.stalled: subprocess.Popen | None = None
        self.stalled_pids: set[int] = set()
        self.launchers: list[subprocess.Popen] = []
        self.exits: Counter = Counter()
        self.faults: Counter = Counter()
        self.frozen: list[tuple[str, int]] = []  # (kind, pid or -pgid) to SIGCONT later

    def argv(self, run_id: str) -> list[str]:
        return [PY, str(ROOT / "run.py"), *RUN, f"env.num_rollout={self.num_rollout}", f"run_id={run_id}",
                f"runtime_env.pythonpath=[{self.work / 'diskfull'},{self.work / 'plugins'}]"]

    def start(self, run_id: str = "soak") -> subprocess.Popen:
        # slowed saves (sleeps between checkpoint files) widen the window for faults in the middle of one
        n = len(self.launchers)
        with open(self.work / "out" / f"launch-{n}.out", "wb") as out, open(self.work / "out" / f"launch-{n}.err",
                                                                              "wb") as err:
            p = subprocess.Popen(self.argv(run_id), cwd=self.work, env={**self.env, "TRAINSTACK_TINY_SLOW_SAVE": "0.03"},
                                 stdout=out, stderr=err, start_new_session=True)
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

    def storage_fault(self) -> str | None:
        """A deleted lease.json, a full disk, or a stalled write (see the module docstring)."""
        kind = STORAGE_FAULTS[sum(self.faults[k] for k in STORAGE_FAULTS) % len(STORAGE_FAULTS)]  # each in turn
        lease = self.lease()
        if not lease or not any(p.pid == lease.get("pid") for p in self.live()):
            return None  # storage faults hit a live holder
        if kind == "deleted lease.json":
            try:
                (self.rd / "lease.json").unlink()
            except FileNotFoundError:
                return None
        elif kind == "disk full":
            if self.disk_full_until:
                return None
            (self.work / "DISK_FULL").touch()
            self.disk_full_until = time.monotonic() + self.rng.uniform(1.0, 4.0)
        else:
            tracker = self.rd / "checkpoints" / "latest_checkpointed_iteration.txt"
            if self.stalled is not None or not tracker.exists() or \
                    int(tracker.read_text().strip() or 0) > self.num_rollout - 40:
                return None
            for marker in (".stalled", ".release-stall"):
                (self.rd / "checkpoints" / marker).unlink(missing_ok=True)
            self.stalled = subprocess.Popen(
                [PY, "-c", STALLED_WRITER, str(self.rd / "checkpoints"), str(self.rd / "lease.json"),
                 str(lease["token"]), str(lease["epoch"])], cwd=self.work, env=self.env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            self.stalled_pids.add(self.stalled.pid)
        self.faults[kind] += 1
        return kind

    def tend(self) -> None:
        """Clear a full disk when its time is up; land a stalled rename once a newer epoch published past it."""
        if self.disk_full_until and time.monotonic() > self.disk_full_until:
            (self.work / "DISK_FULL").unlink(missing_ok=True)
            self.disk_full_until = 0.0
        if self.stalled is None:
            return
        if self.stalled.poll() is not None:  # it was fenced before it got there, or it landed
            self.stalled = None
            return
        try:
            n, epoch = map(int, (self.work / "stalled.iter").read_text().split())
            pubs = [json.loads(x) for x in (self.rd / "checkpoints" / "publish.jsonl").read_text().splitlines()]
        except (OSError, ValueError):
            return
        if (self.rd / "checkpoints" / ".stalled").exists() and \
                any(p.get("epoch", 0) > epoch and p["iter"] > n for p in pubs):
            (self.rd / "checkpoints" / ".release-stall").touch()
            self.faults["stalled write landed"] += 1
            self.stalled.wait(timeout=60)
            self.stalled = None

    def fault(self) -> str | None:
        if self.rng.random() < self.storage_share:
            return self.storage_fault()
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
        (self.work / "DISK_FULL").unlink(missing_ok=True)
        if self.stalled is not None and self.stalled.poll() is None:  # never released: it never lands
            os.killpg(self.stalled.pid, signal.SIGKILL)
            self.stalled.wait()
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


def run_soak(work: Path, faults: int = 50, seed: int = 7, num_rollout: int = 600, storage_share: float = 0.3) -> dict:
    from trainstack.tiny.arithmetic import prepare

    prepare(work / "data")
    soak = Soak(work, num_rollout, seed)
    soak.storage_share = storage_share
    t0 = time.monotonic()
    ref = subprocess.run(soak.argv("reference"), cwd=work, env=soak.env, capture_output=True, text=True, timeout=900)
    assert ref.returncode == 0, ref.stderr[-3000:]
    t_ref = time.monotonic() - t0
    t1 = time.monotonic()
    done = 0
    try:
        soak.start()
        while done < faults:
            soak.wait_for_progress(timeout=8)  # a relaunched trainer needs seconds to start: fault it while it trains
            time.sleep(soak.rng.uniform(0.0, 1.0))
            soak.tend()
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
        (work / "DISK_FULL").unlink(missing_ok=True)
        soak.disk_full_until = 0.0
        end = time.monotonic() + 120
        while soak.stalled is not None and time.monotonic() < end:  # let a pending stalled rename land first
            soak.tend()
            if not soak.live():
                soak.start()
            time.sleep(0.2)
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
    landed = [p for p in pubs if p.get("pid") in soak.stalled_pids]  # the injected late renames
    trainers = [p for p in pubs if p.get("pid") not in soak.stalled_pids]
    regressions = sum(1 for a, b in zip(trainers, trainers[1:]) if b["epoch"] < a["epoch"])
    rollbacks, best, seen = 0, -1, set()
    for p in pubs:  # an epoch's first publish must be past everything published before it
        if p.get("pid") in soak.stalled_pids:
            continue
        if p["epoch"] not in seen:
            seen.add(p["epoch"])
            rollbacks += p["iter"] <= best
        best = max(best, p["iter"])
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
    epochs = [e.get("lease_epoch") for e in starts]
    tracebacks = sum("Traceback" in f.read_text(errors="replace") for f in (work / "out").glob("*.err"))
    scanned, hits = scan_for(SECRET.encode(), [work, *Path("/tmp").glob("tsray-*")])
    return {
        "faults": done, "faults_by_kind": dict(sorted(soak.faults.items())), "launches": len(soak.launchers),
        "launcher_exit_codes": {str(k): v for k, v in sorted(soak.exits.items())},
        "starts": len(starts), "resumes": sum(e["event"] == "resume" for e in starts),
        "lease_epochs": max(p["epoch"] for p in pubs), "publishes": len(pubs), "epoch_regressions": regressions,
        "fenced_exits": sum(e["event"] == "exit" and e.get("state") == "fenced" for e in events),
        "recoveries": sum(e["event"] == "checkpoint_recovery" for e in events),
        "partial_loads": partial_loads, "restarts_from_zero": zero_restarts, "bit_identical": identical,
        "orphans_left": len(orphans), "rollbacks": rollbacks, "stalled_landings": len(landed),
        "repeated_epochs": len(epochs) - len(set(epochs)), "launcher_tracebacks": tracebacks,
        "storage_failures": sum(e["event"] == "storage_failed" for e in events),
        "guard_stops": sum(e["event"] == "trainer_stopped_by_guard" for e in events),
        "files_scanned": scanned, "secret_hits": hits,
        "reference_s": round(t_ref, 1), "soak_s": round(t_soak, 1),
    }


def scan_for(needle: bytes, roots: list[Path]) -> tuple[int, list[str]]:
    """(files read, files holding `needle`) under `roots`; the soak's own sitecustomize and env aside."""
    n, hits = 0, []
    for root in roots:
        for path in root.rglob("*"):
            try:
                if not path.is_file() or path.is_symlink() or path.stat().st_size > 50_000_000:
                    continue
                n += 1
                if needle in path.read_bytes():
                    hits.append(str(path))
            except OSError:
                continue
    return n, hits


def main() -> int:
    import benchlib

    # short mode (benchmarks/benchlib.py): 8 faults in an 80-rollout run, half of them storage faults; it is
    # the CI soak (tests/test_soak.py runs it and judges the result)
    quick = benchlib.quick()
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--faults", type=int, default=8 if quick else 50)
    p.add_argument("--seed", type=int, default=7)
    ns = p.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        result = run_soak(Path(tmp), ns.faults, ns.seed, num_rollout=80 if quick else 600,
                          storage_share=0.5 if quick else 0.3)
    benchlib.write("soak.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
