"""What a dry run derives from the resolved args, so the sizes that decide a run are read, not computed
by hand: data-parallel size, SGLang engines, samples per rollout against the global batch (optimizer
steps per rollout), checkpoints and their disk use for the whole run against the free space at the
save dir, and the price ceiling where the cluster preset has one. Facts only: no new checks (a wrong
value is refused by validate/preflight, not here)."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack.config.resolve import ResolvedRun
from trainstack.render.command import SlimeCommand


@dataclass(frozen=True)
class Fact:
    label: str  # a short word: gpus, parallel, sglang, batch, ckpts, cost
    text: str
    warning: str | None = None  # what the reader should act on (the dry run's summary lists it as a problem)


def _int(v: Any, default: int | None = None) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def _size(n: float) -> str:
    from trainstack.preflight.host_checks import _size as size

    return size(n)


def checkpoints_in_run(num_rollout: int | None, interval: int | None) -> int | None:
    """slime's should_run_periodic_action: every `interval` rollouts, and after the last one."""
    if not num_rollout or not interval or interval <= 0:
        return None
    return num_rollout // interval + (1 if num_rollout % interval else 0)


def _free_at(path: str) -> tuple[Path, int] | None:
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return p, shutil.disk_usage(p).free
    except OSError:
        return None


def facts(run: ResolvedRun, cmd: SlimeCommand) -> list[Fact]:
    a, c = run.args, run.cluster
    out: list[Fact] = []
    tiny = c.backend == "tiny"
    if tiny:
        out.append(Fact("compute", "the tiny trainer on this machine's CPU (one process, no SGLang)"))
    else:
        nodes, per_node = _int(a.get("actor_num_nodes"), c.num_nodes) or 1, _int(a.get("actor_num_gpus_per_node"),
                                                                                  c.gpus_per_node) or 1
        actor = nodes * per_node
        tp, pp, cp = (_int(a.get(k), 1) or 1 for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                        "context_parallel_size"))
        colocate = bool(a.get("colocate"))
        rollout = actor if colocate else (_int(a.get("rollout_num_gpus"), 0) or 0)
        total = actor if colocate else actor + rollout
        out.append(Fact("gpus", f"{total} ({actor} training on {nodes} node{'s' if nodes != 1 else ''} x {per_node}; "
                                f"rollout {'colocated on the same GPUs' if colocate else f'on {rollout} more'})"))
        model_parallel = tp * pp * cp
        dp = f"{actor // model_parallel}" if actor % model_parallel == 0 else f"{actor / model_parallel:.2f} (not whole)"
        out.append(Fact("parallel", f"data-parallel {dp} = {actor} GPUs / (TP {tp} x PP {pp} x CP {cp})"))
        per_engine = _int(a.get("rollout_num_gpus_per_engine"), 1) or 1
        if rollout:
            engines = f"{rollout // per_engine}" if rollout % per_engine == 0 else f"{rollout / per_engine:.2f}"
            out.append(Fact("sglang", f"{engines} engine{'s' if engines != '1' else ''} x {per_engine} GPU"
                                      f"{'s' if per_engine != 1 else ''} per engine"))
    prompts, n, gbs = (_int(a.get(k)) for k in ("rollout_batch_size", "n_samples_per_prompt", "global_batch_size"))
    if prompts and n:
        samples = prompts * n
        text = f"{prompts} prompts x {n} samples = {samples} per rollout"
        steps = _int(a.get("num_steps_per_rollout"))
        if steps:
            text += f"; {steps} optimizer step{'s' if steps != 1 else ''} per rollout (num_steps_per_rollout)"
        elif gbs:
            per = samples / gbs
            text += f" / global batch {gbs} = " + (f"{samples // gbs} optimizer step{'s' if samples // gbs != 1 else ''}"
                                                   if samples % gbs == 0 else f"{per:.2f} (not whole)") + " per rollout"
        out.append(Fact("batch", text))
    out += _checkpoint_facts(run, cmd)
    from trainstack.errors import ConfigErrors
    from trainstack.registry import launcher_class

    try:
        cost = launcher_class(c.launcher).cost_note(dict(c.settings or {}))
    except ConfigErrors:
        cost = None
    if cost:
        out.append(Fact("cost", cost))
    return out


def _checkpoint_facts(run: ResolvedRun, cmd: SlimeCommand) -> list[Fact]:
    from trainstack.preflight.host_checks import HostFacts, checkpoint_bytes

    a = run.args
    count = checkpoints_in_run(_int(a.get("num_rollout")), _int(a.get("save_interval")))
    if count is None or not a.get("save"):
        return []
    text = f"{count} (every {a['save_interval']} of {a['num_rollout']} rollouts, and the last)"
    one = checkpoint_bytes(HostFacts.from_run(run, cmd))
    if one is not None:
        text += f" x {_size(one)} = {_size(one * count)}"
    free = _free_at(str(a["save"])) if HostFacts.from_run(run, cmd).runs_here else None
    if free is not None:
        where, left = free
        text += f"; {_size(left)} free at {where}"
        if one is not None and one * count > left:
            text += " (not enough for all: a larger args.save_interval or args.no_save_optim=true)"
            return [Fact("ckpts", text, warning=f"the run's checkpoints need {_size(one * count)}, {_size(left)} "
                                               f"free at {where} (a larger args.save_interval or "
                                               "args.no_save_optim=true)")]
    return [Fact("ckpts", text)]
