"""`trainstack eval RUN... [--iter N | --every K | --all] [KEY=VALUE ...]`: eval-only runs of runs' checkpoints.

RUN: run ids, run dirs or sweep dirs. Each evaluated checkpoint is its own stored run
(`<run>-eval-<N>[-<tag>]`, in the source run's runs root): checked before anything is written, then executed here (or submitted with `--launcher`).
An eval whose run finished and whose result is attached is not redone (`--force` redoes it). The
table at the end is what each eval measured, attached to the source run's checkpoint (evals.jsonl).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def add_eval(sub: Any) -> None:
    from trainstack.config.userconfig import RUNS_ROOT_ENV, default_runs_root

    p = sub.add_parser("eval", help="evaluate a run's checkpoints as eval-only runs (slime's num_rollout=0 path); "
                       "results attach to the run's iterations",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("items", nargs="+", metavar="RUN|KEY=VALUE",
                   help="the runs whose checkpoints to evaluate (run ids under --runs-root, run dirs or sweep dirs), "
                        "then eval settings KEY=VALUE (slime's eval_* dests, n_samples_per_eval_prompt, the reward, "
                        "rollout_seed), e.g. args.eval_temperature=0 'env.eval_prompt_data=[aime,/data/aime.jsonl]'")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--iter", type=int, help="the checkpoint of this rollout id")
    which.add_argument("--every", type=int, metavar="K", help="checkpoints whose rollout count is a multiple of K, "
                       "and the last")
    which.add_argument("--all", action="store_true", help="every complete checkpoint")
    p.add_argument("--launcher", help="submit the eval runs with this launcher (default: run them here, one by one)")
    p.add_argument("--force", action="store_true", help="evaluate again what was evaluated already")
    p.add_argument("--json", action="store_true", help="the results as JSON on stdout")
    p.add_argument("--runs-root", default=default_runs_root(),
                   help=f"where run ids are looked up and eval runs go (default ${RUNS_ROOT_ENV}, else ./runs)")
    p.set_defaults(func=cmd_eval, trailing_positionals="items")


def cmd_eval(ns: argparse.Namespace) -> int:
    from trainstack.errors import ConfigError, ConfigErrors, RuntimeFailure, report_and_exit, report_failure_and_exit
    from trainstack.evals import run
    from trainstack.evals.plan import EvalOf, complete_iterations, eval_spec, parse_overrides, select
    from trainstack.run import spec as runspec
    from trainstack.run.rundir.targets import expand

    try:
        targets = [t for t in ns.items if "=" not in t]
        overrides = parse_overrides([t for t in ns.items if "=" in t])
        if not targets:
            raise ConfigErrors([ConfigError("RUN", "no run named", "e.g. trainstack eval RUN_ID --all")])
        if ns.launcher:
            from trainstack import registry

            registry.get(ns.launcher)  # an unknown launcher is refused before anything is written
        specs = []
        for ref in expand(targets, ns.runs_root):
            source = runspec.load(ref.run_dir)
            if EvalOf.of(source) is not None:
                raise ConfigErrors([ConfigError("RUN", f"{source.run_id} is an eval run; it has no checkpoints of its "
                                                f"own", f"evaluate its source: trainstack eval {EvalOf.of(source).run_id}",  # type: ignore[union-attr]
                                                value=source.run_id)])
            save_dir = source.args.get("save") or str(Path(source.run_dir) / "checkpoints")
            iterations = select(complete_iterations(save_dir), ns.iter, ns.every, ns.all, source.run_id)
            specs += [eval_spec(source, n, overrides, Path(source.run_dir).parent, ns.launcher or "local")
                      for n in iterations]
        for spec in specs:
            run.check(spec)
    except ConfigErrors as err:
        report_and_exit(err, command="eval")
    rows, code = [], 0
    for spec in specs:
        of = EvalOf.of(spec)
        assert of is not None
        if not ns.force and run.done(spec):
            rows.append(_row(spec, of.iteration, "done earlier", None))
            continue
        run.store(spec)
        t0 = time.monotonic()
        try:
            import contextlib

            from trainstack import registry

            launcher = registry.get(spec.launcher)
            with contextlib.redirect_stdout(sys.stderr):  # the trainer's console is a log; stdout is the table
                got = launcher.submit(spec)
        except ConfigErrors as err:
            report_and_exit(err, command="eval")
        except RuntimeFailure as ex:
            report_failure_and_exit(ex)
        code = code or got
        state = ("finished" if launcher.waits else f"submitted ({launcher.name})") if got == 0 else f"exit code {got}"
        rows.append(_row(spec, of.iteration, state, time.monotonic() - t0))
    _print(rows, ns.json)
    return code


def _row(spec: Any, iteration: int, state: str, seconds: float | None) -> dict[str, Any]:
    from trainstack.evals.plan import EvalOf
    from trainstack.evals.results import attached

    of = EvalOf.of(spec)
    assert of is not None
    mine = [r for r in attached(of.run_dir) if r.get("eval_run") == spec.run_id and r.get("step") == iteration]
    return {"run_id": of.run_id, "iteration": iteration, "eval_run": spec.run_id, "state": state, "seconds": seconds,
            "metrics": mine[-1]["metrics"] if mine else {}}


def _print(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print(json.dumps({"evals": rows}, indent=1, sort_keys=True))
        return
    from trainstack.terminal.tables import output_width

    names = sorted({k for r in rows for k in r["metrics"] if "/" not in k[5:] and "truncated" not in k})
    head = ["run", "iter", *names, "state", "eval run"]
    body = [[r["run_id"], str(r["iteration"]), *(f"{r['metrics'][k]:.4f}" if k in r["metrics"] else "-" for k in names),
             r["state"] + (f" ({r['seconds']:.1f} s)" if r["seconds"] is not None else ""), r["eval_run"]]
            for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    out = sys.stdout
    width = output_width(out)
    print(f"eval: {len(rows)} checkpoint(s)", file=out)
    for line in (head, *body):
        text = "  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip()
        print(text if width is None else text[:max(width, 40)], file=out)
