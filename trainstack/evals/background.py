"""`eval.every=K`: evaluate a training run's checkpoints as they appear, as separate eval runs.

A companion of the training launcher (lifecycle.trainer_started): a thread looks at the run's save
dir every `POLL_S`, and for each new complete checkpoint whose rollout count is a multiple of K
stores an eval run (evals/plan.py) and starts it as a job of its own (`trainstack exec` in its own
session locally, or `submit` on `eval.launcher`), one at a time. The trainer never waits for it.
After the trainer ends, the run's last checkpoint is evaluated too when it is due, and the
launcher waits up to `eval.wait_s` for the evals still running, so the command ends with their
results attached (evals.jsonl).
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

POLL_S = 1.0


def _say(msg: str) -> None:
    print(f"trainstack: eval: {msg}", file=sys.stderr, flush=True)


class BackgroundEval:
    def __init__(self, spec: Any, every: int, overrides: dict[str, Any], launcher: str | None, wait_s: float):
        self.spec, self.every, self.overrides, self.launcher, self.wait_s = spec, every, overrides, launcher, wait_s
        self.save_dir = spec.args.get("save") or str(Path(spec.run_dir) / "checkpoints")
        self.runs_root = str(Path(spec.run_dir).parent)
        self.seen: set[int] = set()
        self.queue: list[int] = []
        self.job: Any = None  # the running local job (a Popen), one at a time
        self.started: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        from trainstack.evals.plan import complete_iterations

        self.seen.update(complete_iterations(self.save_dir))  # what was there before this launch is not new
        self._thread = threading.Thread(target=self._loop, name="trainstack-eval", daemon=True)
        self._thread.start()

    # --- the watcher -------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            self._tick()

    def _tick(self) -> None:
        from trainstack.evals.plan import complete_iterations

        with self._lock:
            for n in complete_iterations(self.save_dir):
                if n not in self.seen:
                    self.seen.add(n)
                    if (n + 1) % self.every == 0:
                        self.queue.append(n)
            if self.job is not None and self.job.poll() is None:
                return
            self.job = None
            if self.queue:
                self._start(self.queue.pop(0))

    def _start(self, iteration: int) -> None:
        from trainstack.errors import ConfigErrors
        from trainstack.evals import run
        from trainstack.evals.plan import eval_spec

        try:
            spec = eval_spec(self.spec, iteration, self.overrides, self.runs_root, self.launcher or "local")
            run.check(spec)
            run.store(spec)
        except ConfigErrors as err:  # the same checks ran at compose time; a changed host can still refuse
            _say(f"not evaluating iter {iteration}: {err.errors[0].key}: {err.errors[0].problem}")
            return
        self.started.append(spec.run_id)
        _say(f"evaluating the checkpoint of rollout {iteration} as run {spec.run_id}")
        if self.launcher in (None, "local"):
            from trainstack.run.rundir import RunDir

            self.job = run.start_detached(spec, RunDir(spec.run_dir).logs / "eval-launch.log")
        else:
            from trainstack import registry

            registry.get(self.launcher).submit(spec)  # queued: the scheduler runs it

    # --- the companion's side ----------------------------------------------------------------
    def on_signal(self, signum: int, grace_s: float) -> None:
        self._stop.set()  # no new evals; one that runs goes on as the job it is

    def after_trainer(self, signalled: int | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if signalled is not None:
            return
        deadline = time.monotonic() + self.wait_s
        self._tick()  # the run's last checkpoint
        from trainstack.evals.plan import complete_iterations

        last = complete_iterations(self.save_dir)[-1:]
        with self._lock:  # the last checkpoint always, as --every does
            if last and last[0] not in self.queue and not any(s.endswith(f"-eval-{last[0]}") for s in self.started):
                self.queue.append(last[0])
        while time.monotonic() < deadline:
            self._tick()
            with self._lock:
                if self.job is None and not self.queue:
                    return
            time.sleep(0.2)
        _say(f"{len(self.queue) + (self.job is not None)} eval(s) still running or queued after eval.wait_s="
             f"{self.wait_s:g}; they go on as their own runs (trainstack status)")


def companion(ctx: Any) -> BackgroundEval | None:
    """lifecycle.trainer_started: a training run with eval.every set gets the evaluator."""
    from trainstack.evals.plan import EvalOf, parse_overrides

    if EvalOf.of(ctx.spec) is not None:
        return None
    settings = (ctx.spec.config or {}).get("eval") or {}
    every = settings.get("every")
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        return None
    return BackgroundEval(ctx.spec, every, parse_overrides(settings.get("overrides") or []), settings.get("launcher"),
                          float(settings.get("wait_s", 600.0)))
