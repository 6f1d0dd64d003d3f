"""`trainstack` console commands (`trainstack run ...` is `python run.py ...`)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn

from trainstack.config.userconfig import RUNS_ROOT_ENV, default_runs_root
from trainstack.errors import ConfigErrors, report_and_exit

RUNS_ROOT_HELP = f"where run ids are looked up (default ${RUNS_ROOT_ENV}, else ./runs)"


def cmd_render(ns: argparse.Namespace) -> int:
    """Compose + validate + render; print the argv as JSON for other tools."""
    from trainstack.render.pipeline import build_from_overrides
    from trainstack.terminal.output_files import output_problem, write_text

    bad_output = output_problem(ns.output, "--output") if ns.output is not None else None
    try:
        run, cmd = build_from_overrides(ns.overrides, ns.config_dir)
        if bad_output:
            raise ConfigErrors([bad_output])
    except ConfigErrors as err:
        report_and_exit(err)
    if ns.format == "shell":
        text = cmd.shell_line() + "\n"
    elif ns.format == "lines":
        text = "\n".join(cmd.full_argv()) + "\n"
    else:
        text = json.dumps({"run_id": run.run_id, "name": run.name, **cmd.to_json()}, indent=2, sort_keys=True) + "\n"
    if ns.output:
        write_text(ns.output, text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_args(ns: argparse.Namespace) -> int:
    """Look up slime's arguments: by dest or flag (either spelling), or by substring."""
    from trainstack.upstream.argtable import did_you_mean, load_help, load_table
    from trainstack.upstream.renames import hint_for_dest
    from trainstack.upstream.select import activate_for_root, root_from_overrides

    activate_for_root(root_from_overrides([]))  # the slime this machine's slime.root rule names: its flags
    table = load_table()
    if ns.name:
        flag = ns.name.split("=", 1)[0]
        dest = table.flag_to_dest.get(flag, flag.lstrip("-").replace("-", "_"))
        spec = table.get(dest)
        if spec is None:
            fix = (hint_for_dest(dest, table) or did_you_mean(table.suggest(ns.name))
                   or "try `trainstack args --search WORD`")
            print(f"trainstack: '{ns.name}' is not a slime argument; {fix}", file=sys.stderr)
            return 2
        info = {"dest": spec.dest, "flag": spec.flag, "option_strings": list(spec.option_strings),
                "help": load_help().get(spec.dest), "kind": spec.kind, "type": spec.value_kind, "nargs": spec.nargs,
                "choices": list(spec.choice_values() or []) or None, "default": spec.default,
                "group": spec.group, "source": spec.source, "set_with": f"args.{spec.dest}=VALUE"}
        if ns.json:
            print(json.dumps(info, indent=2))
            return 0
        print(f"{spec.flag}  (dest {spec.dest}; {spec.source}, {spec.group} group)")
        if info["help"]:
            print(f"  {info['help']}")
        print(f"  type    : {spec.value_kind}" + (f", nargs {spec.nargs}" if spec.nargs else "")
              + f", action {spec.kind}")
        print(f"  default : {spec.default!r}")
        if info["choices"]:
            print(f"  choices : {', '.join(map(str, info['choices']))}")
        if len(spec.option_strings) > 1 or spec.false_flag:
            print(f"  flags   : {', '.join(dict.fromkeys([*spec.option_strings, *filter(None, [spec.false_flag])]))}")
        print(f"  set it  : args.{spec.dest}=VALUE  (or under model./algo./env. in a group file)")
        return 0
    word = (ns.search or "").lstrip("-").replace("-", "_")
    for dest, spec in table.specs.items():
        if word in dest:
            print(f"{dest:48s} {spec.flag:48s} {spec.group}")
    return 0


# --- diff / compare (trainstack/reports/diff.py, trainstack/reports/compare.py) ------------------------------
def cmd_diff(ns: argparse.Namespace) -> int:
    """Exit 0 equal, 1 different, 2 bad input (like diff)."""
    from trainstack.reports.diff import run_diff

    return run_diff(ns.a, ns.b, runs_root=ns.runs_root, config_dir=ns.config_dir,
                    against_defaults=ns.against_defaults, as_json=ns.json, paths=ns.paths)


def cmd_compare(ns: argparse.Namespace) -> int:
    from trainstack.reports.compare import run_compare

    return run_compare(ns)


