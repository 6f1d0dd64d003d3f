"""Config node of `hydra/launcher=slurm` (registered when Hydra scans the hydra_plugins package).

Self-contained (no import of hydra-submitit-launcher), so scanning plugins never warns on a
machine without the slurm extra. The field names are hydra-submitit-launcher's, so its users'
overrides keep working; each one either reaches sbatch or is refused with the key to use instead.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore

# Fields passed to sbatch as they are (submitit's `slurm_<name>` parameters).
SBATCH_PASSTHROUGH = ("qos", "comment", "constraint", "exclude", "gres", "cpus_per_gpu", "gpus_per_task",
                      "mem_per_gpu", "mem_per_cpu", "srun_args", "stderr_to_stdout")
# Fields a run's `cluster` decides: setting them here is refused, naming the cluster key.
FROM_CLUSTER = {"nodes": "cluster.num_nodes", "gpus_per_node": "cluster.gpus_per_node",
                "tasks_per_node": "(one task per node, always)", "name": "(the job name is the run_id)"}


@dataclass
class TrainstackSlurmQueueConf:
    """Resources (nodes, GPUs as gres, CPUs, memory, partition, account, time limit, extra sbatch
    options) come from each point's `cluster`; the fields here are fallbacks when it leaves them null."""

    _target_: str = "hydra_plugins.trainstack_slurm.launcher.TrainstackSlurmLauncher"
    submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j"
    wait: bool = False  # true: block until every job ends and return the metric (Optuna)
    dry: bool = False  # true: compose, validate and size every point, write sweep.json with the sbatch headers, submit nothing
    array: bool = False  # true: one sbatch array per resource shape (no per-run singleton; lease fences)
    cpus_per_task: Optional[int] = 1
    timeout_min: int = 60
    mem_gb: Optional[int] = None
    partition: Optional[str] = None  # fallback when cluster.partition is null
    account: Optional[str] = None  # fallback when cluster.account is null
    signal_delay_s: int = 120  # USR2 this long before the time limit: checkpoint + requeue
    max_num_timeout: int = 3  # submitit: requeues after hitting the time limit
    max_requeues: int = 10  # trainstack: requeues of any cause (SLURM_RESTART_COUNT)
    ray_timeout_s: int = 300  # multi-node: wait this long for every node and GPU to join Ray
    metric: Optional[str] = "rollout/raw_reward"  # the value a finished job returns to the sweeper
    throttle_s: float = 0.02  # pause between two sbatch calls (submitit's own default: 0.2 s)
    array_parallelism: int = 256
    setup: Optional[List[str]] = None  # shell lines before srun in the sbatch script
    additional_parameters: Dict[str, Any] = field(default_factory=dict)  # more sbatch long options
    # passed to sbatch as they are
    qos: Optional[str] = None
    comment: Optional[str] = None
    constraint: Optional[str] = None
    exclude: Optional[str] = None
    gres: Optional[str] = None
    cpus_per_gpu: Optional[int] = None
    gpus_per_task: Optional[int] = None
    mem_per_gpu: Optional[str] = None
    mem_per_cpu: Optional[str] = None
    srun_args: Optional[List[str]] = None
    stderr_to_stdout: Optional[bool] = None
    # decided by each point's cluster: refused when set
    nodes: Optional[int] = None
    gpus_per_node: Optional[int] = None
    tasks_per_node: Optional[int] = None
    name: Optional[str] = None


ConfigStore.instance().store(group="hydra/launcher", name="slurm", node=TrainstackSlurmQueueConf(),
                             provider="trainstack")
