"""Config node of `hydra/launcher=slurm` (registered when Hydra scans the hydra_plugins package)."""
from dataclasses import dataclass
from typing import Optional

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf


@dataclass
class TrainstackSlurmQueueConf(SlurmQueueConf):
    """hydra-submitit-launcher's SLURM fields, plus trainstack's. Resources (nodes, GPUs as gres,
    CPUs, memory, partition, account, time limit, extra sbatch options) come from each point's
    `cluster`; the fields here are the fallbacks when the cluster leaves them null."""

    _target_: str = "hydra_plugins.trainstack_slurm.launcher.TrainstackSlurmLauncher"
    submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j"
    wait: bool = False  # true: block until every job ends and return the metric (Optuna)
    dry: bool = False  # true: compose, validate and size every point, write sweep.json with the sbatch headers, submit nothing
    array: bool = False  # true: one sbatch array per resource shape (no per-run singleton; lease fences)
    cpus_per_task: Optional[int] = 1
    timeout_min: int = 60
    max_num_timeout: int = 3  # submitit: requeues after hitting the time limit
    max_requeues: int = 10  # trainstack: requeues of any cause (SLURM_RESTART_COUNT)
    ray_timeout_s: int = 300  # multi-node: wait this long for every node and GPU to join Ray
    metric: Optional[str] = "rollout/raw_reward"  # the value a finished job returns to the sweeper
    throttle_s: float = 0.02  # pause between two sbatch calls (submitit's own default: 0.2 s)


ConfigStore.instance().store(group="hydra/launcher", name="slurm", node=TrainstackSlurmQueueConf(),
                             provider="trainstack")
