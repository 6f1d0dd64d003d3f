"""The eval feature joins the core here: `trainstack eval`, an eval run's results attached to its source
run after its trainer, background evaluation (`eval.every`), and the checks of the `eval:` settings.
Nothing is imported until a hook runs."""
from __future__ import annotations

from typing import Any, Optional

from trainstack import hooks


class _Attach:
    """After an eval run's trainer: its results go to the source run's evals.jsonl."""

    def __init__(self, spec: Any):
        self.spec = spec

    def on_signal(self, signum: int, grace_s: float) -> None:
        pass

    def after_trainer(self, signalled: Optional[int]) -> None:
        if signalled is None:
            from trainstack.evals.results import attach

            attach(self.spec)


def _trainer_started(ctx: hooks.RunContext) -> Optional[hooks.Companion]:
    extra = getattr(ctx.spec, "extra", None) or {}
    if "eval_of" in extra:
        return _Attach(ctx.spec)
    if ((ctx.spec.config or {}).get("eval") or {}).get("every"):
        from trainstack.evals.background import companion

        return companion(ctx)
    return None


def _rules(ctx: Any) -> list:
    """eval.every: its overrides parse as eval settings, and the run has eval data to evaluate."""
    settings = (ctx.run.config or {}).get("eval") or {}
    if not settings.get("every"):
        return []
    from trainstack.errors import ConfigError, ConfigErrors
    from trainstack.evals.plan import parse_overrides

    try:
        overrides = parse_overrides(settings.get("overrides") or [])
    except ConfigErrors as err:
        return [ConfigError(f"eval.overrides: {e.key}", e.problem, e.fix, value=e.value, source=e.source)
                for e in err.errors]
    if not overrides.get("eval_prompt_data") and not ctx.get("eval_prompt_data") and not ctx.get("eval_config"):
        return [ConfigError("eval.every", "background evaluation needs eval data, and this run has none",
                            "set env.eval_prompt_data=[name,/path/eval.jsonl] (or eval.overrides=[...]), or "
                            "eval.every=null", value=settings.get("every"))]
    return []


def _dry_run_notes(run: Any) -> list[str]:
    settings = (run.config or {}).get("eval") or {}
    if not settings.get("every"):
        return []
    where = settings.get("launcher") or "a local process"
    return [f"eval: the checkpoint of every rollout count that is a multiple of {settings['every']} (and the last) is "
            f"evaluated as its own eval-only run on {where}, beside training (trainstack status lists them; "
            "results in the run's evals.jsonl)"]


def _cli(sub: Any) -> None:
    from trainstack.evals.cli import add_eval

    add_eval(sub)


def register(registry: hooks.Registry) -> None:
    registry.add(hooks.TRAINER_STARTED, _trainer_started)
    registry.add(hooks.RULES, _rules)
    registry.add(hooks.DRY_RUN_NOTES, _dry_run_notes)
    registry.add(hooks.CLI, _cli)
