"""How trainstack names a run in W&B, the way its users look for it.

- display name: the run id (the tiny trainer names its run after TRAINSTACK_RUN_ID; slime names
  its W&B run after `--wandb-group`, so there the name is the group below);
- group: the sweep a run belongs to (the Hydra sweep directory's name, e.g. `lr-sweep` for
  `hydra.sweep.dir=multirun/lr-sweep`), else the run id: a sweep's runs sit together in the
  W&B UI and `trainstack compare --group NAME` finds them;
- project: `args.wandb_project`, else `tracking.wandb_project`, else `trainstack`: never what
  W&B guesses from the working directory (a checkout's folder name);
- id: the run id (`WANDB_RUN_ID`, render.py) with `WANDB_RESUME=allow`, so a restart continues
  the same W&B run, offline too (`trainstack sync RUN` uploads its offline dirs in order).

Only what trainstack manages is renamed: a `--wandb-group` or `--wandb-project` the config sets
is kept as set.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainstack.config.resolve import ResolvedRun

DEFAULT_PROJECT = "trainstack"


def sweep_name(cfg: Any = None) -> str | None:
    """The Hydra sweep this run is a point of (None outside `-m`): from the point's own `hydra` node when
    it has one (a sweep plugin checks every point before any runs), else from Hydra's global config."""
    node = _hydra_node(cfg)
    if node is not None:
        try:
            if str(node.get("mode")).rsplit(".", 1)[-1] == "MULTIRUN" and node.sweep.dir:
                return Path(str(node.sweep.dir)).name or None
        except Exception:  # an unresolvable sweep dir: fall back to Hydra's global config
            pass
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
    except ImportError:  # pragma: no cover - Hydra is a dependency
        return None
    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN or not hc.sweep.dir:
        return None
    return Path(str(hc.sweep.dir)).name or None


def _hydra_node(cfg: Any) -> Any:
    try:
        return cfg.get("hydra") if cfg is not None and hasattr(cfg, "get") else None
    except Exception:
        return None


def name_wandb_run(run: ResolvedRun, sweep: str | None = None) -> None:
    """Set the managed W&B group and project of a run that logs to W&B (in place, before rendering)."""
    if not run.args.get("use_wandb"):
        return
    managed = run.source("wandb_group").startswith("trainstack")
    if managed and not run.args.get("wandb_random_suffix"):
        group = sweep if sweep is not None else sweep_name()
        run.args["wandb_group"] = group or run.run_id
        run.provenance["wandb_group"] = (f"trainstack: the sweep {group}" if group
                                         else f"trainstack: run identity of {run.run_id}")
    if not run.args.get("wandb_project"):
        run.args["wandb_project"] = DEFAULT_PROJECT
        run.provenance["wandb_project"] = "trainstack default (set tracking.wandb_project or args.wandb_project)"
        run.layer_of["wandb_project"] = "args"
