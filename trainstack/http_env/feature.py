"""The HTTP env feature (docs/http_env.md) joins the core here: its settings in the run_id hash,
the checks of `env.meta.http_env`, the env server around the trainer, the dry run's note on it,
the settings file a launch writes, and `trainstack env serve/list`. Each hook imports its module
when it runs, so discovering the feature costs nothing."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from trainstack import hooks

CONFIG_KEY = "http_env"  # the env preset's meta block (settings.CONFIG_KEY)


def _identity(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    node = (meta.get("env") or {}).get(CONFIG_KEY)
    if not isinstance(node, dict):
        return {}
    from trainstack.http_env.settings import identity

    return {CONFIG_KEY: identity(node)}


def _rules(ctx: Any) -> list:
    if (ctx.run.meta.get("env") or {}).get(CONFIG_KEY) is None:
        return []  # the rules' first check; a run without an HTTP env imports nothing of it
    from trainstack.http_env.rules import http_env_settings

    return http_env_settings(ctx)


def _has_block(config: Mapping[str, Any]) -> bool:
    """The run's env preset has a `meta.http_env` block (sidecar.block_of's test, before importing it)."""
    return ((config.get("env") or {}).get("meta") or {}).get(CONFIG_KEY) is not None


def _wrap_runner(spec: Any, start: Callable) -> Callable:
    if not _has_block(spec.config):
        return start  # no env server to run: a launch imports nothing of this feature
    from trainstack.http_env.sidecar import with_sidecars

    return with_sidecars(spec, start)


def _dry_run_notes(run: Any) -> list[str]:
    if (run.meta.get("env") or {}).get(CONFIG_KEY) is None:
        return []
    from trainstack.http_env.sidecar import dry_run_notes

    return dry_run_notes(run)


def _launch_files(config: Mapping[str, Any], args: Mapping[str, Any]) -> Mapping[str, str]:
    if not _has_block(config):
        return {}
    from trainstack.http_env.sidecar import launch_files

    return launch_files(dict(config), dict(args))


def _preflight(run: Any, cmd: Any, made_by_data_hook: Callable[[str], bool]) -> list:
    """An HTTP env run starts the env server beside the trainer, and slime's generate function talks to it:
    their modules must be installed where the run executes (here, unless the launcher runs it elsewhere)."""
    if (run.meta.get("env") or {}).get(CONFIG_KEY) is None:
        return []
    from trainstack.extras import EXTRAS, problem
    from trainstack.registry import launcher_class

    if not launcher_class(run.cluster.launcher).runs_here(run.cluster.settings or {}):
        return []
    extra = "cpu" if run.cluster.backend == "tiny" else "http-env"
    return problem("env.meta.http_env", extra, "an HTTP env (its env server and the generate function's client)",
                   EXTRAS["http-env"])


def _cli(sub: Any) -> None:
    from trainstack.http_env.cli import add_env_commands

    add_env_commands(sub)  # env serve / env list


def register(registry: hooks.Registry) -> None:
    registry.add(hooks.IDENTITY, _identity)
    registry.add(hooks.RULES, _rules)
    registry.add(hooks.PREFLIGHT, _preflight)
    registry.add(hooks.WRAP_RUNNER, _wrap_runner)
    registry.add(hooks.DRY_RUN_NOTES, _dry_run_notes)
    registry.add(hooks.LAUNCH_FILES, _launch_files)
    registry.add(hooks.CLI, _cli)
