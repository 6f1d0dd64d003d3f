"""`trainstack compare`: one table for a set of runs (a sweep, run ids, or a group).

Columns: run_id, every config key that varies across the runs (found by flattening the
resolved configs, dotted paths), status (status.json), rollouts done, and the final and best
value of each chosen metric. Metrics come from one source interface (``trainstack.metrics``),
so the table is the same whatever the source. "best" is the maximum, except for metrics where
lower is better (names containing loss, kl, grad_norm, clipfrac, truncated, time): the minimum.
"""
from __future__ import annotations

import csv
import difflib
import fnmatch
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainstack.reports.diff import flatten
from trainstack.storage import layout
from trainstack.run.rundir.targets import expand, run_ids
from trainstack.secrets import redact
from trainstack.errors import ConfigError, ConfigErrors
from trainstack.metrics import RunMetrics, read_local, step_key_for, wandb_run_id

DEFAULT_METRICS = ("rollout/raw_reward", "eval/*")
DEST_LAYERS = ("model", "algo", "env", "args")  # precedence within one rank: later wins
RUN_IDENTITY_DESTS = ("save", "load", "wandb_dir")  # differ by construction (the run's own directory)
PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg", ".webp", ".eps")
LOWER_IS_BETTER = ("loss", "kl", "grad_norm", "clipfrac", "truncated", "time")
IGNORED_KEYS = ("run_id",)  # differs by construction


_MISSING = object()  # a key a run's flattened config lacks


class SharedFlat:
    """Every run's flattened config kept as its differences from the first run's: a sweep's runs share
    nearly every key, so a thousand runs hold about one config (compare's memory is flat in the runs)."""

    def __init__(self) -> None:
        self.base: dict[str, Any] | None = None
        self.dests: dict[str, tuple[Any, str, bool]] | None = None  # the first run's

    def diff(self, flat: dict[str, Any]) -> dict[str, Any]:
        if self.base is None:
            self.base = flat
            return {}
        out = {k: v for k, v in flat.items() if not _same(self.base.get(k, _MISSING), v)}
        out.update({k: _MISSING for k in self.base if k not in flat})
        return out

    def full(self, diff: dict[str, Any]) -> dict[str, Any]:
        out = {**(self.base or {}), **diff}
        return {k: v for k, v in out.items() if v is not _MISSING}


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


