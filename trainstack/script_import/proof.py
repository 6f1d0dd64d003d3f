"""The written experiment rendered as `trainstack render --config-dir DIR experiment=<name>` renders it,
and its argv compared with the script's: dest by dest as slime's parsers read both, so order and
spelling do not count. What trainstack does on purpose (its checkpoint directory for --load/--save, a
save interval, TensorBoard, the W&B run it names, a secret taken to the environment) is listed apart
from what differs; a flag one side gives with slime's own default is the same to slime.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainstack.script_import.flags import Parsed, from_argv, same
from trainstack.upstream import argtable as at

# trainstack's own flags (resolve.add_managed_dests, derive_cluster_args) and why
ADDED = {
    "save_interval": "trainstack's default save interval (Megatron needs one with --save)",
    "use_tensorboard": "TensorBoard in the run dir (tracking.tensorboard)",
    "wandb_dir": "W&B files in the run dir",
    "wandb_random_suffix": "one W&B run per run id (--disable-wandb-random-suffix)",
    "wandb_group": "the W&B group trainstack names after the experiment",
    "wandb_project": "trainstack's W&B project when none is given (tracking.wandb_project)",
    "num_gpus_per_node": "trainstack's fix for colocated runs on fewer than 8 GPUs (slime#2012)",
    "save_debug_rollout_data": "hub.push_rollouts",
}


@dataclass
class Proof:
    same: list[str] = field(default_factory=list)  # dests equal on both sides
    managed: list[str] = field(default_factory=list)  # "--flag: why" (trainstack's on purpose)
    different: list[str] = field(default_factory=list)  # "--flag: script X, rendered Y"
    entrypoint: tuple[str, str] = ("", "")  # (script, rendered)
    argv: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.different and self.entrypoint[0] == self.entrypoint[1]


def render(name: str, dirs: list[str], slime_root: Path | None = None) -> tuple[Any, Any]:
    """Compose `experiment=<name>` with `dirs` added to the shipped tree, as `--config-dir` does; with the
    slime checkout the script was read in as slime.root, so paths inside it compare as they are."""
    from trainstack.render.pipeline import build_from_overrides

    searchpath = ",".join(f"file://{os.path.abspath(d)}" for d in dirs)
    root = [f"slime.root={slime_root}"] if slime_root is not None else []
    return build_from_overrides([f"hydra.searchpath=[{searchpath}]", f"experiment={name}", *root])


def compare_env(env: Any, cmd: Any, proof: Proof) -> None:
    """The script's runtime env in the rendered one: each variable trainstack does not set from the
    cluster, each PYTHONPATH entry."""
    if env is None:
        return
    for key, value in sorted(env.vars.items()):
        if key != "NCCL_NVLS_ENABLE" and cmd.env.get(key) != value:
            proof.different.append(f"runtime env {key}: the script gives {value!r}, trainstack {cmd.env.get(key)!r}")
    have = {p.rstrip("/") for p in cmd.env.get("PYTHONPATH", "").split(":")}
    wanted = [*env.pythonpath, *([env.megatron_root] if env.megatron_root else [])]
    for entry in wanted:
        if entry.rstrip("/") not in have:
            proof.different.append(f"runtime env PYTHONPATH: trainstack's lacks {entry}")


def compare(script: Parsed, entrypoint: str, run: Any, cmd: Any) -> Proof:
    from trainstack.secrets import is_secret_name

    table = at.load_table()
    rendered = from_argv(cmd.argv)
    proof = Proof(entrypoint=(entrypoint, os.path.basename(cmd.entrypoint[-1])), argv=list(cmd.argv))
    ours = rendered.values()
    theirs = {d: f.value for d, f in script.flags.items()}
    slime_root = str(run.slime.root)
    for dest in sorted(set(ours) | set(theirs) | set(script.unknown)):
        spec = table[dest]
        flag = spec.flag
        if dest in theirs and dest in ours:
            if same(spec, theirs[dest], ours[dest]) or _under(slime_root, dest, theirs[dest], ours[dest]):
                proof.same.append(dest)
            elif dest in ("load", "save"):
                proof.managed.append(f"{flag}: the run's checkpoint dir {ours[dest]} (the script: {theirs[dest]})")
            else:
                proof.different.append(f"{flag}: the script gives {theirs[dest]!r}, trainstack renders {ours[dest]!r}")
        elif dest in ours:
            if dest in ("load", "save"):
                proof.managed.append(f"{flag}: the run's checkpoint dir {ours[dest]}")
            elif dest in ADDED:
                proof.managed.append(f"{flag}: {ADDED[dest]}")
            elif spec.has_default and same(spec, ours[dest], spec.default):
                proof.same.append(dest)  # slime's default, said out loud
            else:
                proof.different.append(f"{flag}: trainstack adds {ours[dest]!r}")
        elif is_secret_name(dest):
            proof.managed.append(f"{flag}: a secret, from the launching shell's environment instead")
        elif dest in script.unknown:
            proof.different.append(f"{flag}: its value is unknown to import ({' '.join(script.unknown[dest].tokens)})")
        elif spec.has_default and same(spec, theirs[dest], spec.default):
            proof.same.append(dest)
        else:
            proof.different.append(f"{flag}: the script gives {theirs[dest]!r}, trainstack leaves it out")
    return proof


def _under(root: str, dest: str, script: Any, rendered: Any) -> bool:
    """A relative path of the script is the rendered path under the slime checkout."""
    from trainstack.script_import.plan import relative_path

    if not relative_path(dest, script):
        return False
    if isinstance(script, list) and isinstance(rendered, list) and len(script) == len(rendered):
        return all(same(None, a, b) or same(None, os.path.normpath(os.path.join(root, a)), b)
                   for a, b in zip(script, rendered))
    return isinstance(script, str) and same(None, os.path.normpath(os.path.join(root, script)), rendered)

