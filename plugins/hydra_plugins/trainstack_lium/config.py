"""Config node of `hydra/launcher=lium` (registered when Hydra scans the hydra_plugins package).

The pod (GPU type/count, template, volume, price) comes from each point's `cluster.extra.lium`;
these fields override `cluster.extra.launcher` (trainstack/launch/lium.py DEFAULTS).
"""
from dataclasses import dataclass
from typing import Optional

from hydra.core.config_store import ConfigStore


@dataclass
class TrainstackLiumLauncherConf:
    _target_: str = "hydra_plugins.trainstack_lium.launcher.TrainstackLiumLauncher"
    wait: bool = False  # true: block until every run has ended and return its metric (Optuna)
    restart_limit: Optional[int] = None  # pods re-provisioned per run before it is failed
    spend_limit: Optional[float] = None  # USD per run (paused at the limit)
    sweep_spend_limit: Optional[float] = None  # USD for the whole sweep (its runs paused at the limit)
    commander_url: Optional[str] = None  # default $TRAINSTACK_COMMANDER_URL, else a commander on this host
    public_url: Optional[str] = None  # what pods use to reach a commander started here
    poll_s: Optional[float] = None  # wait=true: seconds between status polls
    metric: Optional[str] = None  # what a finished run returns to the sweeper


ConfigStore.instance().store(group="hydra/launcher", name="lium", node=TrainstackLiumLauncherConf(),
                             provider="trainstack")