@dataclass
class RunRecord:
    run_id: str
    run_dir: Path | None
    config: dict[str, Any]
    status: dict[str, Any] = field(default_factory=dict)
    group: str | None = None
    metrics: RunMetrics = field(default_factory=RunMetrics)
    dests: dict[str, tuple[Any, str, bool]] = field(default_factory=dict)  # dest -> (value, namespace, command line?)
    last_checkpoint: int | None = None  # its latest complete checkpoint (run/rundir/summary.py)
    # once condensed (`condense`): each wanted metric's final/best, every metric's name, the rollouts; series dropped
    condensed: dict[str, dict[str, Any]] | None = None
    metric_names: set[str] = field(default_factory=set)
    rollouts_done: int | None = None
    shared: SharedFlat | None = None  # the config kept as a difference (`config` emptied)
    flat_diff: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return str(self.status.get("state") or "unknown")

    def rollouts(self) -> int | None:
        """Rollouts trained: what the run did (its metrics, one value per step, and its latest complete
        checkpoint), never the num_rollout a launch asked for."""
        if self.condensed is not None:
            return self.rollouts_done
        if self.run_dir is not None:
            from trainstack.run.rundir.progress import rollouts_of

            return rollouts_of(self.metrics.series, self.last_checkpoint)
        steps = [s for name, pts in self.metrics.series.items()
                 if step_key_for(name) == "rollout/step" and not name.startswith("eval/") for s, _ in pts]
        return int(max(steps)) + 1 if steps else None

    def condense_from_digest(self, source: str, digest: dict[str, dict[str, Any]], wanted: Any) -> None:
        """`condense` from the run's metrics digest (metrics/digest.py) instead of its series: the same answers."""
        from trainstack.metrics import digest as digests

        steps = [e["last_step"] for n, e in digest.items() if e.get("last_step") is not None
                 and step_key_for(n) == "rollout/step" and not n.startswith("eval/")]
        rollouts = int(max(steps)) + 1 if steps else None
        if self.last_checkpoint is not None:
            rollouts = max(rollouts or 0, self.last_checkpoint + 1)
        self.rollouts_done = rollouts
        self.metric_names = {sys.intern(n) for n in digest}
        self.condensed = {m: digests.summary(e, lower_is_better(m)) for m, e in digest.items() if wanted(m)}
        self.metrics = RunMetrics(source=source)

    def flat(self) -> dict[str, Any]:
        """The config as dotted keys, every slime dest once (under `@dest`) with the value it ran with,
        whichever of model/algo/env/args said it."""
        if self.shared is not None:
            return self.shared.full(self.flat_diff)
        out = {k: v for k, v in flatten(self.config).items()
               if k.split(".", 1)[0] not in DEST_LAYERS or k.split(".", 2)[1:2] == ["meta"]}
        out.update({f"@{dest}": value for dest, (value, _, _) in self.dests.items()})
        return out

    def share(self, shared: SharedFlat) -> None:
        """Keep the config as its difference from the first run's (`shared`), and its dests' origins only
        where they differ from the first run's."""
        self.flat_diff = shared.diff(self.flat())
        if shared.dests is None:
            shared.dests = self.dests
        else:
            self.dests = {d: v for d, v in self.dests.items() if shared.dests.get(d) != v}
        self.shared, self.config = shared, {"name": self.config.get("name")}

    def dest(self, name: str) -> tuple[Any, str, bool] | None:
        got = self.dests.get(name)
        if got is None and self.shared is not None and self.shared.dests is not None and \
                f"@{name}" not in self.flat_diff:  # the same as the first run's
            got = self.shared.dests.get(name)
        return got

    def names(self) -> set[str]:
        return set(self.metrics.series) | self.metric_names

    def summary_of(self, metric: str) -> dict[str, Any]:
        if self.condensed is not None and metric in self.condensed:
            return self.condensed[metric]
        return summarise(self.metrics.series.get(metric, []), metric)

    def condense(self, wanted: Any, keep_series: bool) -> None:
        """Each metric `wanted(name)` says yes to as its final and best values, every metric's name, and
        the rollouts: all the table needs of a run, so its series can go (unless plotted)."""
        self.rollouts_done = self.rollouts()
        self.metric_names = {sys.intern(n) for n in self.metrics.series}  # one copy of each name for all runs
        self.condensed = {m: summarise(pts, m) for m, pts in self.metrics.series.items() if wanted(m)}
        if not keep_series:
            self.metrics = RunMetrics(source=self.metrics.source)


def lower_is_better(metric: str) -> bool:
    return any(w in metric.lower() for w in LOWER_IS_BETTER)


# -- finding runs --------------------------------------------------------------------------------
VIEW_FILES = (layout.CONFIG, layout.COMMAND, layout.ARGS, layout.PROVENANCE)


def load_record(run_dir: Path) -> RunRecord:
    """A run's record: its summary (run/rundir/summary.py), and its config, args and provenance from its
    spec.json (one JSON parse; config.yaml, a YAML view of the same config, parses ten times slower),
    else from their views (config.yaml, command.json, args.json, provenance.json), each file read once
    (ConfigErrors naming a corrupt one)."""
    from trainstack.run.rundir import summary

    facts, files = summary.read_with(run_dir, (layout.SPEC,))
    spec = files[layout.SPEC]
    if isinstance(spec, dict):
        config, args, provenance = spec.get("config"), spec.get("args"), spec.get("arg_sources") or {}
        run_id = spec.get("run_id")
        group = args.get("wandb_group") if isinstance(args, dict) else None
    else:
        views = summary.read_with(run_dir, VIEW_FILES)[1]
        config, args, provenance = views[layout.CONFIG], views[layout.ARGS], views[layout.PROVENANCE] or {}
        command = views[layout.COMMAND] or {}
        argv = command.get("argv") or []
        run_id = command.get("run_id")
        group = argv[argv.index("--wandb-group") + 1] if "--wandb-group" in argv[:-1] else None
    config = redact(config) if isinstance(config, dict) else {}
    return RunRecord(run_id=run_id or config.get("run_id") or run_dir.name, run_dir=run_dir,
                     config=config, status=dict(facts.status), group=str(group) if group else None,
                     last_checkpoint=facts.last_checkpoint,
                     dests=dest_values(config, redact(args) if isinstance(args, dict) else None, provenance))


def said_by(source: str, holders: list[str]) -> tuple[str, bool]:
    """(namespace, on the command line?) of a dest's winning value, from its provenance: the
    command-line key, the group file, else the last namespace of the config that holds it."""
    import re

    m = re.match(r"command line `\+*(model|algo|env|args)\.", source)
    if m:
        return m.group(1), True
    m = re.match(r"(?:conf/|\S*/)(model|algo|env)/[^/\s]+\.yaml", source)
    if m:
        return m.group(1), False
    return (holders or ["args"])[-1], False