def add_diff_compare(sub) -> None:
    p = sub.add_parser("diff", help="what differs between two runs/specs: resolved config and slime argv",
                       description="A and B: a run id, a run directory, an experiment name, `default`, or a quoted "
                                   "override list. Exit 0 equal, 1 different, 2 bad input.")
    p.add_argument("a", help="run id | run dir | experiment | 'key=value ...' | default")
    p.add_argument("b", nargs="?", help="as A (omit with --against-defaults)")
    p.add_argument("--runs-root", default=default_runs_root(), help=RUNS_ROOT_HELP)
    p.add_argument("--config-dir", help="config tree for composed specs instead of the project's conf/; a directory "
                                        "of presets only (no config.yaml) is added to it, as run.py's --config-dir")
    p.add_argument("--against-defaults", action="store_true",
                   help="compare A with its experiment's base (experiment=E alone), else with the default config")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--paths", action="store_true",
                   help="also the paths under each run's own directory (--save, --load), which always differ")
    p.set_defaults(func=cmd_diff)
    p = sub.add_parser("compare", help="one table of runs: varying config keys, status, metrics; plot/CSV/JSON")
    p.add_argument("targets", nargs="*", help="a multirun/<sweep> dir (sweep.json), run ids or run dirs")
    p.add_argument("--group", "-g", help="runs whose config `name` or wandb group equals this")
    p.add_argument("--runs-root", default=default_runs_root(), help=RUNS_ROOT_HELP)
    p.add_argument("--metric", "-m", action="append", default=None,
                   help="metric name or glob (repeatable; default rollout/raw_reward and eval/*)")
    p.add_argument("--sort", help="sort by a metric's final value (or a column: run_id, status, a config key)")
    p.add_argument("--desc", action="store_true", help="sort descending")
    p.add_argument("--source", default="auto", choices=("auto", "tensorboard", "wandb-offline", "jsonl", "wandb"),
                   help="where metrics are read from (default auto: tensorboard, wandb-offline, jsonl)")
    p.add_argument("--project", help="W&B project (with --source wandb)")
    p.add_argument("--entity", help="W&B entity (with --source wandb)")
    p.add_argument("--base-url", help="W&B server (default WANDB_BASE_URL or api.wandb.ai)")
    p.add_argument("--plot", help="write a PNG of the chosen metrics against their step, one line per run")
    p.add_argument("--csv", help="write the table as CSV")
    p.add_argument("--json", action="store_true", help="print the table as JSON instead")
    p.add_argument("--wide", action="store_true", help="every column, whatever the terminal width")
    p.set_defaults(func=cmd_compare)
# --- end diff / compare ----------------------------------------------------------------------


# --- status / cancel (trainstack/reports/status.py; SLURM sweeps, docs/slurm.md) ---------------------
def cmd_status(ns: argparse.Namespace) -> int:
    from trainstack.reports.status import run_status

    return run_status(ns.targets, runs_root=ns.runs_root, as_json=ns.json, wide=ns.wide, watch=ns.watch)


def cmd_cancel(ns: argparse.Namespace) -> int:
    from trainstack.reports.status import run_cancel

    return run_cancel(ns.targets, runs_root=ns.runs_root, dry=ns.dry, **({"purge": True} if ns.purge else {}))


def cmd_resume(ns: argparse.Namespace) -> int:
    """Paused runs (Lium: a spend limit, a lost volume, `pause`) continue, with new limits if given."""
    from trainstack.registry import get
    from trainstack.reports.status import by_launcher, collect

    try:
        rows = collect(ns.targets, ns.runs_root)
        groups = [(get(name), group) for name, group in by_launcher(rows).items()]
    except ConfigErrors as err:
        report_and_exit(err, command="resume")
    code = 0
    for launcher, group in groups:
        code = launcher.resume(group, spend_limit=ns.spend_limit, sweep_spend_limit=ns.sweep_spend_limit,
                               from_scratch=ns.from_scratch) or code
    return code


