"""What a launcher is.

A launcher takes a stored run spec (resolved, validated and rendered on the submit host) and
puts it where its cluster says. Two things every launcher answers:

- `submit(spec)`: start the run. A launcher that `waits` returns when the run has ended, with
  its exit code (local, ray_job); one that does not returns once the run is queued (slurm).
- `execute(spec)`: run the stored command here, under the lifecycle (lease, resume plan, events,
  status, signals). `trainstack exec RUN` calls it; so does a queued job when it starts and on
  every requeue. The default runs the trainer as a local process group.

`submit_host_problems(dry)` says what this machine lacks to submit (no `sbatch`, a missing
client library): the preflight asks before anything is written, so a dry run refuses like the launch.

A launcher may also say which Hydra launcher fans a sweep out to it (`sweep_launcher`), so
`-m cluster.launcher=slurm` under a launcher that cannot submit to SLURM is refused with the fix.
Register a new launcher in `trainstack/launch/registry.py`. Walkthrough: docs/launchers.md.
"""
from __future__ import annotations

from typing import ClassVar

from trainstack.errors import ConfigError
from trainstack.runspec import RunSpec


class Launcher:
    name: ClassVar[str]
    waits: ClassVar[bool] = True  # submit() returns when the run has ended
    sweep_launcher: ClassVar[str | None] = None  # the `hydra/launcher=` option that can submit sweeps to it

    def submit_host_problems(self, dry: bool = False) -> list[ConfigError]:
        """What this machine lacks to submit runs (dry: to size them without submitting)."""
        return []

    def submit(self, spec: RunSpec) -> int:
        """Start the run; exit code of the run (waits) or of the submission."""
        return self.execute(spec)

    def execute(self, spec: RunSpec) -> int:
        """Run the stored command on this machine under the run lifecycle."""
        from trainstack.launch.local import start_local_process
        from trainstack.lifecycle import execute

        return execute(spec, start_local_process(spec))
