"""Every name in a run directory and a sweep directory, and nothing else.

This is the only module that spells these file names (a test greps the package for them).
Format of each file: docs/run_dir.md.
"""
from __future__ import annotations

from pathlib import Path

# What the run is (written once by the submit host, before anything runs; read by `exec`).
SPEC = "spec.json"
# Views of the spec for people and older readers (diff, compare): same facts, written with it.
CONFIG = "config.yaml"
OVERRIDES = "overrides.yaml"
ARGS = "args.json"
PROVENANCE = "provenance.json"
CHOICES = "choices.json"
COMMAND = "command.json"
COMMAND_SH = "command.sh"
# What happened and where it stands.
EVENTS = "events.jsonl"
STATUS = "status.json"
STATUS_LOCK = ".status.json.lock"  # status.json's writers (threads, processes) take turns on it
SUMMARY = "summary.json"  # where the run stands, made from the files above (run/rundir/summary.py): status reads it
METRICS_DIGEST = "metrics_digest.json"  # a run that is not running: its metrics summed up for compare (metrics/digest.py)
METRICS = "metrics.jsonl"
EVALS = "evals.jsonl"  # eval-only runs of this run's checkpoints (trainstack eval): their eval/* metrics per iteration
LEASE = "lease.json"
TRAINER_HEARTBEAT = "trainer_heartbeat.json"  # the guard's word that its trainer is not stopped: {pid, epoch, time}
LEASE_EPOCHS = "lease.epochs"  # every lease epoch ever reserved, one per line: epochs never repeat
SLURM = "slurm.json"  # the scheduler's record of a submitted run
LIUM = "lium.json"  # a run registered with the Lium commander (its URL, the pod's run dir)
# Directories.
CHECKPOINTS = "checkpoints"
EXPORTS = "exports"  # trainstack export's default output: exports/iter_NNNNNNN (a Hugging Face model dir)
LOGS = "logs"
TENSORBOARD = "tensorboard"
WANDB = "wandb"
TRAINER_LOG = "trainer.log"  # under logs/
EXEC_LOG = "exec.log"  # under logs/: a run started in the background (ray_job wait=false: launch/detached.py)
EXEC_STDERR_LOG = "exec.stderr.log"  # under logs/: a Lium worker's `trainstack exec` stderr (errors before the trainer)
# HTTP environments (trainstack/http_env): the generate function's settings (--custom-config-path),
# written at each launch with the live env server URL; the env server trainstack starts for the run.
HTTP_ENV_CONFIG = "http_env.yaml"
HTTP_ENV_SERVER_LOG = "http_env_server.log"  # under logs/
HTTP_ENV_SERVER_READY = "http_env_server.json"  # under logs/: the bound URL, written once it listens
RAY_HEAD_LOG = "ray_head.log"  # under logs/
SLURM_FOLDER = "slurm"  # submitit's folder of a single submitted run: slurm/%j
RAY_RENDEZVOUS = "ray"  # multi-node Ray rendezvous: ray/<job id>/
ROLLOUT_DATA = "rollout_data"  # hub.push_rollouts: slime's --save-debug-rollout-data dumps
ROLLOUT_DATA_FILE = "rollout_{rollout_id}.pt"  # slime formats it per rollout (eval: rollout_eval_<id>.pt)
HUB_RESTORE = ".hub-restore"  # under checkpoints/: a Hub download in progress (moved into place when verified)
# slime's checkpoint tracker in --save (Megatron's name), read by slime, the tiny trainer and us.
TRACKER = "latest_checkpointed_iteration.txt"
DATA_CURSOR = "rollout/global_dataset_state_dict_{rollout_id}.pt"  # slime's data cursor, relative to --save
MANIFEST = "manifest.json"  # in an iter dir: every file of the checkpoint with its size (docs/resume.md)
INCOMPLETE_DIR = ".incomplete"  # under --save: unpublished or broken iter dirs moved aside, never deleted
PUBLISH_LOG = "publish.jsonl"  # under --save: one line per checkpoint the tiny trainer published (iter, epoch)
CHECKPOINT_IDENTITY = "identity.json"  # under --save: what the run trains (run_id, args, inputs); copied into manifests
LOAD_FAILURES = "load_failures.jsonl"  # under --save: a published checkpoint the trainer could not load (iter, error)
SECRETS = ".secrets.json"  # mode 0600, only while a Ray job runs: the entrypoint reads its secrets from it
# Sweep directory.
SWEEP_MANIFEST = "sweep.json"
SWEEP_LOCK = ".sweep.json.lock"  # two sweeps writing into one sweep dir take turns
# Files whose presence makes a directory a run directory (any of them: a pending run has a spec).
RUN_MARKERS = (SPEC, STATUS, SLURM, CONFIG)


def is_run_dir(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and any((p / name).exists() for name in RUN_MARKERS)


def is_sweep_dir(path: str | Path) -> bool:
    return (Path(path) / SWEEP_MANIFEST).is_file()


def run_dir_of(runs_root: str | Path, run_id: str) -> Path:
    return Path(runs_root) / run_id


def checkpoints_of(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def iter_name(rollout_id: int) -> str:
    """A checkpoint directory under --save: iter_0000042 (Megatron's layout)."""
    return f"iter_{rollout_id:07d}"
