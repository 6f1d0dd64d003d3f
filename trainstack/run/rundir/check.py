"""Is every file of a run directory (and a sweep manifest) what trainstack wrote? Checked before a
command reads or writes a run, so a corrupt file is one message naming it and the fix, never a
traceback or a decision taken on garbage (a resume check that silently skips an unreadable
`args.json`, a lease that cannot be parsed).

Each file has a shape (a JSON object, a YAML list of strings, JSON lines) and a fix that fits
what it holds: records trainstack rewrites (status, events, lease) can be moved aside; what the
run *is* (spec, args, config) must be restored, or the run started over under another id. A
last line without its newline in a JSON-lines file is what a kill leaves behind, not corruption.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.storage import layout

REWRITTEN = "move it aside (mv {path} {path}.corrupt): trainstack writes a new one on the next launch"
# What the run *is*: every launch rewrites these from its config, and the checkpoints carry the training
# identity (docs/resume.md), so moving one aside and relaunching with the run's config resumes it.
RESTORE = ("move it aside (mv {path} {path}.corrupt) and relaunch with the run's config: trainstack writes it "
           "again and the run resumes from its checkpoints (a changed config is still refused); or restore it "
           "from a copy of the run directory")
UNREADABLE = ("make it readable for this user (chmod u+r {path}, or run as the user that owns the run); it is not "
              "corrupt, so nothing needs restoring")
LEASE_FIX = ("if no trainstack process is running this run (check the host and pid in it), move it aside "
             "(mv {path} {path}.corrupt) and relaunch")
SLURM_FIX = ("it records the run's SLURM job: restore it (squeue/sacct show the job id), or move it aside "
             "(mv {path} {path}.corrupt); `trainstack cancel RUN_ID` then cancels by job name")
TRACKER_FIX = ("write the rollout id of the newest complete iter_* directory into it (or move it aside to start the "
               "run over), then relaunch")
CANNOT_READ = "it cannot be read"
METRICS_FIX = ("move it aside (mv {path} {path}.corrupt); `trainstack compare --source tensorboard` still reads "
               "the run's TensorBoard files")


@dataclass(frozen=True)
class FileShape:
    name: str
    kind: str  # json-object | yaml-object | yaml-list | jsonl | text
    fix: str
    check: Callable[[Any], str] | None = None  # more than the container type: "" when fine


def _lease_fields(data: dict) -> str:
    from dataclasses import MISSING, fields

    from trainstack.fencing.lease import LeaseRecord

    missing = [f.name for f in fields(LeaseRecord) if f.name not in data and f.default is MISSING]
    if missing:
        return f"it lacks {', '.join(missing)}"
    bad = [k for k in ("pid", "epoch") if not isinstance(data[k], int) or isinstance(data[k], bool)]
    bad += [k for k in ("since", "heartbeat", "expires_at", "ttl_s")
            if not isinstance(data[k], (int, float)) or isinstance(data[k], bool)]
    bad += [k for k in ("token", "host") if not isinstance(data[k], str)]
    bad += [k for k in ("trainer_pgid", "commander_epoch")
            if data.get(k) is not None and (not isinstance(data[k], int) or isinstance(data[k], bool))]
    return f"{', '.join(bad)} {'has' if len(bad) == 1 else 'have'} the wrong type" if bad else ""


def _status_fields(data: dict) -> str:
    for key in ("last_checkpoint", "num_rollout", "exit_code", "pid"):
        v = data.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            return f"{key} is {v!r}, not a whole number"
    if data.get("state") is not None and not isinstance(data["state"], str):
        return f"state is {data['state']!r}, not a word"
    if data.get("last_metrics") is not None and not isinstance(data["last_metrics"], dict):
        return "last_metrics is not a mapping"
    return ""


def _spec_fields(data: dict) -> str:
    from trainstack.run.spec import RunSpec

    try:
        RunSpec.from_json(data, "")
    except ConfigErrors as err:
        return err.errors[0].problem
    return ""


def _strings_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(a, str) for a in v)


def _command_fields(data: dict) -> str:
    for key in ("argv", "entrypoint"):
        if key in data and not _strings_list(data[key]):
            return f"{key} is not a list of strings"
    groups = data.get("groups", {})
    if not isinstance(groups, dict) or not all(_strings_list(v) for v in groups.values()):
        return "groups is not a map of argv lists"
    if not isinstance(data.get("env", {}), dict):
        return "env is not a mapping"
    return _typed(data, {"run_id": (str,), "name": (str,), "cwd": (str,), "backend": (str,)})


def _typed(data: dict, kinds: dict[str, tuple[type, ...]]) -> str:
    for key, want in kinds.items():
        if key in data and data[key] is not None and not isinstance(data[key], want):
            return f"{key} is {type(data[key]).__name__}"
    return ""


def _slurm_fields(data: dict) -> str:
    if not isinstance(data.get("logs", {}), dict) or not all(isinstance(v, str) for v in data.get("logs", {}).values()):
        return "logs is not a map of paths"
    return _typed(data, {"run_id": (str,), "job_id": (str, int), "job_name": (str,), "submitit_folder": (str,),
                         "sweep_dir": (str,), "submitted_at": (str,)})


def _text_values(data: dict) -> str:
    bad = [k for k, v in data.items() if v is not None and not isinstance(v, str)]
    return f"{bad[0]} is not text" if bad else ""


def _strings(data: list) -> str:
    return "" if all(isinstance(x, str) for x in data) else "an entry is not a string"


def _metrics_line(rec: dict) -> str:
    if not isinstance(rec.get("metrics", {}), dict):
        return "its metrics are not a mapping"
    step = rec.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, float))):
        return f"its step is {step!r}"
    return ""


SHAPES: tuple[FileShape, ...] = (
    FileShape(layout.SPEC, "json-object", RESTORE, _spec_fields),
    FileShape(layout.ARGS, "json-object", RESTORE),
    FileShape(layout.CONFIG, "yaml-object", RESTORE),
    FileShape(layout.OVERRIDES, "yaml-list", RESTORE, _strings),
    FileShape(layout.PROVENANCE, "json-object", RESTORE, _text_values),
    FileShape(layout.CHOICES, "json-object", RESTORE, _text_values),
    FileShape(layout.COMMAND, "json-object", RESTORE, _command_fields),
    FileShape(layout.STATUS, "json-object", REWRITTEN, _status_fields),
    FileShape(layout.LEASE, "json-object", LEASE_FIX, _lease_fields),
    FileShape(layout.SLURM, "json-object", SLURM_FIX, _slurm_fields),
    FileShape(layout.EVENTS, "jsonl", REWRITTEN),
    FileShape(layout.METRICS, "jsonl", METRICS_FIX, _metrics_line),
    # what it names is the resume plan's to judge (a missing or incomplete iteration); here: readable text
    FileShape(f"{layout.CHECKPOINTS}/{layout.TRACKER}", "text", TRACKER_FIX),
)
SHAPE_BY_NAME = {s.name: s for s in SHAPES}


def _problem(path: Path, shape: FileShape) -> str:
    """What is wrong with one file ("" when it is fine or absent)."""
    return _parsed(path, shape)[1]


def _parsed(path: Path, shape: FileShape) -> tuple[Any, str]:
    """(the file's content, parsed: JSON/YAML data, a JSON-lines file's text; None when absent), and
    what is wrong with it ("" when fine): one read and one parse serve the check and the reader."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, ""
    except IsADirectoryError:
        return None, "it is a directory, not a file"
    except OSError as ex:
        return None, f"{CANNOT_READ} ({ex.strerror or ex})"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "it is not UTF-8 text"
    if shape.kind == "jsonl":
        return text, _jsonl_problem(text, shape)
    if shape.kind == "text":
        return text, "" if text.isprintable() or text.strip().isprintable() else "it holds control characters"
    if shape.kind.startswith("yaml"):
        import yaml

        try:
            data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml when present
        except yaml.YAMLError as ex:
            return None, f"it is not valid YAML ({str(ex).splitlines()[0]})"
        except (ValueError, RecursionError):  # e.g. a huge number, deep nesting
            return None, "it is not valid YAML"
    else:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as ex:
            return None, f"it is not valid JSON ({str(ex)[:80]})"
    want = list if shape.kind == "yaml-list" else dict
    if data is None and shape.kind == "yaml-list":
        data = []
    if not isinstance(data, want):
        return None, f"it holds {type(data).__name__}, not {'a list' if want is list else 'a JSON/YAML object'}"
    why = shape.check(data) if shape.check else ""
    return (None if why else data), why