def dest_values(config: dict, args: dict | None, provenance: Any) -> dict[str, tuple[Any, str, bool]]:
    """dest -> (the value the run used, the namespace that set it, set on the command line). The value
    is args.json's (what was rendered) when the run dir has it, else config.yaml's winning namespace."""
    provenance = provenance if isinstance(provenance, dict) else {}
    holders: dict[str, list[str]] = {}
    for ns in DEST_LAYERS:
        node = config.get(ns)
        for dest in node if isinstance(node, dict) else ():
            if dest != "meta":
                holders.setdefault(str(dest), []).append(ns)
    out: dict[str, tuple[Any, str, bool]] = {}
    for dest in (args if args is not None else holders):
        source = str(provenance.get(dest, ""))
        if dest in RUN_IDENTITY_DESTS or source.startswith("trainstack: run identity"):
            continue
        ns, cli = said_by(source, holders.get(dest, []))
        if args is not None:
            value = args[dest]
        else:
            value = config[ns][dest] if ns in holders[dest] else config[holders[dest][-1]][dest]
        out[str(dest)] = (value, ns, cli)
    return out


def collect(targets: list[str], group: str | None, runs_root: str | Path) -> list[RunRecord]:
    from trainstack.run.rundir import check

    runs_root = Path(runs_root)
    refs = expand(targets, runs_root)
    missing = [r for r in refs if not r.run_dir.is_dir()]
    if missing:  # a submitted job whose run dir is gone
        raise ConfigErrors([ConfigError(r.run_id, f"its run directory is missing ({r.run_dir})",
                                        "was the run deleted? pass --runs-root if the runs live elsewhere")
                            for r in missing])
    grouped = [runs_root / rid for rid in run_ids(runs_root)] if group else []
    # each file checked as it is read (metrics.jsonl where it is read: attach_metrics; with TensorBoard
    # files it is not); the lease, which nothing here reads, checked as status checks it
    errors: list[ConfigError] = []
    loaded: dict[Path, RunRecord] = {}
    shared = SharedFlat()
    for run_dir in dict.fromkeys([r.run_dir for r in refs] + grouped):
        try:
            rec = loaded[run_dir] = load_record(run_dir)
        except ConfigErrors as err:
            errors += err.errors
            continue
        rec.share(shared)
    errors += [e for d in loaded for e in check.problems(d, (layout.LEASE,))]
    if errors:
        raise ConfigErrors(errors)
    from trainstack.run.rundir import summary
    records = [loaded[r.run_dir] for r in refs]
    if group:
        for run_dir in grouped:
            rec = loaded[run_dir]
            if group in (rec.config.get("name"), rec.group) and rec.run_id not in {r.run_id for r in records}:
                records.append(rec)
    from trainstack.reports.status import run_states

    states = run_states([str(r.run_dir) for r in records if r.run_dir is not None])  # status's truth, not a copy
    for rec in records:
        state = states.get(str(rec.run_dir))
        if state is not None:
            rec.status = {"state": state}  # all compare shows of it
    summary.forget()  # every run's summary was read once; nothing holds a thousand of them
    return records


# -- the table -----------------------------------------------------------------------------------
def varying_keys(records: list[RunRecord]) -> list[str]:
    """Config keys whose values differ across the runs; a slime dest is one key (named by the
    namespace most runs set it in), whichever of model/algo/env/args each run set it under."""
    shared = records[0].shared if records else None
    if shared is not None and shared.base is not None and all(r.shared is shared for r in records):
        # every config is a difference from one base: only a key some difference holds can vary
        held = dict.fromkeys(k for r in records for k in r.flat_diff)
        out = []
        for k in (k for k in dict.fromkeys([*shared.base, *held]) if k in held and k not in IGNORED_KEYS):
            values = {json.dumps(_flat_value(r, k, shared.base), sort_keys=True, default=str) for r in records}
            if len(values) > 1:
                out.append(k)
        return out
    flat = [r.flat() for r in records]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    out = []
    for k in keys:
        if k in IGNORED_KEYS:
            continue
        values = {json.dumps(f.get(k), sort_keys=True, default=str) for f in flat}
        if len(values) > 1:
            out.append(k)
    return out


def _flat_value(r: RunRecord, key: str, base: dict[str, Any]) -> Any:
    v = r.flat_diff.get(key, base.get(key))
    return None if v is _MISSING else v


