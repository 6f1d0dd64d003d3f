"""`trainstack import SCRIPT [--config-dir DIR]`: exit 0 when the experiment renders the script's argv,
1 when it was written but differs (listed), 2 on bad input (nothing written)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_import(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="read a slime launch script (run-*.sh) into an experiment file, without "
                       "running it, and check that the experiment renders the script's argv",
                       description="Reads SCRIPT as bash would (its arrays, `source scripts/models/*.sh`, "
                                   "variables and line continuations; nothing in it is run) and writes "
                                   "DIR/experiment/NAME.yaml: the closest model/algo/env/cluster presets and only "
                                   "the values that differ. Then renders it as `trainstack render --config-dir DIR "
                                   "experiment=NAME` does and compares the argv with the script's. Exit 0: the same "
                                   "argv (up to what trainstack manages on purpose); 1: written, but it differs "
                                   "(listed); 2: bad input, nothing written. docs/import.md.")
    p.add_argument("script", help="the launch script; a relative path not found here is looked up in the slime "
                                  "checkout (scripts/run-qwen3-4B.sh)")
    p.add_argument("--config-dir", help="where experiment/NAME.yaml is written (default: the project's conf/); "
                                        "give the same --config-dir to render and run.py")
    p.add_argument("--name", help="the experiment's name (default: the script's, without `run-`)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="a variable of the environment the script expects (BASE_DIR=/data); repeatable")
    p.add_argument("--slime-root", help="the slime checkout sourced files are looked up in (default: the one the "
                                        "script is in, else $SLIME_ROOT, else the project's slime/)")
    p.add_argument("--force", action="store_true", help="replace an experiment of that name")
    p.add_argument("--print", action="store_true", dest="print_only",
                   help="print the experiment instead of writing it")
    p.set_defaults(func=cmd_import)


def cmd_import(ns: argparse.Namespace) -> int:
    from trainstack.errors import ConfigErrors, report_and_exit
    from trainstack.script_import.importer import checkout_of, default_slime_root, locate, parse_env, run_import

    try:
        slime_root = Path(ns.slime_root).expanduser().resolve() if ns.slime_root else default_slime_root()
        script = locate(ns.script, slime_root)
        if not ns.slime_root:  # a script inside a slime checkout reads that checkout's files
            slime_root = checkout_of(script) or slime_root
        config_dir = Path(ns.config_dir).expanduser() if ns.config_dir else None
        if config_dir is not None and config_dir.exists() and not config_dir.is_dir():
            from trainstack.errors import ConfigError

            raise ConfigErrors([ConfigError("--config-dir", f"{config_dir} is not a directory",
                                            "give a directory (it is created when missing)", value=ns.config_dir)])
        result = run_import(script, config_dir, name=ns.name, env=parse_env(ns.env), slime_root=slime_root,
                            force=ns.force or ns.print_only, write=not ns.print_only)
    except ConfigErrors as err:
        report_and_exit(err, command="import")
    from trainstack.secrets import redact_text

    if ns.print_only:
        sys.stdout.write(result.text)
        return 0 if result.proof.exact else 1
    print(redact_text(report(result, ns.config_dir)))
    return 0 if result.proof.exact else 1


def report(result, config_dir: str | None) -> str:
    """What was written, from which presets, and the comparison."""
    made, checked = result.plan, result.proof
    dir_flag = f" --config-dir {config_dir}" if config_dir else ""
    lines = [f"trainstack import: wrote {result.target} from {result.script}",
             "  presets : " + " ".join(f"{g}={o or '(none)'}" for g, o in made.choices.items()),
             f"  deltas  : {len(made.overrides)} value(s), {len(made.nulls)} null(s)"]
    if checked.exact:
        lines.append(f"  proof   : the experiment renders the script's argv: {len(checked.same)} flags the same, "
                     f"entrypoint {checked.entrypoint[1]}")
    else:
        lines.append(f"  proof   : the experiment differs from the script in {len(checked.different)} place(s):")
        if checked.entrypoint[0] != checked.entrypoint[1]:
            lines.append(f"    - entrypoint: the script runs {checked.entrypoint[0]}, trainstack {checked.entrypoint[1]}")
        lines += [f"    - {d}" for d in checked.different]
    if checked.managed:
        lines.append("  trainstack's own (on purpose):")
        lines += [f"    - {m}" for m in checked.managed]
    if result.notes:
        lines.append("  notes:")
        lines += [f"    - {n}" for n in result.notes]
    name = result.target.stem
    lines.append(f"  use it  : trainstack render{dir_flag} experiment={name}")
    lines.append(f"            python run.py{dir_flag} experiment={name} dry_run=true")
    return "\n".join(lines)
