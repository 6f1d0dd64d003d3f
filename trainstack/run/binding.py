"""A run id is bound to its launcher and its history.

A run directory's stored spec (`spec.json`) says which launcher the run belongs to and what it
trains. A later submission under the same run id may change only the run length (`num_rollout`,
to continue it) and what never counts in the run id; anything else, or another launcher, would
overwrite the spec of a run that is elsewhere (a Lium pod's volume, a held SLURM job) and train
from zero there, so it is refused with the fix: a new run id, or an explicit
`resume.allow_changes=[launcher]` / `[<dest>,...]`. Checked wherever a run is planned
(`resume.plan`: the dry run, the launch, SLURM's and Lium's submit), so the dry run refuses
like the launch.
"""
from __future__ import annotations

from typing import Any

from trainstack.config.resolve import NON_TRAINING_DESTS
from trainstack.errors import ConfigError, ConfigErrors

MOVE_CONSENT = "launcher"  # resume.allow_changes=[launcher]: move the run to another launcher knowingly
RUN_LENGTH = ("num_rollout",)  # what continuing a run changes


def training_relevant(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items()
            if k not in NON_TRAINING_DESTS and v is not None}


def config_changes(stored: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    a, b = training_relevant(stored), training_relevant(current)
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def launcher_of(run: Any) -> str | None:
    """The launcher a planned run goes to: a RunSpec's `launcher`, a ResolvedRun's `cluster.launcher`."""
    name = getattr(run, "launcher", None)
    if isinstance(name, str):
        return name
    cluster = getattr(run, "cluster", None)
    name = getattr(cluster, "launcher", None)
    return name if isinstance(name, str) else None


def _runs_here(launcher: str, settings: Any) -> bool:
    """Does this launcher's trainer run on this host, in this run dir (local; ray_job on a loopback
    head)? Two such launchers share the run's checkpoints: moving between them loses nothing."""
    from trainstack.registry import launcher_class

    try:
        return bool(launcher_class(launcher).runs_here(dict(settings) if isinstance(settings, dict) else {}))
    except ConfigErrors:  # a launcher not installed here: it cannot be said to share this run dir
        return False


def binding_errors(run: Any, stored: Any, resumable: bool = False) -> list[ConfigError]:
    """What submitting `run` under its run id would break in the run dir whose spec is `stored`
    (the parsed spec.json; anything else: no binding yet). `resumable`: the run dir has a complete
    checkpoint, whose own check (resume.plan) names the changed training config."""
    if not isinstance(stored, dict):
        return []
    allowed = set(getattr(run.resume, "allow_changes", []) or [])
    errors: list[ConfigError] = []
    old, new = stored.get("launcher"), launcher_of(run)
    fix_new = "submit it as a new run (run_id=<new id>)"
    if isinstance(old, str) and new is not None and old != new and MOVE_CONSENT not in allowed \
            and not (_runs_here(old, (stored.get("cluster") or {}).get("settings"))
                     and _runs_here(new, getattr(getattr(run, "cluster", None), "settings", None))):
        errors.append(ConfigError(
            "cluster.launcher", f"run {run.run_id} belongs to the '{old}' launcher (its run dir was submitted with "
            f"'{old}'); submitting it with '{new}' would overwrite its spec, and '{new}' would not find its "
            "checkpoints and would train it again from zero",
            f"{fix_new}; follow the existing one with `trainstack status {run.run_id}`; or move it knowingly "
            f"with resume.allow_changes=[{MOVE_CONSENT}]", value=new, source=f"{run.run_dir}/spec.json"))
    stored_args = stored.get("args")
    if isinstance(stored_args, dict) and not resumable:
        changed = {k: v for k, v in config_changes(stored_args, run.args).items()
                   if k not in RUN_LENGTH and k not in allowed}
        if changed:
            keys = ",".join(changed)
            errors.append(ConfigError(
                "run_id", f"run {run.run_id} was submitted with another training config; submitting this one under "
                "the same run id would overwrite what it is", f"{fix_new}, or allow the change with "
                f"resume.allow_changes=[{keys}] (only the run length, env.num_rollout, may change freely)",
                value=run.run_id, source=f"{run.run_dir}/spec.json",
                related={k: f"{a!r} -> {b!r}" for k, (a, b) in changed.items()}))
    return errors


def check(run: Any, stored: Any, resumable: bool = False) -> None:
    errors = binding_errors(run, stored, resumable)
    if errors:
        raise ConfigErrors(errors)
