"""The Hydra task behind run.py: build the run, then dry-run it or launch it."""
from __future__ import annotations

import gc
import sys
from typing import Any

# trainstack's modules are imported inside the functions, after main() has deferred the collector.


_CREATED_BY_HYDRA: list = []  # hydra.run.dir's directories that did not exist: removed again if the run is refused


def prepare_argv() -> None:
    """Check overrides before Hydra composes (exit 2 on unknown keys; dests become `++`)."""
    from trainstack.config import hydra_dirs
    from trainstack.config.overrides import normalise_argv
    from trainstack.config.resolve import CONF_DIR
    from trainstack.errors import ConfigErrors, report_and_exit

    argv = sys.argv[1:]
    if any("hydra.sweeper.objective=" in a for a in argv):  # one spelling for every sweeper (sweep_result.py)
        from trainstack.run.result import objective_alias

        argv = objective_alias(argv)
    try:
        sys.argv[1:] = normalise_argv(argv, str(CONF_DIR))
    except ConfigErrors as err:
        report_and_exit(err)
    run_dir = hydra_dirs.given(sys.argv[1:]).get("hydra.run.dir")
    _CREATED_BY_HYDRA[:] = hydra_dirs.missing(run_dir) if run_dir else []


def main() -> Any:
    """`python run.py ...` and `trainstack run ...`: Hydra composes the packaged conf/ (plus any
    --config-dir), then run_app builds, checks and launches. Nothing it prints shows a secret's value."""
    from trainstack.secrets import scrubbed_output
    from trainstack.terminal.pipes import quietly

    from trainstack.launch import standby

    standby.start(sys.argv[1:])  # the trainer's guard starts on the other core while Hydra composes (launch/standby.py)
    gc.disable()  # start-up makes long-lived objects (modules, the tree): collecting over them was ~15% of a dry run
    try:
        with scrubbed_output():
            return quietly(_main)  # `python run.py --help | head`: the reader left; ends quietly (trainstack/terminal/pipes.py)
    finally:
        standby.release()
        gc.enable()


def _main() -> Any:
    import hydra

    from trainstack.config.help_page import print_if_asked, register_prog
    from trainstack.config.hydra_entry import register_launchers, run_single
    from trainstack.config.hydra_errors import guard
    from trainstack.config.resolve import CONF_DIR, PRIMARY_CONFIG

    if print_if_asked(sys.argv[1:], CONF_DIR):  # the help page without composing (trainstack/config/help_page.py)
        return None
    prepare_argv()
    register_prog()
    guard(str(CONF_DIR))  # what only composition finds (a bad interpolation in a file): our message, exit 2
    app = hydra.main(config_path=str(CONF_DIR), config_name=PRIMARY_CONFIG, version_base="1.3")(run_app)
    if run_single(run_app, str(CONF_DIR), PRIMARY_CONFIG, sys.argv[1:], version_base="1.3"):
        return None  # one run, composed once or kept from before (trainstack/config/hydra_entry.py)
    register_launchers()  # `hydra/launcher=<name>` (run_single registers them itself when it composes)
    if any(a.startswith("query=") for a in sys.argv[1:]) and {"-sc", "--shell-completion"} & set(sys.argv):
        from trainstack.cli.completion import complete

        return complete(app)  # Hydra completes groups, options and the keys in the config; slime dests too
    gc.freeze()  # what start-up made stays; a sweep's points are collected
    gc.enable()
    return app()


def run_app(cfg: Any) -> Any:
    """The task: a refused run (exit 2) leaves nothing behind, not even the hydra.run.dir Hydra made."""
    try:
        return _run_app(cfg)
    except SystemExit as ex:
        if ex.code == 2 and _CREATED_BY_HYDRA:
            from trainstack.config.hydra_dirs import remove_if_empty

            remove_if_empty(_CREATED_BY_HYDRA)
        raise


