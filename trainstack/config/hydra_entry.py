"""How trainstack enters Hydra: its launcher options registered, and a single run composed once.

`hydra/launcher=<name>` options are ConfigStore entries that trainstack registers before it composes
its own tree (`register_launchers`), not at Hydra's plugin scan: the scan imports every
`hydra_plugins` module into every Hydra app of the venv, and reading the launcher entry points
there made all of them slower.

`@hydra.main` composes the whole tree twice for one run: once to read `hydra.mode` (run or
multirun; `Hydra.get_mode`) and once for the run. For a plain single run (only overrides on the
command line, no `-m`, `--cfg`, `--help`, `--config-dir`, ...), `run_single` composes once, as
`Hydra.run` does, and takes `hydra.mode` from that composition; when the tree asks for a multirun,
or the composition fails (Hydra's own path reports the error), it returns False and the caller
goes through `@hydra.main`. A dry run calls the task as a dry sweep point does (no `run_job`: a dry
run writes nothing, so Hydra's output dir, job logging and its two deep copies of the config are
skipped; Hydra's job callbacks are not called); any other run goes through Hydra's `run_job` with
its callbacks, as `Hydra.run` does. tests/test_hydra_entry.py compares both with `@hydra.main`.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

_REGISTERED: list[bool] = []


def register_launchers() -> None:
    """`hydra/launcher=<name>` for every trainstack launcher (once per process)."""
    if not _REGISTERED:
        from hydra_plugins.trainstack_launchers.launcher import register

        register()
        _REGISTERED.append(True)


def plain_overrides(argv: Sequence[str]) -> bool:
    """Only overrides (no flag), none of them about Hydra's mode: a single run's command line."""
    return all(not a.startswith("-") and not a.startswith(("hydra.mode=", "hydra.mode ")) for a in argv)


def run_single(task: Callable[[Any], Any], conf_dir: str, config_name: str, argv: Sequence[str],
               version_base: str) -> bool:
    """Run `task` once on the tree composed once; False when `@hydra.main` must decide instead."""
    if not plain_overrides(argv):
        return False
    from hydra import version
    from hydra._internal import utils as hydra_utils
    from hydra._internal.hydra import Hydra
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode
    from omegaconf import open_dict, read_write

    version.setbase(version_base)
    calling_file, calling_module = hydra_utils.detect_calling_file_or_module_from_task_function(task)
    task_name = hydra_utils.detect_task_name(calling_file, calling_module)
    search_path = hydra_utils.create_automatic_config_search_path(calling_file, calling_module, conf_dir)
    overrides = list(argv)
    hydra = Hydra.create_main_hydra2(task_name=task_name, config_search_path=search_path)
    try:
        try:
            cfg = hydra.compose_config(config_name, overrides, run_mode=RunMode.RUN, with_log_configuration=True)
        except Exception:  # noqa: BLE001 - @hydra.main composes again and reports it its way
            return False
        if cfg.hydra.mode not in (None, RunMode.RUN):  # the tree asks for a multirun
            return False
        with read_write(cfg.hydra), open_dict(cfg.hydra):  # what @hydra.main's `hydra.mode=RUN` override leaves
            cfg.hydra.mode = RunMode.RUN
            cfg.hydra.overrides.hydra.append("hydra.mode=RUN")
        if cfg.get("dry_run") is True:
            hydra_utils.run_and_report(lambda: _run_dry(task, cfg))
        else:
            hydra_utils.run_and_report(lambda: _run_job(hydra, task, cfg, config_name))
        return True
    finally:
        GlobalHydra.instance().clear()


def _run_dry(task: Callable[[Any], Any], cfg: Any) -> None:
    """The task on the composed config with `HydraConfig` set, as a dry sweep point runs."""
    from hydra.core.utils import setup_globals

    from trainstack.config.sweep_cache import set_hydra_config

    setup_globals()
    set_hydra_config(cfg)
    task(cfg)


def _run_job(hydra: Any, task: Callable[[Any], Any], cfg: Any, config_name: str) -> Any:
    """`Hydra.run` after its composition: callbacks around Hydra's `run_job`."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import run_job
    from hydra.types import HydraContext

    callbacks = Callbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name=config_name)
    ret = run_job(hydra_context=HydraContext(config_loader=hydra.config_loader, callbacks=callbacks),
                  task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None,
                  configure_logging=True)
    callbacks.on_run_end(config=cfg, config_name=config_name, job_return=ret)
    _ = ret.return_value  # raises the task's exception, as Hydra.run does
    return ret