def _jsonl_problem(text: str, shape: FileShape) -> str:
    from trainstack.metrics.jsonl import parse_lines

    lines = text.split("\n")
    complete = lines[:-1]  # the last piece: "" after a final newline, else a line cut by a kill (fine)
    fast = parse_lines(complete)  # all lines in one parse: a long run's metrics file is megabytes
    if fast is not None and all(isinstance(r, dict) and not (shape.check and shape.check(r)) for r in fast):
        return ""
    for n, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            return f"line {n} is not JSON"
        if not isinstance(rec, dict):
            return f"line {n} is not a JSON object"
        why = shape.check(rec) if shape.check else ""
        if why:
            return f"line {n}: {why}"
    return ""


def jsonl_records(run_dir: str | Path, name: str) -> list[dict]:
    """A JSON-lines file's records, read and parsed once and checked as `file_problem` checks it (a
    last line cut by a kill skipped); ConfigErrors naming it when corrupt; [] when absent."""
    from trainstack.metrics.jsonl import parse_lines, records

    shape = SHAPE_BY_NAME[name]
    path = Path(run_dir) / name
    if not path.exists():
        return []
    text, why = _parsed(path, FileShape(name, "text", shape.fix))  # read and decoded, not parsed yet
    if not why or why == "it holds control characters":  # that is the text kind's own check, not this file's
        lines = text.split("\n")
        values = parse_lines(lines[:-1])  # every complete line in one parse
        if values is not None and all(isinstance(v, dict) and not (shape.check and shape.check(v)) for v in values):
            return values + records(lines[-1])
        why = _jsonl_problem(text, shape)  # line by line: names the bad one
        if not why:
            return records(text)
    raise ConfigErrors([ConfigError(str(path), f"{name} is corrupt: {why}", shape.fix.format(path=path))])


