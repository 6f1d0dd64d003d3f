"""Every check that can fail, run before anything is written, by the dry run and the launch alike.

A run that would fail does so before a run dir, a lease or a process exists, and a dry run
answers exactly like the launch (same errors, exit code 2). What is checked:

- the run directory's files are readable (a corrupt `args.json`, `lease.json`, ... is named);
- what relaunching would do (fresh, resume, finished; a changed training config is refused);
- the machine that runs the trainer (`trainstack/preflight/host_checks.py`): the slime checkout, input paths of the
  right kind (data files, checkpoint directories), plugin modules (`pkg.module.fn`) that can be
  found without importing them, a writable `paths.runs_root` with room for one checkpoint;
- the backend's own checks (preflight.check hooks, trainstack.hooks: the tiny trainer parses and
  checks the argv it will get: features it does not implement, missing data).

For launchers whose trainer runs elsewhere (slurm, lium, ray_job with a remote address) the
host checks are listed as *deferred* by the dry run; `trainstack exec` runs them on that host
before the trainer starts (`check_stored`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainstack import hooks
from trainstack.config.resolve import ResolvedRun
from trainstack.errors import ConfigError, ConfigErrors
from trainstack.preflight.host_checks import (
    PREPARED_DATA_DESTS, HostFacts, checkout_notes, deferred_checks, host_problems, runs_root_problems)
from trainstack.render.command import SlimeCommand


@dataclass
class Report:
    """What a dry run shows besides the command: where things are, what the launch would do."""

    runs_here: bool
    plan: str = ""  # what relaunching this run_id would do
    notes: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)  # checks the remote host runs before the trainer


# ------------------------------------------------------------------------------------------
# the env's data hook
# ------------------------------------------------------------------------------------------
def prepare_env_data(run: ResolvedRun) -> None:
    """The env's data hook (trainstack.run.lifecycle.prepare_data), run at launch once every check passed."""
    from trainstack.run.lifecycle import prepare_data

    prepare_data(run.meta.get("env", {}).get("prepare"), run.paths.data_root)


# ------------------------------------------------------------------------------------------
# the whole preflight
# ------------------------------------------------------------------------------------------
def preflight(run: ResolvedRun, cmd: SlimeCommand, *, launching: bool, submitted_by: str | None = None) -> Report:
    """Raise ConfigErrors with everything that would stop this run; else what the dry run shows.
    A dry run trusts the env's data hook to create the files it names; a launch runs the hook only
    once everything else passed (so a refused launch writes nothing), then checks the data too.
    `submitted_by`: a Hydra launcher that submits the run elsewhere whatever its cluster says
    (`hydra/launcher=slurm`); it checks its own submit host."""
    from trainstack import registry

    facts = HostFacts.from_run(run, cmd)
    if submitted_by:
        facts.launcher = submitted_by
    has_hook = bool(run.meta.get("env", {}).get("prepare"))
    facts.prepared_root = run.paths.data_root if has_hook else None
    report = Report(runs_here=facts.runs_here)
    corrupt = run_dir_problems(run)
    if corrupt:  # everything below reads the run dir: name the broken files first
        raise ConfigErrors(corrupt)
    launcher = registry.get(facts.launcher)
    errors = [] if submitted_by else launcher.submit_host_problems(dry=False)
    if not submitted_by:  # its own settings, offline: a dry run refuses what the launch would (a sweep plugin
        errors += launcher.settings_problems(run.cluster)  # asks once hydra.launcher.<key> is merged in)
        run.warnings.extend(n for n in launcher.launch_notes(run.cluster) if n not in run.warnings)
    try:
        report.plan = _plan(run, dry=not launching)
    except ConfigErrors as err:
        errors += err.errors
    errors += _backend_problems(run, cmd, facts)
    if facts.runs_here:
        errors += host_problems(facts)
    else:
        errors += runs_root_problems(facts, free_space=False)  # the submit host writes the run's spec there
        report.deferred = deferred_checks(facts)
    report.notes = checkout_notes(facts)
    errors = _dedupe(errors)
    if errors:
        raise ConfigErrors(errors)
    if launching and has_hook:
        prepare_env_data(run)
        facts.prepared_root = None  # written now: every input must exist
        errors = _backend_problems(run, cmd, facts)
        errors = _dedupe(errors + (host_problems(facts, only=PREPARED_DATA_DESTS) if facts.runs_here else []))
        if errors:
            raise ConfigErrors(errors)
    return report


def check_stored(spec: Any) -> None:
    """On the machine that executes a stored run (`trainstack exec`, a SLURM job): the host checks
    that the submit host deferred, before the lifecycle writes anything."""
    from trainstack.run.rundir import check

    facts = HostFacts.from_spec(spec)
    facts.launcher = "local"  # executing here: every input must be here
    facts.prepared_root = spec.data_root if spec.data_prepare else None  # the lifecycle runs the data hook
    errors = check.problems(spec.run_dir) + host_problems(facts)
    if errors:
        raise ConfigErrors(_dedupe(errors))


def _dedupe(errors: list[ConfigError]) -> list[ConfigError]:
    """One error per key for a missing input (the trainer's own check and the host check both see it)."""
    out: list[ConfigError] = []
    for e in errors:
        if any(o.key == e.key and (o.problem == e.problem or "on this machine" in e.problem) for o in out):
            continue
        out.append(e)
    return out


def run_dir_problems(run: ResolvedRun) -> list[ConfigError]:
    """Corrupt files in an existing run directory (read by the lifecycle before it starts anything)."""
    d = Path(run.run_dir)
    if d.exists() and not d.is_dir():
        return [ConfigError("run_id", f"{d} exists and is not a directory, so it cannot be the run directory",
                            "move it aside or choose another run_id / paths.runs_root", value=run.run_id)]
    if not d.is_dir():
        return []
    from trainstack.run.rundir import check  # a run dir to read: a new run's dry run imports none of it

    return check.problems(d)  # a broken checkpoint tracker is the resume plan's to report


def _plan(run: ResolvedRun, dry: bool) -> str:
    if not Path(run.run_dir).is_dir():
        return "fresh start (no run directory yet)"
    from trainstack.run.resume import plan
    from trainstack.run.rundir import RunDir

    return plan(run, RunDir(run.run_dir), dry=dry).describe()


# ------------------------------------------------------------------------------------------
# the backend's own checks (preflight.check hooks)
# ------------------------------------------------------------------------------------------
def _backend_problems(run: ResolvedRun, cmd: SlimeCommand, facts: HostFacts) -> list[ConfigError]:
    """What the backend itself would refuse (a dry run trusts the data hook for the files it writes)."""
    errors = [e for check in hooks.get(hooks.PREFLIGHT) for e in check(run, cmd, facts.made_by_hook)]
    return [_as_config_key(run, e) for e in errors]


def _as_config_key(run: ResolvedRun, error: ConfigError) -> ConfigError:
    """The trainer names flags (`--rm-type`); the user wrote a config key (`env.rm_type`)."""
    from dataclasses import replace

    from trainstack.upstream.argtable import load_table

    dest = load_table().flag_to_dest.get(error.key)
    if dest is None:
        return error
    return replace(error, key=run.key(dest), source=run.source(dest),
                   problem=f"{error.problem} ({error.key})" if error.key not in error.problem else error.problem)