def column_name(key: str, records: list[RunRecord]) -> str:
    """`@lr` -> `algo.lr`: the namespace the runs set it in on the command line (what the user typed to
    vary it), else the one most runs set it in."""
    if not key.startswith("@"):
        return key
    dest = key[1:]
    said = [d for d in (r.dest(dest) for r in records) if d is not None]
    typed = [ns for _, ns, cli in said if cli] or [ns for _, ns, _ in said]
    if not typed:
        return f"args.{dest}"
    return f"{max(dict.fromkeys(typed), key=typed.count)}.{dest}"


def select_metrics(patterns: list[str] | None, records: list[RunRecord]) -> list[str]:
    names = sorted({n for r in records for n in r.names()})
    out: list[str] = []
    for pat in patterns or DEFAULT_METRICS:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pat)] if any(c in pat for c in "*?[") else [pat]
        out += [h for h in hits if h not in out]
    return out


def summarise(points: list[tuple[float, float]], metric: str) -> dict[str, Any]:
    pts = [(s, v) for s, v in points if not math.isnan(v)]
    if not pts:
        return {"final": None, "final_step": None, "best": None, "best_step": None}
    pick = min if lower_is_better(metric) else max
    best = pick(pts, key=lambda p: p[1])
    return {"final": pts[-1][1], "final_step": _int(pts[-1][0]), "best": best[1], "best_step": _int(best[0])}


def _int(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def build_table(records: list[RunRecord], metrics: list[str], sort: str | None = None,
                desc: bool = False) -> dict[str, Any]:
    raw_keys = varying_keys(records)
    names = {k: column_name(k, records) for k in raw_keys}
    keys = [names[k] for k in raw_keys]
    rows: list[dict[str, Any]] = []
    for r in records:
        flat = r.flat_diff if r.shared is not None else r.flat()
        base = r.shared.base or {} if r.shared is not None else {}
        config = {names[k]: _flat_value(r, k, base) if r.shared is not None else flat.get(k) for k in raw_keys}
        rows.append({"run_id": r.run_id, "config": config, "status": r.state,
                     "rollouts": r.rollouts(), "source": r.metrics.source,
                     "metrics": {m: r.summary_of(m) for m in metrics}})
    if sort:
        if sort in metrics or sort in {n for r in records for n in r.names()}:
            val = lambda row: row["metrics"].get(sort, {}).get("final") if sort in row["metrics"] else None  # noqa: E731
            if sort not in metrics:
                for row, r in zip(rows, records):
                    row["metrics"][sort] = r.summary_of(sort)
                metrics = [*metrics, sort]
        elif sort in ("run_id", "status", "rollouts"):
            val = lambda row: row[sort]  # noqa: E731
        elif sort in keys:
            val = lambda row: row["config"][sort]  # noqa: E731
        else:
            choices = [*metrics, "run_id", "status", "rollouts", *keys]
            near = difflib.get_close_matches(sort, choices, n=3, cutoff=0.4)
            raise ConfigErrors([ConfigError("--sort", f"{sort!r} is not a metric any run logged nor a column",
                                            f"did you mean {', '.join(near)}?" if near else
                                            f"use one of: {', '.join(choices)}", value=sort)])
        present = [row for row in rows if val(row) is not None]
        missing = [row for row in rows if val(row) is None]
        present.sort(key=lambda row: (str(type(val(row))), val(row)), reverse=desc)
        rows = present + missing  # runs without the value last, whatever the direction
    return {"varying_keys": keys, "metrics": metrics, "rows": rows}


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, str):
        return v
    return json.dumps(v, default=str)


def columns(table: dict[str, Any]) -> list[str]:
    cols = ["run_id", *table["varying_keys"], "status", "rollouts"]
    for m in table["metrics"]:
        cols += [f"{m} final", f"{m} best"]
    return cols


def flat_rows(table: dict[str, Any]) -> list[list[Any]]:
    out = []
    for row in table["rows"]:
        cells = [row["run_id"], *[row["config"][k] for k in table["varying_keys"]], row["status"], row["rollouts"]]
        for m in table["metrics"]:
            cells += [row["metrics"][m]["final"], row["metrics"][m]["best"]]
        out.append(cells)
    return out