def add_status_cancel(sub) -> None:
    p = sub.add_parser("status", help="one table for a sweep or runs: state, rollouts trained, reward, checkpoint, "
                       "scheduler, logs (no target: every run under --runs-root)")
    p.add_argument("targets", nargs="*", help="a multirun/<sweep> dir (sweep.json), run dirs or run ids (default: the "
                   "sweep in this directory, else every run under --runs-root)")
    p.add_argument("--runs-root", default=default_runs_root(), help=RUNS_ROOT_HELP)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--wide", action="store_true", help="every column, whatever the terminal width")
    p.add_argument("--watch", "-w", nargs="?", type=float, const=5.0, metavar="SECONDS",
                   help="show it again every SECONDS (default 5) until every run has ended or Ctrl-C")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("cancel", help="stop the runs of a sweep or of runs (each run's launcher: scancel for SLURM, "
                       "the commander for Lium, the launching process here)")
    p.add_argument("targets", nargs="+", help="a multirun/<sweep> dir (sweep.json), run dirs or run ids")
    p.add_argument("--runs-root", default=default_runs_root(), help=RUNS_ROOT_HELP)
    p.add_argument("--dry", action="store_true", help="print what would be done (scancel commands, ...) only")
    p.add_argument("--purge", action="store_true", help="Lium runs: also delete the run's volume (its checkpoints)")
    p.set_defaults(func=cmd_cancel)
    p = sub.add_parser("resume", help="continue paused runs (Lium: paused at a spend limit, by a lost volume or "
                       "`pause`), with new limits")
    p.add_argument("targets", nargs="+", help="a multirun/<sweep> dir (sweep.json), run dirs or run ids")
    p.add_argument("--runs-root", default=default_runs_root(), help=RUNS_ROOT_HELP)
    p.add_argument("--spend-limit", type=float, help="the run's new spend limit in USD")
    p.add_argument("--sweep-spend-limit", type=float, help="the sweep's new spend limit in USD")
    p.add_argument("--from-scratch", action="store_true",
                   help="train again from rollout 0 (a run paused because its volume was lost, with no Hub copy)")
    p.set_defaults(func=cmd_resume)
def cmd_logs(ns: argparse.Namespace) -> int:
    """The run's launcher prints its log (here: logs/trainer.log; Lium: from the pod)."""
    from trainstack.errors import RuntimeFailure, report_failure_and_exit
    from trainstack.registry import get
    from trainstack.reports.status import collect, locate
    from trainstack.run.rundir.targets import bad_target, find_run

    try:
        if find_run(locate(ns.run, ns.runs_root), ns.runs_root) is None:
            raise ConfigErrors([bad_target(ns.run, ns.runs_root)])
        row = collect([ns.run], ns.runs_root)[0]
        launcher = get(row.launcher)
    except ConfigErrors as err:
        report_and_exit(err, command="logs")
    try:
        return launcher.logs(row, follow=ns.follow, which="worker" if ns.worker else "trainer")
    except RuntimeFailure as ex:
        report_failure_and_exit(ex)


def add_logs(sub) -> None:
    p = sub.add_parser("logs", help="a run's trainer log (Lium runs: from the pod, through the commander)")
    p.add_argument("run", help="a run id (under --runs-root) or a run directory")
    p.add_argument("--runs-root", default=default_runs_root(), help=RUNS_ROOT_HELP)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the run ends")
    p.add_argument("--worker", action="store_true", help="Lium runs: the worker's log instead of the trainer's")
    p.set_defaults(func=cmd_logs)
# --- end status / cancel ---------------------------------------------------------------------


def cmd_exec(ns: argparse.Namespace) -> int:
    """Execute a stored run here, as it was submitted (no recomposition)."""
    from trainstack import registry
    from trainstack.errors import RuntimeFailure, report_failure_and_exit
    from trainstack.run import spec as runspec
    from trainstack.run.rundir.targets import bad_target, find_run

    run_dir = find_run(ns.run, ns.runs_root)
    try:
        if run_dir is None:
            raise ConfigErrors([bad_target(ns.run, ns.runs_root)])
        spec = runspec.load(run_dir)
        from trainstack.preflight.checks import check_stored

        check_stored(spec)  # what the submit host deferred to this one, before anything is written
        code = registry.get(spec.launcher).execute(spec)
    except ConfigErrors as err:
        report_and_exit(err)
    except RuntimeFailure as ex:
        report_failure_and_exit(ex)
    from trainstack.reports.display import print_summary
    from trainstack.run.lifecycle import EXIT_BUSY

    if code != EXIT_BUSY and not ns.quiet:
        print_summary(spec, code)
    return code


# --- commander (trainstack/commander/; Lium runs, docs/lium.md) -----------------------------
def cmd_commander(ns: argparse.Namespace) -> int:
    from trainstack.commander.server import serve, stop_local

    if ns.commander_command == "stop":
        from trainstack.launch.lium_commander import state_dir

        return stop_local(state_dir())
    from trainstack.extras import problem

    missing = problem("commander", "lium", "the Lium commander (Lium's SDK, its HTTP API)")
    if missing:
        raise ConfigErrors(missing)
    return serve(ns.db, ns.host, ns.port, ns.public_url, lease_ttl_s=ns.lease_ttl, heartbeat_s=ns.heartbeat,
                 worker_deadline_s=ns.worker_deadline, tick_s=ns.tick, probe_s=ns.probe,
                 start_timeout_s=ns.start_timeout, stop_timeout_s=ns.stop_timeout, backoff_s=ns.backoff,
                 backoff_max_s=ns.backoff_max, exit_when_idle_s=ns.exit_when_idle,
                 volume_retention_s=None if ns.volume_retention_days is None else ns.volume_retention_days * 86400)


