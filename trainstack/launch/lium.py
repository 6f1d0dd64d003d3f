"""Lium GPU pods: a run's spec is valid and renders for `cluster=lium_*`; renting a pod and running
`trainstack exec` on it is not built yet (the open "Sweeps on Lium GPU pods" issue).

Until then `submit` refuses with what to do instead, so nothing is half-launched.
"""
from __future__ import annotations

import sys

from trainstack.launch.base import Launcher
from trainstack.runspec import RunSpec


class LiumLauncher(Launcher):
    name = "lium"
    waits = False

    def submit(self, spec: RunSpec) -> int:
        print(f"trainstack: the lium launcher cannot rent pods yet; nothing was launched for {spec.run_id}.\n"
              f"  fix: dry_run=true shows the exact command; to run it on a GPU machine you hold, copy "
              f"{spec.run_dir} there and run `trainstack exec {spec.run_dir}`", file=sys.stderr)
        return 2