def table_columns(table: dict[str, Any]) -> list:
    """Columns by priority: run id and the first metric's final value always; then status and
    rollouts (what a run did); then the varying keys (folding at `.`/`_`, never inside a word);
    then the other values."""
    from trainstack.terminal.tables import Column

    from trainstack.reports.status import RUN_ID_WHOLE

    ids = min(max((len(str(row["run_id"])) for row in table["rows"]), default=12), RUN_ID_WHOLE)
    cols = [Column("run_id", 0, min_width=max(ids, 12))]  # a run id whole, when it can be
    cols += [Column(k, 2, min_width=6) for k in table["varying_keys"]]
    cols += [Column("status", 1, min_width=6), Column("rollouts", 1, numeric=True)]
    for i, m in enumerate(table["metrics"]):
        cols += [Column(f"{m} final", 0 if i == 0 else 3 + 2 * i, numeric=True),
                 Column(f"{m} best", 3 + 2 * i + 1, numeric=True)]
    return cols


def print_table(table: dict[str, Any], title: str, file=None, wide: bool = False, width: int | None = None) -> None:
    from trainstack.terminal.tables import print_table as show

    show(table_columns(table), [list(map(_cell, cells)) for cells in flat_rows(table)], title=title,
         file=file or sys.stdout, wide=wide, width=width)


def write_csv(table: dict[str, Any], path: str) -> None:
    from trainstack.terminal.output_files import prepare

    with open(prepare(path), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(columns(table))
        for cells in flat_rows(table):
            w.writerow(["" if c is None else (json.dumps(c) if isinstance(c, (list, dict)) else c) for c in cells])


def line_labels(records: list[RunRecord]) -> dict[str, str]:
    """Each run's legend entry: its values of the keys that vary (`algo.lr=0.001`), else its run id."""
    table = build_table(records, [])
    labels = {}
    for row in table["rows"]:
        parts = [f"{k}={_cell(v)}" for k, v in row["config"].items()]
        labels[row["run_id"]] = " ".join(parts) if parts and len(" ".join(parts)) <= 60 else (
            " ".join(parts)[:57] + "..." if parts else row["run_id"])
    if len(set(labels.values())) < len(labels):  # two runs with the same varying values: add the run id
        labels = {rid: f"{lab} ({rid})" if lab != rid else rid for rid, lab in labels.items()}
    return labels


@dataclass
class Panel:
    """What one panel of the plot shows (returned so tests and --json can check it)."""

    xlabel: str
    ylabel: str
    lines: dict[str, tuple[list, list]] = field(default_factory=dict)  # run_id -> (steps, values)
    legend: dict[str, str] = field(default_factory=dict)  # run_id -> its legend entry


def plot(records: list[RunRecord], metrics: list[str], out: str) -> dict[str, Panel]:
    """One panel per metric (x: its step key, y: the metric), one line per run named by the keys that
    vary; returns what was drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from trainstack.terminal.output_files import prepare

    labels = line_labels(records)
    drawn: dict[str, Panel] = {}
    n = max(1, len(metrics))
    fig, axes = plt.subplots(n, 1, figsize=(8, 3.4 * n), squeeze=False)
    for ax, m in zip(axes[:, 0], metrics or ["(no metrics)"]):
        panel = drawn[m] = Panel(xlabel=step_key_for(m), ylabel=m)
        for r in records:
            pts = r.metrics.series.get(m) or []
            if not pts:
                continue
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            label = labels.get(r.run_id, r.run_id)
            ax.plot(xs, ys, marker="o" if len(pts) < 30 else None, markersize=3, label=label)
            panel.lines[r.run_id], panel.legend[r.run_id] = (xs, ys), label
        ax.set_title(m)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3)
        if panel.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(prepare(out), dpi=100)
    plt.close(fig)
    return drawn


# -- sources -------------------------------------------------------------------------------------
def attach_metrics(records: list[RunRecord], source: str, project: str | None = None, entity: str | None = None,
                   group: str | None = None, base_url: str | None = None, condense: Any = None) -> list[RunRecord]:
    """Each record's metrics from `source`. `condense`: (which metrics to keep as final/best, keep the
    series?): each run's series is summed up as it is read and dropped (RunRecord.condense), so a
    thousand runs' metrics are never held at once."""
    if source != "wandb":
        from trainstack.metrics.jsonl import add
        from trainstack.run.rundir import check

        from trainstack.metrics import finish

        def jsonl_checked(run_dir: Path) -> dict:  # metrics.jsonl read, checked and parsed once
            raw: dict[str, dict[float, float]] = {}
            for rec in check.jsonl_records(run_dir, layout.METRICS):
                add(raw, rec)
            return finish(raw)

        from trainstack.metrics import digest

        errors: list[ConfigError] = []
        for r in records:
            if condense is not None and not condense[1] and r.run_dir:  # no plot: a digest serves, when current
                got = digest.load(r.run_dir)
                if got is not None and got[0] != "jsonl" and source in ("auto", got[0]):  # (jsonl: checked as read)
                    r.condense_from_digest(got[0], got[1], condense[0])
                    continue
            try:
                r.metrics = read_local(r.run_dir, source, jsonl_checked) if r.run_dir else RunMetrics(source="none")
                if r.run_dir and r.metrics.source == "none" and source == "auto":  # nothing: its jsonl checked
                    jsonl_checked(r.run_dir)
            except ConfigErrors as err:
                errors += err.errors
                continue
            if condense is not None:
                r.condense(*condense)
        if errors:
            raise ConfigErrors(errors)
        return records
    if not project:
        raise ConfigErrors([ConfigError("--project", "--source wandb needs the W&B project",
                                        "add --project P (and --entity E unless it is your default entity)")])
    from trainstack.metrics import wandb_api

    ids = {wandb_run_id(r.run_dir, r.run_id): r for r in records}
    api_runs = wandb_api.fetch(project, entity, ids=list(ids) or None, group=group, base_url=base_url)
    for ar in api_runs:
        rec = ids.get(ar.id)
        if rec is None:  # a run found by group that has no local directory: its W&B config is the config
            rec = RunRecord(run_id=ar.id, run_dir=None, config=redact(ar.config), group=ar.group,
                            status={"state": ar.state})
            records.append(rec)
            ids[ar.id] = rec
        rec.metrics = RunMetrics(series=ar.series, source="wandb")
    for r in records:
        if not r.metrics.source:
            r.metrics = RunMetrics(source="wandb (not found)")
        if condense is not None:
            r.condense(*condense)
    return records