def add_commander(sub) -> None:
    p = sub.add_parser("commander", help="the Lium commander: leases, pods that follow the runs, an HTTP API")
    csub = p.add_subparsers(dest="commander_command", required=True)
    s = csub.add_parser("serve", help="serve the API and run the reconciler (token: $TRAINSTACK_COMMANDER_TOKEN)")
    s.add_argument("--db", default="~/.trainstack/commander.db", help="SQLite state (WAL)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 for pods on other machines)")
    s.add_argument("--port", type=int, default=8780)
    s.add_argument("--public-url", help="the URL pods use to reach this commander (default http://HOST:PORT)")
    s.add_argument("--lease-ttl", type=float, help="seconds a lease lives without renewal (default 30)")
    s.add_argument("--heartbeat", type=float, help="seconds between worker renewals (default 5)")
    s.add_argument("--worker-deadline", type=float,
                   help="a worker that cannot renew for this long stops its trainer; below the TTL (default 20)")
    s.add_argument("--tick", type=float, help="seconds between reconciler passes (default 1)")
    s.add_argument("--probe", type=float, help="seconds between pod listings from Lium (default 15)")
    s.add_argument("--start-timeout", type=float, help="seconds for a started worker to take its lease (default 300)")
    s.add_argument("--stop-timeout", type=float, help="seconds cancel/pause waits for the final checkpoint (default 120)")
    s.add_argument("--backoff", type=float, help="first re-provisioning delay in seconds, doubling (default 10)")
    s.add_argument("--backoff-max", type=float, help="longest re-provisioning delay (default 300)")
    s.add_argument("--volume-retention-days", type=float,
                   help="an ended run's volume is deleted this many days after it ended (default 7)")
    s.add_argument("--exit-when-idle", type=float, metavar="SECONDS",
                   help="exit once no run is active for this long (what a launch-started commander does)")
    s.set_defaults(func=cmd_commander)
    s = csub.add_parser("stop", help="stop the commander a launch started on this host (its state dir: "
                        "$TRAINSTACK_HOME, default ~/.trainstack)")
    s.set_defaults(func=cmd_commander)
# --- end commander ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse's errors echo what was typed: a secret after a misplaced flag is hidden (subcommands too)."""

    def error(self, message: str) -> NoReturn:
        from trainstack.secrets import redact_text

        super().error(redact_text(message))


class _TopParser(_Parser):
    """`trainstack --help`: the commands grouped, with examples (trainstack/cli/help.py)."""

    def format_help(self) -> str:
        import shutil

        from trainstack.cli.help import top_help

        return top_help(self, min(shutil.get_terminal_size().columns, 100))


def main(argv: list[str] | None = None) -> int:
    """`trainstack ...`: whatever a command prints, no secret's value (trainstack/secrets.py); a reader that
    leaves early (`trainstack ... | head`) ends it quietly (trainstack/terminal/pipes.py)."""
    from trainstack.secrets import scrubbed_output
    from trainstack.terminal.pipes import quietly

    def scrubbed() -> int:
        with scrubbed_output():
            return _main(argv)

    return quietly(scrubbed)


def script() -> NoReturn:
    """The `trainstack` console script (and `python -m trainstack`): `main()`'s code, without the
    interpreter's teardown once the command is done (trainstack/terminal/pipes.py exit_now)."""
    from trainstack.terminal.pipes import run_script

    run_script(main, returns_code=True)