def _run_app(cfg: Any) -> Any:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from trainstack.config.resolve import Origin
    from trainstack.errors import ConfigErrors, report_and_exit
    from trainstack.render.pipeline import build

    hc = HydraConfig.get()
    origin = Origin.from_hydra(hc)
    sweep = hc.mode == RunMode.MULTIRUN
    if not cfg.dry_run:  # the run's provenance asks git: in a thread, while the run is built and checked
        from trainstack.run.spec import ask_git_early

        ask_git_early()
    try:
        run, cmd = build(cfg, origin)
    except ConfigErrors as err:
        report_and_exit(err)
    from trainstack.preflight.checks import preflight

    try:  # every check that can fail, before anything is written: a dry run answers like the launch
        if cfg.dry_run and cfg.output:
            from trainstack.terminal.output_files import output_problem

            problem = output_problem(str(cfg.output), "output")
            if problem:
                raise ConfigErrors([problem])
        report = preflight(run, cmd, launching=not cfg.dry_run)
    except ConfigErrors as err:
        report_and_exit(err)
    if cfg.dry_run:
        from trainstack.reports import display

        if sweep:
            display.print_sweep_line(run, cmd)
        else:
            from trainstack.preflight.dry_head import SHORT

            display.print_dry_run(run, cmd, report=report, short=cfg.dry_run == SHORT)
        if cfg.output:
            display.write_command_json(cmd, run, cfg.output if not sweep else f"{cfg.output}.{hc.job.num}")
        if sweep:  # the sweeper's answer for this point (sweep_result.py): checked, nothing launched
            from trainstack.run.result import CHECKED, RunResult

            return RunResult(num=hc.job.num, run_id=run.run_id, run_dir=run.run_dir, state=CHECKED,
                             overrides=_shown(origin.overrides))
        return
    gc.freeze()  # what start-up made stays: the first collections went over all of it (~30 ms of a launch)
    gc.enable()  # a launch lives long (app.main defers the collector for the start-up only)
    from trainstack import registry
    from trainstack.errors import RuntimeFailure, report_failure_and_exit
    from trainstack.reports.display import print_summary
    from trainstack.run.lifecycle import EXIT_BUSY
    from trainstack.run.rundir import RunDir
    from trainstack.run.spec import RunSpec
    from trainstack.sweep.points import plugin_problem

    spec = RunSpec.from_run(run, cmd)
    try:
        problem = plugin_problem(spec.launcher) if sweep else None
        if problem:
            raise ConfigErrors([problem])
        launcher = registry.get(spec.launcher)
    except ConfigErrors as err:
        report_and_exit(err)
    if sweep:  # every launcher's sweep has its manifest (`trainstack status SWEEP_DIR`)
        from trainstack.run.rundir.manifest import SweepRun

        launcher.record_sweep(hc.sweep.dir, [SweepRun(run_id=run.run_id, run_dir=spec.run_dir,
                                                      overrides=list(spec.overrides), job_num=hc.job.num)])
    seen = len(RunDir(spec.run_dir).events()) if sweep else 0  # what this point adds: did it train?
    try:
        code = launcher.submit(spec)
    except ConfigErrors as err:
        report_and_exit(err)
    except RuntimeFailure as ex:
        report_failure_and_exit(ex)

    if sweep:  # the local sweep launcher prints one summary and answers the sweeper (sweep_result.py)
        from trainstack.run import result as sr
        from trainstack.sweep.points import finished_earlier

        earlier = finished_earlier(RunDir(spec.run_dir).events()[seen:])
        waited = launcher.waits_for(spec)
        state = sr.FAILED if code else sr.SUBMITTED if not waited else sr.UNCHANGED if earlier is not None else sr.FINISHED
        return sr.RunResult(num=hc.job.num, run_id=run.run_id, run_dir=run.run_dir, code=code if waited or code else None,
                            overrides=_shown(origin.overrides), state=state, earlier=earlier)
    if code != EXIT_BUSY and launcher.waits_for(spec):
        print_summary(spec, code)
    if code:
        sys.exit(code)


def _shown(overrides: Any) -> list[str]:
    """A point's overrides as its summary line shows them."""
    return [o for o in overrides if not o.lstrip("+").startswith(("dry_run", "hydra", "objective="))]
