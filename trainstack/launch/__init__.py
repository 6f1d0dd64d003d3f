"""Launchers: start a rendered run where its cluster says."""
from __future__ import annotations

from trainstack.errors import ConfigError, ConfigErrors, report_and_exit
from trainstack.render import SlimeCommand
from trainstack.resolve import ResolvedRun


def launch(run: ResolvedRun, cmd: SlimeCommand) -> int:
    launcher = run.cluster.launcher
    if launcher == "local":
        from trainstack.launch.local import launch_local

        return launch_local(run, cmd)
    if launcher == "ray_job":
        from trainstack.launch.ray_job import launch_ray_job

        return launch_ray_job(run, cmd)
    if launcher == "slurm":  # submit one SLURM job; inside that job, run it (trainstack/launch/slurm.py)
        from trainstack.launch.slurm import launch_slurm

        return launch_slurm(run, cmd)
    report_and_exit(ConfigErrors([ConfigError(
        "cluster.launcher", f"the '{launcher}' launcher is not available in this version",
        "use dry_run=true to print the exact command, or cluster=local_cpu", value=launcher)]))