def _main(argv: list[str] | None = None) -> int:
    parser = _TopParser(prog="trainstack", usage="trainstack [-h] [--version] COMMAND ...", add_help=False,
                        description="Compose, check, launch and follow slime RL runs (`trainstack run` is "
                                    "`python run.py`). A command's own options: trainstack COMMAND --help.")
    from trainstack.cli.version import VersionAction

    parser.add_argument("-h", "--help", action="help", help="this page; `trainstack COMMAND --help`: a command's own")
    parser.add_argument("--version", action=VersionAction, help="the version and the slime commit it renders for")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("run", help="compose, validate and launch a run: the same as `python run.py ...` "
                   "(Hydra overrides, -m for sweeps, --help for its own help)", add_help=False)
    p = sub.add_parser("render", help="print the rendered slime command as JSON (or shell/lines)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as for run.py")
    p.add_argument("--output", "-o", help="write to this file instead of stdout")
    p.add_argument("--format", choices=("json", "shell", "lines"), default="json")
    p.add_argument("--config-dir", help="config tree to compose instead of the project's conf/; a directory of "
                                        "presets only (no config.yaml) is added to it, as run.py's --config-dir")
    p.set_defaults(func=cmd_render)
    p = sub.add_parser("args", help="look up slime arguments")
    p.add_argument("name", nargs="?", help="a dest or flag, e.g. rollout_batch_size or --rollout-batch-size")
    p.add_argument("--search", "-s", help="list dests containing this word")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_args)
    p = sub.add_parser("exec", help="execute a stored run here, exactly as it was submitted (resumes it)",
                       description="Runs the command stored in RUN's spec.json under the run lifecycle (lease, "
                                   "resume from the latest complete checkpoint, events, status, signals). Nothing is "
                                   "recomposed: conf/ and code edits since the submit do not change the run.")
    p.add_argument("run", help="a run id (under --runs-root) or a run directory")
    p.add_argument("--runs-root", default=default_runs_root(), help=RUNS_ROOT_HELP)
    p.add_argument("--quiet", "-q", action="store_true", help="no summary at the end")
    p.set_defaults(func=cmd_exec)
    add_diff_compare(sub)  # diff / compare
    add_status_cancel(sub)  # status / cancel
    from trainstack import hooks

    for add_commands in hooks.get(hooks.CLI):  # features' own: env serve/list, hub ls/pull
        add_commands(sub)
    add_commander(sub)  # commander serve
    add_logs(sub)  # logs
    from trainstack.reports.wandb_sync import add_sync

    add_sync(sub)  # sync (a run's offline W&B dirs, in order)
    from trainstack.upstream.sync import add_commands as add_slime

    add_slime(sub)  # slime sync / list (tables of other slime versions)
    argv = list(sys.argv[1:] if argv is None else argv)
    from trainstack.cli import completion

    if completion.wants_completion(argv):  # `trainstack run -sc install=bash`, and its script's queries
        run_argv = completion.for_trainstack_run(argv)
        if run_argv is None:
            return 0
        argv = run_argv
        if any(a.startswith("install=") for a in argv):
            import contextlib
            import io

            from trainstack.cli.app import main as run_main

            buf = io.StringIO()
            sys.argv = [f"{parser.prog} run", *argv[1:]]
            with contextlib.redirect_stdout(buf):
                run_main()
            print(completion.install_script_for_trainstack(buf.getvalue()), end="")
            return 0
    if argv[:1] == ["run"]:  # `trainstack run ...` = `python run.py ...` (Hydra parses the rest)
        from trainstack.cli.app import main as run_main

        sys.argv = [f"{parser.prog} run", *argv[1:]]
        run_main()
        return 0
    if argv[:1] == ["args"] and "--" not in argv:  # `trainstack args --rollout-batch-size`: a slime flag
        ours = ("--search", "-s", "--json", "--help", "-h")
        slime_flags = [a for i, a in enumerate(argv[1:], 1) if a.startswith("--") and a.split("=")[0] not in ours
                       and argv[i - 1] not in ("--search", "-s")]
        argv = [a for a in argv if a not in slime_flags] + (["--", *slime_flags] if slime_flags else [])
    ns, extra = parser.parse_known_args(argv)
    if extra:  # positionals after options (`eval RUN --iter 3 KEY=VALUE`) go to a command that takes them
        into = str(getattr(ns, "trailing_positionals", "") or "")
        if not into or any(a.startswith("-") for a in extra):
            parser.parse_args(argv)  # argparse's own error, exit 2
        setattr(ns, into, [*getattr(ns, into), *extra])
    try:
        return ns.func(ns)
    except ConfigErrors as err:  # bad input or a corrupt run-dir file: one message, exit 2
        report_and_exit(err, command=None if ns.command in ("render", "exec") else ns.command)
    except BrokenPipeError:  # `trainstack ... | head`: the reader left (trainstack/terminal/pipes.py), not a file error
        raise
    except OSError as ex:  # a file we were pointed at cannot be read or written (permissions, a full disk)
        from trainstack.errors import ConfigError

        report_and_exit(ConfigErrors([ConfigError(str(ex.filename or ns.command), ex.strerror or str(ex),
                                                  "check the path and its permissions (and free space)")]),
                        command=ns.command)


if __name__ == "__main__":
    script()
