"""How trainstack enters Hydra: its launcher options registered, and a single run composed once.

`hydra/launcher=<name>` options are ConfigStore entries that trainstack registers before it composes
its own tree (`register_launchers`), not at Hydra's plugin scan: the scan imports every
`hydra_plugins` module into every Hydra app of the venv, and reading the launcher entry points
there made all of them slower.

`@hydra.main` composes the whole tree twice for one run: once to read `hydra.mode` (run or
multirun; `Hydra.get_mode`) and once for the run. For a plain single run (only overrides on the
command line, no `-m`, `--cfg`, `--help`, `--config-dir`, ...), `run_single` composes once, as
`Hydra.run` does (the structural overrides composed, the others applied after, as Hydra itself
applies them; a base composed before over unchanged files and code is taken from disk:
trainstack/config/compose_cache.py), and takes `hydra.mode` from that composition; when the tree asks
for a multirun, or the composition fails (Hydra's own path reports the error), it returns False and the caller
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
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode
    from omegaconf import open_dict, read_write

    version.setbase(version_base)
    calling_file, calling_module = hydra_utils.detect_calling_file_or_module_from_task_function(task)
    task_name = hydra_utils.detect_task_name(calling_file, calling_module)
    overrides = list(argv)
    try:
        composed = _compose(calling_file, calling_module, conf_dir, config_name, overrides, task_name, version_base)
        if composed is None:
            return False
        loader, cfg = composed
        if cfg.hydra.mode not in (None, RunMode.RUN):  # the tree asks for a multirun
            return False
        with read_write(cfg.hydra), open_dict(cfg.hydra):  # what @hydra.main's `hydra.mode=RUN` override leaves
            cfg.hydra.mode = RunMode.RUN
            cfg.hydra.overrides.hydra.append("hydra.mode=RUN")
        if cfg.get("dry_run") is True:
            hydra_utils.run_and_report(lambda: _run_dry(task, cfg))
        else:
            hydra_utils.run_and_report(lambda: _run_job(loader, task, cfg, config_name))
        return True
    finally:
        GlobalHydra.instance().clear()


def _compose(calling_file: str | None, calling_module: str | None, conf_dir: str, config_name: str,
             overrides: list[str], task_name: str, version_base: str) -> tuple[Any, Any] | None:
    """(Hydra's config loader or what makes it on demand, the composed config); None when composing
    failed (`@hydra.main` composes again and reports it its way).

    The tree is composed with the structural overrides only (the base); the value overrides are then
    applied with Hydra's own code, as Hydra's `load_configuration` does after composing
    (trainstack/config/sweep_cache.py). A base composed before, over unchanged files and code, is
    taken from disk (trainstack/config/compose_cache.py): no plugin scan, no composition."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from trainstack.config import compose_cache
    from trainstack.config.sweep_cache import apply_values, structural

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return None
    if any(o.is_sweep_override() for o in parsed):
        return None  # a sweep without -m: Hydra's error
    by_form = [o for o in parsed if structural(o, lambda _key: False)]
    world = compose_cache.key(compose_cache.World(config_name, task_name, version_base))
    groups_key = world.sub([str(o.input_line) for o in by_form]) if world else None

    def split(is_group: Callable[[str], bool]) -> tuple[list[Any], list[Any]]:
        kept = [o for o in parsed if structural(o, is_group)]
        return kept, [o for o in parsed if not structural(o, is_group)]

    def make_hydra() -> Any:
        from hydra._internal import utils as hydra_utils
        from hydra._internal.hydra import Hydra

        register_launchers()
        search_path = hydra_utils.create_automatic_config_search_path(calling_file, calling_module, conf_dir)
        return Hydra.create_main_hydra2(task_name=task_name, config_search_path=search_path)

    groups = compose_cache.load_groups(groups_key)
    if groups is not None:
        base_lines, values = split(groups.__contains__)
        base_key = groups_key.sub([str(o.input_line) for o in base_lines]) if groups_key else None
        base = compose_cache.load_base(base_key)
        if base is not None:
            from hydra.core.utils import JobRuntime, configure_log

            JobRuntime().set("name", task_name)  # what Hydra's constructor leaves behind
            configure_log(base.hydra.hydra_logging, base.hydra.verbose)  # and compose_config
            try:
                apply_values(base, parsed, values)
            except Exception:  # noqa: BLE001 - a key the tree lacks, a wrong type: Hydra's message
                return None
            return _LoaderOnDemand(make_hydra), base
    import time

    from hydra.core.object_type import ObjectType
    from hydra.types import RunMode

    hydra = make_hydra()
    started_ns = time.time_ns()
    with compose_cache.noting_warnings() as warned:
        try:
            # the app's search path; a tree that extends it (`hydra.searchpath`) is composed whole, below
            groups = frozenset(hydra.config_loader.repository.get_group_options("", results_filter=ObjectType.GROUP))
            base_lines, values = split(groups.__contains__)
            cfg = hydra.compose_config(config_name, [str(o.input_line) for o in base_lines], run_mode=RunMode.RUN,
                                       with_log_configuration=True)
            if cfg.hydra.searchpath:
                cfg = hydra.compose_config(config_name, overrides, run_mode=RunMode.RUN, with_log_configuration=True)
                return hydra.config_loader, cfg  # as Hydra composes it, kept by no one
        except Exception:  # noqa: BLE001 - @hydra.main composes again and reports it its way
            return None
    base_key = groups_key.sub([str(o.input_line) for o in base_lines]) if groups_key else None
    compose_cache.store_soon(groups_key, groups, base_key, compose_cache.snapshot(cfg, bool(warned)), started_ns)
    try:
        apply_values(cfg, parsed, values)
    except Exception:  # noqa: BLE001 - as above
        return None
    return hydra.config_loader, cfg


class _LoaderOnDemand:
    """A kept config's stand-in for Hydra's config loader: Hydra's `run_job` only checks that its context
    holds one; whoever reads it gets the real one, made then (the plugin scan included)."""

    def __init__(self, make_hydra: Callable[[], Any]):
        self._make_hydra = make_hydra
        self._loader: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._loader is None:
            self._loader = self._make_hydra().config_loader
        return getattr(self._loader, name)


def _run_dry(task: Callable[[Any], Any], cfg: Any) -> None:
    """The task on the composed config with `HydraConfig` set, as a dry sweep point runs."""
    from hydra.core.utils import setup_globals

    from trainstack.config.sweep_cache import set_hydra_config

    setup_globals()
    set_hydra_config(cfg)
    task(cfg)


def _run_job(loader: Any, task: Callable[[Any], Any], cfg: Any, config_name: str) -> Any:
    """`Hydra.run` after its composition: callbacks around Hydra's `run_job`."""
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import run_job
    from hydra.types import HydraContext

    callbacks = Callbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name=config_name)
    ret = run_job(hydra_context=HydraContext(config_loader=loader, callbacks=callbacks),
                  task_function=task, config=cfg, job_dir_key="hydra.run.dir", job_subdir_key=None,
                  configure_logging=True)
    callbacks.on_run_end(config=cfg, config_name=config_name, job_return=ret)
    _ = ret.return_value  # raises the task's exception, as Hydra.run does
    return ret


