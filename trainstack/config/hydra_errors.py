"""Hydra's and OmegaConf's composition errors as trainstack errors: one message naming the file or
key and the fix, exit 2 (Hydra itself prints a trimmed traceback and exits 1).

Most mistakes are caught before Hydra composes (`trainstack/config/overrides.py`: unknown keys, override
syntax, broken YAML in the selected files). What only composition can find (a bad interpolation in
a config file, a file Hydra cannot place, a YAML anchor that contains itself) reaches `guard`, which
wraps Hydra's own error reporting.
"""
from __future__ import annotations

import os
import sys
import re
from pathlib import Path
from typing import Any, Callable

from trainstack.errors import ConfigError, ConfigErrors, report_and_exit


def _chain(ex: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = ex
    while cur is not None and cur not in out and len(out) < 20:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def translate(ex: BaseException, conf_dirs: list[str]) -> ConfigErrors | None:
    """A ConfigErrors for an exception raised while composing; None for one we cannot explain."""
    import yaml
    from omegaconf.errors import OmegaConfBaseException

    from hydra.errors import HydraException
    from trainstack.secrets import redact_override

    chain = _chain(ex)
    for e in chain:
        if isinstance(e, ConfigErrors):  # raised by our own code inside the app: already one message
            return e
        if isinstance(e, yaml.MarkedYAMLError):
            return ConfigErrors([yaml_error(e)])
        if isinstance(e, UnicodeDecodeError):
            found = [not_text_error(p) for d in conf_dirs for p in sorted(Path(d).rglob("*.yaml")) if not _is_text(p)]
            return ConfigErrors(found or [ConfigError("config", "a config file is not UTF-8 text", "save the config "
                                                      "files as UTF-8 YAML")])
    if any(isinstance(e, RecursionError) for e in chain):
        found = recursive_anchor_errors(conf_dirs)
        return ConfigErrors(found or [ConfigError(
            "config", "the composed config refers to itself (a YAML anchor inside its own alias, or interpolations "
            "that point at each other)", "replace the alias or interpolation with the values it stands for")])
    for e in chain:
        if isinstance(e, OmegaConfBaseException):
            key = str(getattr(e, "full_key", "") or "") or "config"
            msg = str(getattr(e, "msg", "") or e).splitlines()[0]
            return ConfigErrors([ConfigError(key, f"cannot compose: {msg}", "fix the value or interpolation "
                                             "(${other.key} must name a key that exists, e.g. ${paths.data_root})")])
    for e in chain:
        if isinstance(e, HydraException):
            msg = " ".join(redact_override(w) for w in str(e).splitlines()[0].split(" "))
            return ConfigErrors([_flag_error(msg) or ConfigError(
                "overrides", msg, "check the overrides and the config files they select (python run.py --help "
                "lists the presets)")])
    return None


# Hydra's own command line flags, whose errors Hydra words as if the config were the user's to place.
_FLAG_ERRORS = (
    (re.compile(r"Additional config directory '(?P<v>.*)' not found"), "--config-dir",
     "{v} is not a directory", "give --config-dir a directory of your presets (model/, algo/, env/, cluster/, "
     "experiment/ with .yaml files), e.g. --config-dir ./my_conf"),
    (re.compile(r"Primary config directory not found"), "--config-path",
     "the primary config directory it names was not found",
     "point --config-path at a directory holding config.yaml (a copy of trainstack's conf/), or drop it and add "
     "your presets with --config-dir DIR"),
    (re.compile(r"Cannot find primary config '(?P<v>.*?)'"), "--config-name",
     "there is no primary config '{v}' in the config path",
     "drop --config-name (trainstack's primary config is config.yaml); presets are chosen with experiment=NAME "
     "(python run.py --help lists them)"),
)


def _flag_error(msg: str) -> ConfigError | None:
    for rx, flag, problem, fix in _FLAG_ERRORS:
        m = rx.search(msg)
        if m:
            v = m.groupdict().get("v", "")
            return ConfigError(flag, problem.format(v=v), fix, value=v or None)
    return None


def _is_text(path: Path) -> bool:
    try:
        path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return False
    except OSError:
        return True
    return True


def not_text_error(path: Path) -> ConfigError:
    return ConfigError(str(path), "is not a UTF-8 text file (a binary file where a YAML config is expected)",
                       "remove it from the config directory, or save it as UTF-8 YAML")


def yaml_error(ex: Any, path: str | None = None) -> ConfigError:
    mark = getattr(ex, "problem_mark", None)
    where = path or (mark.name if mark is not None else "")
    if mark is not None:
        where = f"{where}:{mark.line + 1}:{mark.column + 1}"
    problem = getattr(ex, "problem", None) or str(ex).splitlines()[0]
    if "duplicate key" in problem:
        return ConfigError(where, f"invalid YAML: {problem} (the same key twice in one mapping)",
                           "keep one of the two lines")
    return ConfigError(where, f"invalid YAML: {problem}", "fix the syntax; quote values that start with ${...} "
                       "inside [ ] or { }, e.g. [name, \"${paths.data_root}/x.jsonl\"]")


def structure_errors(path: Path, text: str) -> list[ConfigError]:
    """What a YAML parser accepts but a config must not hold: a key twice in one mapping (PyYAML keeps
    the last silently) and an alias inside its own anchor (composition would recurse forever)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.YAMLError as ex:
        return [yaml_error(ex, str(path))]
    if root is None:
        return []
    errors: list[ConfigError] = []
    on_path: set[int] = set()
    done: set[int] = set()

    def walk(node: Any, key: str) -> None:
        if id(node) in on_path:
            mark = node.start_mark
            errors.append(ConfigError(f"{path}:{mark.line + 1}", f"the YAML anchor at {key or 'the top'} contains an "
                                      "alias of itself (a recursive anchor)", "replace the alias with the values it "
                                      "stands for"))
            return
        if id(node) in done or not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            return
        on_path.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, Any] = {}
            for k, v in node.value:
                name = k.value if isinstance(k, yaml.ScalarNode) else None
                if name is not None and name in seen and name != "<<":
                    mark = k.start_mark
                    errors.append(ConfigError(f"{path}:{mark.line + 1}", f"duplicate key {name!r} in "
                                              f"{key or 'the top-level mapping'} (also on line "
                                              f"{seen[name].start_mark.line + 1}; YAML would keep one silently)",
                                              "keep one of the two lines"))
                if name is not None:
                    seen[name] = k
                walk(v, f"{key}.{name}" if key and name else (name or key))
        else:
            for i, v in enumerate(node.value):
                walk(v, f"{key}[{i}]")
        on_path.discard(id(node))
        done.add(id(node))

    walk(root, "")
    return errors


def recursive_anchor_errors(conf_dirs: list[str]) -> list[ConfigError]:
    """Look through every config file for a recursive anchor (only on the error path: it reads them all)."""
    errors = []
    for d in conf_dirs:
        for p in sorted(Path(d).rglob("*.yaml")):
            try:
                errors += [e for e in structure_errors(p, p.read_text(encoding="utf-8")) if "recursive" in e.problem]
            except (OSError, UnicodeDecodeError):
                continue
    return errors


def conf_dirs_of(argv: list[str], packaged: str) -> list[str]:
    """The packaged conf/ and a `--config-dir D` / `-cd D` from the command line."""
    dirs = [packaged]
    for i, a in enumerate(argv):
        if a in ("--config-dir", "-cd") and i + 1 < len(argv):
            dirs.append(os.path.abspath(argv[i + 1]))
        elif a.startswith("--config-dir="):
            dirs.append(os.path.abspath(a.split("=", 1)[1]))
    return dirs


def guard(packaged_conf: str) -> None:
    """Route Hydra's error reporting through `translate` (exit 2 with our message) for the errors we
    can explain; anything else keeps Hydra's own report."""
    import hydra._internal.utils as hydra_utils

    original: Callable[[Any], Any] = getattr(hydra_utils, "_trainstack_original_run_and_report",
                                             hydra_utils.run_and_report)
    dirs = conf_dirs_of(sys.argv[1:], packaged_conf)

    def run_and_report(func: Any) -> Any:
        def explained() -> Any:
            try:
                return func()
            except BrokenPipeError:  # the reader of the output left (`| head`): not an error to report
                from trainstack.terminal.pipes import silence

                silence()
                sys.exit(0)
            except Exception as ex:  # noqa: BLE001 - translated or re-raised to Hydra's reporter
                if getattr(ex, "sweep_point_failed", False):  # a sweep's run failed (sweep_result.RunFailed)
                    print(str(ex), file=sys.stderr)
                    sys.exit(1)
                err = translate(ex, dirs)
                if err is None:
                    raise
                report_and_exit(err)

        return original(explained)

    hydra_utils._trainstack_original_run_and_report = original  # type: ignore[attr-defined]
    hydra_utils.run_and_report = run_and_report