def output_errors(ns: Any) -> list[ConfigError]:
    from trainstack.terminal.output_files import output_problem

    from trainstack.extras import problem

    found = [output_problem(ns.plot, "--plot", PLOT_SUFFIXES) if ns.plot is not None else None,
             output_problem(ns.csv, "--csv") if ns.csv is not None else None]
    plotting = problem("--plot", "cpu", "a plot", ("matplotlib",), value=ns.plot) if ns.plot is not None else []
    return [e for e in found if e is not None] + plotting


def run_compare(ns: Any, out=None) -> int:
    out = out or sys.stdout
    targets = list(ns.targets or [])
    if not targets and not ns.group:
        raise ConfigErrors([ConfigError("compare", "nothing to compare", "give a sweep dir (multirun/<sweep>), "
                                        "run ids / run dirs, or --group G")])
    bad_outputs = output_errors(ns)
    if bad_outputs:
        raise ConfigErrors(bad_outputs)
    records = collect(targets, ns.group, ns.runs_root)
    patterns = list(ns.metric or DEFAULT_METRICS) + ([ns.sort] if ns.sort else [])

    def wanted(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) if any(c in p for c in "*?[") else name == p for p in patterns)

    records = attach_metrics(records, ns.source, getattr(ns, "project", None), getattr(ns, "entity", None),
                             ns.group, getattr(ns, "base_url", None), condense=(wanted, bool(ns.plot)))
    if not records:
        raise ConfigErrors([ConfigError("--group" if ns.group else "compare", f"no runs found for group {ns.group!r} "
                                        f"under {ns.runs_root}" if ns.group else "no runs found",
                                        "check the group (a config `name` or --wandb-group) and --runs-root")])
    metrics = select_metrics(ns.metric, records)
    table = build_table(records, metrics, ns.sort, ns.desc)
    table["source"] = ns.source
    if ns.csv:
        write_csv(table, ns.csv)
    if ns.plot:
        panels = plot(records, table["metrics"], ns.plot)
        table["plotted"] = {m: sorted(p.lines) for m, p in panels.items()}
        table["plot"] = {m: {"x": p.xlabel, "y": p.ylabel, "legend": p.legend} for m, p in panels.items()}
    if ns.json:
        out.write(json.dumps(table, indent=2, default=str) + "\n")
    else:
        what = ", ".join(targets) if targets else f"group {ns.group}"
        print_table(table, f"{len(records)} runs ({what}; metrics from {ns.source})", out,
                    wide=bool(getattr(ns, "wide", False)))
        if ns.plot:
            out.write(f"plot: {ns.plot}\n")
        if ns.csv:
            out.write(f"csv: {ns.csv}\n")
    return 0

