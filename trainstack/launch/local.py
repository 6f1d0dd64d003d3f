"""Local launcher: the trainer in its own process group on this machine.

`submit` runs the stored command here and returns when it ends; the lifecycle around it
(lease, resume plan, events, status, signals) is `trainstack/run/lifecycle.py`, the process it starts
`trainstack/launch/process.py`. The trainer starts
under trainstack.run.trainer_guard in a new session: the guard writes logs/trainer.log, fences the group
against the run's lease, stops it if this launcher dies, and reaps whatever the trainer left
in the group. Signals go to the whole process group, never by name (trainstack/procgroup.py). The console echo never
blocks the trainer: a closed or stalled stdout loses console lines, never training time.
"""
from __future__ import annotations

from trainstack.launch.base import Launcher


class LocalLauncher(Launcher):
    name = "local"
    waits = True
    sweep_verb = "ran {n} run{s}"  # the sweep plugin's report line: each ran to its end here

    @classmethod
    def runs_here(cls, settings: dict) -> bool:
        return True