def file_problem(run_dir: str | Path, name: str) -> ConfigError | None:
    """One file of the layout checked against its shape."""
    shape = SHAPE_BY_NAME[name]
    path = Path(run_dir) / name
    why = _problem(path, shape)
    if not why:
        return None
    if why.startswith(CANNOT_READ):  # permission denied, an I/O error: the file may be fine
        return ConfigError(str(path), f"{name} {why[3:]}", UNREADABLE.format(path=path))
    return ConfigError(str(path), f"{name} is corrupt: {why}", shape.fix.format(path=path))


def load(run_dir: str | Path, names: Sequence[str]) -> dict[str, Any]:
    """These files of a run directory, each read and parsed once and checked against its shape
    (absent: None); ConfigErrors naming every corrupt one."""
    out: dict[str, Any] = {}
    errors = []
    for name in names:
        shape = SHAPE_BY_NAME[name]
        path = Path(run_dir) / name
        out[name], why = _parsed(path, shape)
        if why:
            errors.append(ConfigError(str(path), f"{name} is corrupt: {why}", shape.fix.format(path=path)))
    if errors:
        raise ConfigErrors(errors)
    return out


def problems(run_dir: str | Path, names: tuple[str, ...] | None = None) -> list[ConfigError]:
    """Every corrupt file of a run directory (those present; absent files are not problems)."""
    return [e for name in (names or tuple(SHAPE_BY_NAME)) if (e := file_problem(run_dir, name)) is not None]


def require_readable(run_dirs: Sequence[str | Path], skip: tuple[str, ...] = ()) -> None:
    """Raise ConfigErrors naming every corrupt file of these run directories (but the `skip` ones:
    a reader that reads only part of a file checks that part itself)."""
    names = tuple(n for n in SHAPE_BY_NAME if n not in skip)
    errors = [e for d in run_dirs for e in problems(d, names)]
    if errors:
        raise ConfigErrors(errors)


def _sweep_runs(data: dict) -> str:
    for key, kinds in (("sweep_dir", (str,)), ("scheduler", (str,)), ("mode", (str,)), ("wait", (bool,)),
                       ("submitit_folder", (str, type(None))), ("submit_s", (int, float)),
                       ("manifest_version", (int,)), ("created_at", (str,))):
        if key in data and not isinstance(data[key], kinds):
            return f"{key} has the wrong type"
    runs = data.get("runs", [])
    if not isinstance(runs, list):
        return "runs is not a list"
    for i, r in enumerate(runs):
        if not isinstance(r, dict) or not isinstance(r.get("run_dir"), str) or not isinstance(r.get("run_id"), str):
            return f"runs[{i}] lacks a run_id and run_dir"
        if not isinstance(r.get("overrides", []), list) or not isinstance(r.get("logs", {}), dict) \
                or not all(isinstance(r.get(k), (str, int, type(None))) for k in ("job_id", "job_name", "sbatch")) \
                or not isinstance(r.get("job_num"), (int, type(None))):
            return f"runs[{i}] has a field of the wrong type"
    return ""


def sweep_problem(sweep_dir: str | Path) -> ConfigError | None:
    """A sweep manifest that exists but cannot be read as one."""
    path = Path(sweep_dir) / layout.SWEEP_MANIFEST
    shape = FileShape(layout.SWEEP_MANIFEST, "json-object", RESTORE, _sweep_runs)
    why = _problem(path, shape)
    return ConfigError(str(path), f"{layout.SWEEP_MANIFEST} is corrupt: {why}",
                       "restore it, or give the run ids (trainstack status RUN_ID ...)") if why else None
