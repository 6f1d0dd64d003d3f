"""The per-dest oracle's probes and judge (issue #24): every slime dest set by a user.

For every dest of slime's argument table (trainstack/data/slime_args.json) a few *probes*: user
overrides `args.<dest>=<value>` with a value of the dest's kind (a switch against its default, both
ways where the default is None; a choice other than the default; a number; a list; a path; a JSON
object), plus, for each numeric range rule (range_rules.RANGES), a value outside the range. Each
probe goes on a base config where the dest matters (dense RL, MoE, PP 4, CP 2, rollout on its own
GPUs, async, SFT, two nodes). Dests nobody can set are in EXCLUDED with the reason.

`scripts/oracle/per_dest.py` (part of `make oracle`) batches the probes, asks trainstack and slime's
real parser, and records ``tests/oracle/per_dest_oracle.json``; tests/test_per_dest_oracle.py
re-judges every recorded batch without slime.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainstack.config.resolve import PATH_DESTS
from trainstack_dev.oracle import CHECKOUT, Judgement, judge

PER_DEST_PATH = CHECKOUT / "tests" / "oracle" / "per_dest_oracle.json"

RL = ["experiment=qwen3-4B-grpo-dapo"]
BASES: dict[str, list[str]] = {
    "dense": RL,
    "moe": [*RL, "model=qwen3-30B-A3B"],
    "pp": [*RL, "model=qwen3-32B", "cluster=slurm_8xh100", "cluster.num_nodes=2", "model.tensor_model_parallel_size=4",
           "model.pipeline_model_parallel_size=4"],
    "cp": [*RL, "model.context_parallel_size=2"],
    "noncolocated": [*RL, "cluster.colocate=false", "cluster.rollout_num_gpus=4"],
    "async": [*RL, "slime.entrypoint=train_async.py", "cluster.colocate=false", "cluster.rollout_num_gpus=4"],
    "sft": ["experiment=qwen3-4B-base-sft"],
    "multinode": [*RL, "cluster=slurm_8xh100", "cluster.num_nodes=2"],
}
# Environment values a user sets (runtime_env.env_vars), one probe per base where they matter.
ENV_PROBES: dict[str, list[str]] = {
    "dense": ["runtime_env.env_vars.NCCL_DEBUG=INFO", "runtime_env.env_vars.PYTORCH_CUDA_ALLOC_CONF=null"],
    "multinode": ["runtime_env.env_vars.NCCL_SOCKET_IFNAME=eth0", "runtime_env.env_vars.NCCL_IB_DISABLE='1'"],
}

# Dests a user cannot set, each with why (the coverage test checks every other dest has a probe).
EXCLUDED: dict[str, str] = {
    "save": "managed by trainstack (resolve.MANAGED_DESTS): the run's checkpoint dir",
    "load": "managed by trainstack (resolve.MANAGED_DESTS): the run resumes from its own checkpoints",
    "ckpt_step": "managed by trainstack (resolve.MANAGED_DESTS): resume from the latest complete checkpoint",
    "start_rollout_id": "managed by trainstack (resolve.MANAGED_DESTS): derived from the checkpoint",
}
SECRET = ("a secret: resolve refuses it in configs (it would land in saved configs, logs and argv); it comes "
          "from the environment (trainstack.secrets)")
# Values the kind alone does not give (Megatron/SGLang converters: a value their type accepts).
VALUES: dict[str, list[tuple[str, Any]]] = {
    "cuda_graph_scope": [("any", ["attn"])],
    "phase_transition_iterations": [("str", "10,20")],  # Megatron splits it into ints
    "rollout_external_engine_addrs": [("list", ["10.0.0.1:30000"])],  # host:port, checked while parsing
}


def excluded() -> dict[str, str]:
    """Every dest no probe sets, with why."""
    from trainstack.secrets import is_secret_name
    from trainstack.upstream.argtable import load_table

    return {**{d: SECRET for d in load_table().dests() if is_secret_name(d)}, **EXCLUDED}


@dataclass(frozen=True)
class Probe:
    """One user override: `args.<dest>=<value>` (value as Hydra reads it), on a base."""

    dest: str
    case: str  # what the value exercises: on, off, choice, number, out_of_range, list, path, ...
    value: Any
    base: str

    @property
    def key(self) -> str:
        return f"{self.dest}/{self.case}"

    @property
    def override(self) -> str:
        return f"args.{self.dest}={hydra_value(self.value)}"


def hydra_value(v: Any) -> str:
    """A Hydra override value that reads back as `v` (strings always quoted)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, list):
        return "[" + ",".join(hydra_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{hydra_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def base_of(dest: str) -> str:
    """The base config where a dest matters."""
    d = dest
    if d.startswith("sglang_") or d.startswith("router_"):
        return "dense"
    if "expert" in d or d.startswith("moe_") or d in ("num_experts",):
        return "moe"
    if "pipeline" in d or "virtual" in d or d in ("overlap_p2p_comm", "align_grad_reduce", "defer_embedding_wgrad_compute",
                                                  "account_for_embedding_in_pipeline_split",
                                                  "account_for_loss_in_pipeline_split", "batch_p2p_comm"):
        return "pp"
    if "context_parallel" in d or d.startswith("cp_") or d.endswith("_cp") or d in ("hierarchical_context_parallel_sizes",):
        return "cp"
    if d.startswith("rollout_num_gpus") or d.startswith("update_weight") or d in ("use_fault_tolerance",):
        return "noncolocated"
    if d in ("partial_rollout", "mask_offpolicy_in_partial_rollout", "update_weights_interval"):
        return "async"
    if d in ("loss_type", "loss_mask_type", "calculate_per_token_loss"):
        return "sft"
    if d in ("actor_num_nodes", "actor_num_gpus_per_node", "num_gpus_per_node", "distributed_timeout_minutes",
             "num_distributed_optimizer_instances"):
        return "multinode"
    return "dense"


PATH_HINTS = ("path", "dir", "file", "load", "save", "checkpoint", "data", "tokenizer_model")


def values_of(spec) -> list[tuple[str, Any]]:
    """(case, value) for one dest, from its kind in the table."""
    from trainstack.upstream import argtable as at

    if spec.dest in VALUES:
        return VALUES[spec.dest]
    d = spec.default
    v: Any
    if spec.is_switch:
        if spec.kind == at.BOOL_OPTIONAL:
            return [("on", True), ("off", False)]
        if d is None:
            return [("on", True), ("off", False)]
        return [("on", True)] if not d else [("off", False)]
    choices = list(spec.choice_values() or ())
    if choices:
        default = str(d).split(".", 1)[1] if isinstance(d, str) and "." in d and d[:1].isupper() else d
        other = [c for c in choices if c != default and c is not None]
        pick = other[0] if other else choices[0]
        return [("choice", [pick] if spec.is_list else pick)]
    vk = spec.value_kind
    if spec.kind == at.APPEND:
        return [("append", [["x1"], ["x2"]] if spec.nargs else ["x1", "x2"])]
    if vk == at.JSON:
        return [("json", {"k": 1})]
    if vk == at.INT:
        v = 1 if not isinstance(d, int) or isinstance(d, bool) or d <= 0 else d * 2
        if spec.nargs and spec.nargs.isdigit():  # a fixed count: that many, and one too few (refused)
            n = int(spec.nargs)
            return [("list", [v] * n), ("wrong_count", [v] * (n - 1))]
        return [("list" if spec.is_list else "int", [v, v] if spec.is_list else v)]
    if vk == at.FLOAT:
        v = 0.5 if not isinstance(d, (int, float)) or isinstance(d, bool) or d <= 0 else d / 2
        return [("list" if spec.is_list else "float", [v, v] if spec.is_list else v)]
    if vk == at.BOOL:  # type=bool store (argparse reads any non-empty token as True)
        return [("bool", True)]
    if vk == at.STR:
        name = spec.dest
        if name in PATH_DESTS or any(h in name for h in PATH_HINTS):  # absolute: a relative one is made absolute
            # from the cwd, and the run id with it, so the recording would differ between checkouts
            v = f"/DATA/{name}"
        else:
            v = "x"
        if spec.is_list:
            return [("list", [v, v + "2"] if spec.nargs != "1" else [v])]
        return [("path" if v.startswith("/") else "str", v)]
    return [("any", str(d) if d is not None else "1")]


def probes() -> list[Probe]:
    from trainstack.rules.range_rules import RANGES
    from trainstack.upstream.argtable import load_table

    table = load_table()
    out = []
    skip = excluded()
    for dest, spec in table.specs.items():
        if dest in skip:
            continue
        for case, value in values_of(spec):
            out.append(Probe(dest, case, value, base_of(dest)))
    for dest, r in RANGES.items():  # a value outside each range rule: trainstack refuses, slime parses
        bad = r.low - 1 if r.low > -1e300 else r.high + 1
        if isinstance(table[dest].default, int) or table[dest].value_kind == "int":
            bad = int(bad)
        out.append(Probe(dest, "out_of_range", bad, base_of(dest)))
    return out


def forced_render(base: str, probe: Probe, refusal: Judgement) -> Judgement:
    """A probe trainstack refuses while resolving (no argv): rendered anyway, faithfully (the base's
    resolved run with the probe's value put on its dest), so slime's parser can say whether the
    refusal is a false one."""
    from trainstack.config.resolve import normalise_append, resolve
    from trainstack.render.command import render
    from trainstack.upstream.argtable import load_table
    from trainstack_dev.oracle import _normalise, as_parsed

    cfg, origin = composed(base)
    run = resolve(cfg, origin)
    table = load_table()
    run.args[probe.dest] = normalise_append(table[probe.dest], probe.value)
    cmd = render(run)
    intended = {d: as_parsed(table[d], v) for d, v in run.args.items() if v is not None}
    return Judgement(refusal.overrides, False, refusal.rules, refusal.error_keys, _normalise(cmd.argv),
                     _normalise(cmd.redacted_env()), _normalise(intended))


def judge_probes(base: str, batch: list[Probe]) -> Judgement:
    """trainstack's judgement of a batch of probes on its base (a single probe refused while
    resolving: rendered anyway, see forced_render)."""
    j = judge([*BASES[base], *(p.override for p in batch)])
    if j.argv is None and len(batch) == 1:
        return forced_render(base, batch[0], j)
    return j


def refused_dests(j: Judgement) -> set[str]:
    """The dests trainstack's errors name (`args.foo[0]` -> foo)."""
    return {k.split(".", 1)[1].split("[")[0].split(".")[0] for k in j.error_keys if "." in k}


_COMPOSED: dict[str, tuple[Any, Any]] = {}


def composed(base: str) -> tuple[Any, Any]:
    """A base config as Hydra composes it (once per base), and a copy to change."""
    import copy

    from trainstack.render.golden import PLACEHOLDER_OVERRIDES
    from trainstack.render.pipeline import compose

    if base not in _COMPOSED:
        _COMPOSED[base] = compose([*PLACEHOLDER_OVERRIDES, *BASES[base]])
    cfg, origin = _COMPOSED[base]
    return copy.deepcopy(cfg), origin


def judge_on_base(base: str, overrides: list[str], skip: frozenset[str] = frozenset()) -> Judgement:
    """judge([*BASES[base], *overrides]) with the base composed by Hydra once: the overrides (all
    `key=value`, which trainstack turns into `++key=value`) are applied as Hydra's compose applies
    them. The recording uses judge(); the test compares this one's argv, env and rules with it."""
    import dataclasses

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from trainstack.config.overrides import normalise_argv
    from trainstack.config.resolve import CONF_DIR
    from trainstack.errors import ConfigErrors
    from trainstack_dev.oracle import judge_composed

    cfg, origin0 = composed(base)
    try:
        normalised = normalise_argv(list(overrides), str(CONF_DIR))
    except ConfigErrors as err:
        return Judgement([*BASES[base], *overrides], False, ["resolve"], sorted({e.key for e in err.errors}))
    ConfigLoaderImpl._apply_overrides_to_config(OverridesParser.create().parse_overrides(normalised), cfg)
    origin = dataclasses.replace(origin0, overrides=[*origin0.overrides, *normalised])
    return judge_composed(cfg, origin, [*BASES[base], *overrides], skip)


def rejudge(entry: dict, skip: frozenset[str] = frozenset()) -> Judgement:
    """trainstack's judgement of a recorded entry, now (fast path; forced render as recorded);
    `skip` leaves rules out (the mutation test)."""
    ps = [Probe(d, c, None, entry["base"]) for d, c, _ in entry["probes"]]
    j = judge_on_base(entry["base"], [o for _, _, o in entry["probes"]] + entry["env_overrides"], skip)
    if j.argv is None and len(ps) == 1:
        value = parse_override_value(entry["probes"][0][2])
        return forced_render(entry["base"], Probe(ps[0].dest, ps[0].case, value, entry["base"]), j)
    return j


def parse_override_value(override: str) -> Any:
    """The value Hydra reads from `key=value`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_override(override).value()
