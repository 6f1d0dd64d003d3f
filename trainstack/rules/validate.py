"""Cross-field rules slime, Megatron and SGLang enforce after parsing (and a few they should).

Each rule looks at the resolved dests and returns ConfigErrors naming every key involved, its
value and where it came from, with the fix. See docs/validation.md for the list and sources
(slime `slime_validate_args`, Megatron `validate_args`, SGLang checks, slime issues).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Sequence

from trainstack.config.backends import TINY_CAPABILITIES as TINY_CAPS
from trainstack.config.resolve import ResolvedRun, is_train_only
from trainstack.errors import ConfigError

Rule = Callable[["Ctx"], list[ConfigError]]
CORE_RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    CORE_RULES.append(fn)
    return fn


class _AllRules(Sequence[Rule]):
    """The core's rules, then the validate.rules hooks (upstream ports, features' blocks: trainstack.hooks),
    read when iterated so that importing this module loads no feature."""

    def _all(self) -> list[Rule]:
        from trainstack import hooks

        return [*CORE_RULES, *hooks.get(hooks.RULES)]

    def __getitem__(self, i):  # type: ignore[override]
        return self._all()[i]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._all())


RULES: Sequence[Rule] = _AllRules()


class Ctx:
    """Read access to a run's dests with slime's defaults and error helpers."""

    def __init__(self, run: ResolvedRun):
        from trainstack.upstream.argtable import load_table

        self.run = run
        self.table = load_table()

    def get(self, dest: str) -> Any:
        if dest in self.run.args:
            return self.run.args[dest]
        spec = self.table.get(dest)
        return None if spec is None or not spec.has_default else spec.default

    def is_set(self, dest: str) -> bool:
        return self.run.args.get(dest) is not None

    def key(self, dest: str) -> str:
        return self.run.key(dest)

    def err(self, dest: str, problem: str, fix: str, *others: str) -> ConfigError:
        return ConfigError(
            self.key(dest), problem, fix, value=self.get(dest), source=self.run.source(dest),
            related={f"{self.key(o)} ({self.run.source(o)})": self.get(o) for o in others})

    @property
    def train_only(self) -> bool:
        return is_train_only(self.run.args)

    @property
    def rollout_only(self) -> bool:
        return bool(self.get("debug_rollout_only"))

    @property
    def actor_gpus(self) -> int:
        return int(self.get("actor_num_nodes") or 1) * int(self.get("actor_num_gpus_per_node") or 1)

    @property
    def rollout_gpus(self) -> int | None:
        if self.train_only:
            return 0
        if self.get("rollout_num_gpus") is not None:
            return int(self.get("rollout_num_gpus"))
        if self.get("colocate"):
            return self.actor_gpus
        return None


def _pos_int(ctx: Ctx, dest: str) -> list[ConfigError]:
    v = ctx.get(dest)
    if v is not None and isinstance(v, int) and v <= 0:
        return [ctx.err(dest, "must be a positive integer", f"set {ctx.key(dest)} to a value >= 1")]
    return []


@rule
def required_and_positive(ctx: Ctx) -> list[ConfigError]:
    out = []
    if ctx.get("rollout_batch_size") is None:
        out.append(ConfigError("env.rollout_batch_size", "is required (slime's only required flag)",
                               "set env.rollout_batch_size (prompts per rollout)"))
    for d in ("rollout_batch_size", "n_samples_per_prompt", "global_batch_size", "num_rollout", "num_epoch",
              "num_steps_per_rollout", "micro_batch_size", "actor_num_nodes", "actor_num_gpus_per_node",
              "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
              "rollout_num_gpus_per_engine", "save_interval", "eval_interval", "max_tokens_per_gpu"):
        out += _pos_int(ctx, d)
    lr = ctx.get("lr")
    if isinstance(lr, (int, float)) and lr <= 0:
        out.append(ctx.err("lr", "learning rate must be > 0", "set a positive lr, e.g. algo.lr=1e-6"))
    return out


@rule
def rollout_length(ctx: Ctx) -> list[ConfigError]:
    if ctx.train_only or ctx.rollout_only:
        return []
    if ctx.get("num_rollout") is None and ctx.get("num_epoch") is None:
        return [ConfigError("env.num_rollout", "slime needs --num-rollout or --num-epoch to know when to stop",
                            "set env.num_rollout=N (rollouts) or env.num_epoch=N (passes over the data)")]
    return []


@rule
def epochs_need_global_dataset(ctx: Ctx) -> list[ConfigError]:
    if ctx.get("num_epoch") is not None and ctx.get("rollout_global_dataset") is False:
        return [ctx.err("num_epoch", "--num-epoch needs the global dataset, which is disabled",
                        "drop rollout_global_dataset=false or use num_rollout", "rollout_global_dataset")]
    if ctx.train_only and ctx.get("num_rollout") is None and ctx.get("num_epoch") is None:
        return [ConfigError("env.num_epoch", "a train-only run needs --num-epoch or --num-rollout",
                            "set env.num_epoch=N or env.num_rollout=N")]
    return []


@rule
def batch_arithmetic(ctx: Ctx) -> list[ConfigError]:
    """gbs counts samples; steps per rollout = rollout_batch_size * n_samples / gbs (slime#39, #2366)."""
    rbs, n = ctx.get("rollout_batch_size"), ctx.get("n_samples_per_prompt") or 1
    gbs, steps = ctx.get("global_batch_size"), ctx.get("num_steps_per_rollout")
    if not isinstance(rbs, int) or rbs <= 0 or not isinstance(n, int) or n <= 0:
        return []
    total = rbs * n
    if steps is not None and isinstance(steps, int) and steps > 0:
        if total % steps:
            return [ctx.err("num_steps_per_rollout", f"rollout_batch_size x n_samples_per_prompt = {total} samples "
                            f"cannot be split into {steps} equal steps", "choose a divisor of "
                            f"{total} for num_steps_per_rollout", "rollout_batch_size", "n_samples_per_prompt")]
        if gbs is not None and gbs != total // steps:
            return [ctx.err("global_batch_size", f"with num_steps_per_rollout={steps}, slime sets "
                            f"global_batch_size = {rbs} x {n} / {steps} = {total // steps}", "remove "
                            f"global_batch_size or set it to {total // steps}", "num_steps_per_rollout",
                            "rollout_batch_size", "n_samples_per_prompt")]
        return []
    if gbs is None:
        return [ConfigError("env.global_batch_size", "is required (or num_steps_per_rollout)",
                            f"set env.global_batch_size (a divisor of {total}) or env.num_steps_per_rollout",
                            related={"rollout_batch_size x n_samples_per_prompt": total})]
    if not isinstance(gbs, int) or gbs <= 0:
        return []
    if gbs > total:
        return [ctx.err("global_batch_size", f"is larger than the {total} samples one rollout produces "
                        f"(rollout_batch_size {rbs} x n_samples_per_prompt {n}): slime would train 0 steps",
                        f"set global_batch_size <= {total}, e.g. {total}", "rollout_batch_size", "n_samples_per_prompt")]
    if total % gbs:
        return [ctx.err("global_batch_size", f"does not divide the {total} samples per rollout; the remainder "
                        "would be dropped or break the step count", f"use a divisor of {total}",
                        "rollout_batch_size", "n_samples_per_prompt")]
    return []


@rule
def over_sampling(ctx: Ctx) -> list[ConfigError]:
    o, rbs = ctx.get("over_sampling_batch_size"), ctx.get("rollout_batch_size")
    if isinstance(o, int) and isinstance(rbs, int) and o < rbs:
        return [ctx.err("over_sampling_batch_size", "must be >= rollout_batch_size",
                        f"set it to at least {rbs}", "rollout_batch_size")]
    return []


@rule
def micro_batches(ctx: Ctx) -> list[ConfigError]:
    if ctx.get("use_dynamic_batch_size") or ctx.run.cluster.backend == "tiny":
        return []
    gbs, mbs = ctx.get("global_batch_size"), ctx.get("micro_batch_size") or 1
    tp, pp, cp = (int(ctx.get(d) or 1) for d in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                  "context_parallel_size"))
    if not isinstance(gbs, int) or ctx.actor_gpus % (tp * pp * cp):
        return []
    dp = ctx.actor_gpus // (tp * pp * cp)
    if gbs % (mbs * dp):
        return [ctx.err("global_batch_size", f"must be divisible by micro_batch_size x data-parallel size "
                        f"= {mbs} x {dp} (Megatron asserts this)", f"use a multiple of {mbs * dp}, or "
                        "use_dynamic_batch_size=true", "micro_batch_size")]
    return []


@rule
def dynamic_batch(ctx: Ctx) -> list[ConfigError]:
    out = []
    if ctx.get("use_dynamic_batch_size") and ctx.get("max_tokens_per_gpu") is None:
        out.append(ctx.err("use_dynamic_batch_size", "dynamic batching needs a token budget",
                           "set args.max_tokens_per_gpu (e.g. 9216)"))
    if ctx.get("balance_by_flops") and not ctx.get("use_dynamic_batch_size"):
        out.append(ctx.err("balance_by_flops", "needs use_dynamic_batch_size", "set args.use_dynamic_batch_size=true"))
    return out


@rule
def temperature(ctx: Ctx) -> list[ConfigError]:
    t = ctx.get("rollout_temperature")
    if isinstance(t, (int, float)) and t <= 0:
        return [ctx.err("rollout_temperature", "must be > 0 (slime#2297)", "use a positive temperature, e.g. 1.0")]
    return []


@rule
def kl(ctx: Ctx) -> list[ConfigError]:
    out = []
    kl_coef, use_kl_loss = ctx.get("kl_coef") or 0, ctx.get("use_kl_loss")
    if (kl_coef or use_kl_loss) and not ctx.is_set("ref_load"):
        cause = "use_kl_loss" if use_kl_loss else "kl_coef"
        out.append(ctx.err(cause, "KL against a reference model needs --ref-load", "set model.ref_load to the "
                           "reference checkpoint (torch_dist), or turn KL off", "ref_load"))
    if kl_coef and ctx.get("kl_loss_coef"):
        out.append(ctx.err("kl_coef", "kl_coef and kl_loss_coef cannot both be non-zero",
                           "use one KL form: reward KL (kl_coef) or loss KL (kl_loss_coef)", "kl_loss_coef"))
    return out


@rule
def estimators(ctx: Ctx) -> list[ConfigError]:
    out = []
    est = ctx.get("advantage_estimator")
    if est in ("reinforce_plus_plus", "reinforce_plus_plus_baseline") and not ctx.get("normalize_advantages"):
        out.append(ctx.err("advantage_estimator", f"{est} needs normalized advantages",
                           "set algo.normalize_advantages=true", "normalize_advantages"))
    if ctx.get("use_rollout_logprobs") and ctx.get("use_tis"):
        out.append(ctx.err("use_tis", "cannot be combined with use_rollout_logprobs", "drop one of them",
                           "use_rollout_logprobs"))
    if ctx.get("get_mismatch_metrics") and not ctx.is_set("custom_tis_function_path"):
        out.append(ctx.err("get_mismatch_metrics", "needs custom_tis_function_path",
                           "set args.custom_tis_function_path"))
    if ctx.get("use_opd") and not ctx.is_set("opd_type"):
        out.append(ctx.err("use_opd", "on-policy distillation needs opd_type", "set args.opd_type"))
    if ctx.is_set("opd_teacher_load") and not ctx.get("use_opd"):
        out.append(ctx.err("opd_teacher_load", "is set but use_opd is off", "set args.use_opd=true or drop it"))
    return out


@rule
def eval_settings(ctx: Ctx) -> list[ConfigError]:
    out = []
    data = ctx.get("eval_prompt_data")
    if isinstance(data, list) and len(data) > 1 and len(data) % 2:
        out.append(ctx.err("eval_prompt_data", "takes name/path pairs; got an odd number of values",
                           "write [name1, path1, name2, path2, ...]"))
    if ctx.get("eval_interval") is not None and not data and not ctx.is_set("eval_config"):
        out.append(ctx.err("eval_interval", "evaluation is scheduled but there is no eval data",
                           "set env.eval_prompt_data=[name,path] or drop eval_interval"))
    return out


@rule
def checkpointing(ctx: Ctx) -> list[ConfigError]:
    """Warns only: --save is always the run's checkpoint dir (resolve refuses args.save), and --save
    without save_interval is upstream_rules.save_cadence."""
    out: list[ConfigError] = []
    if ctx.get("no_save_optim"):
        ctx.run.warnings.append("no_save_optim=true: checkpoints will not hold optimizer state, so a resume "
                                "is not exact")
    return out


@rule
def wandb(ctx: Ctx) -> list[ConfigError]:
    if ctx.get("use_wandb") and not ctx.is_set("wandb_group"):
        return [ctx.err("use_wandb", "slime needs --wandb-group with --use-wandb (it builds the run name from it)",
                        "set args.wandb_group=<name>")]
    return []


@rule
def modes(ctx: Ctx) -> list[ConfigError]:
    out = []
    if ctx.get("debug_rollout_only") and ctx.get("debug_train_only"):
        out.append(ctx.err("debug_train_only", "cannot be combined with debug_rollout_only", "pick one",
                           "debug_rollout_only"))
    if ctx.run.entrypoint == "train_async.py" and ctx.get("colocate"):
        out.append(ConfigError("cluster.colocate", "train_async.py does not support colocated training and rollout",
                               "set cluster.colocate=false, or use slime.entrypoint=train.py",
                               value=True, related={"entrypoint": ctx.run.entrypoint}))
    exclusive = [d for d in ("prefill_num_servers", "sglang_config", "rollout_external_engine_addrs") if ctx.is_set(d)]
    if len(exclusive) > 1:
        out.append(ctx.err(exclusive[0], "these options are mutually exclusive", "keep only one", *exclusive[1:]))
    dp = ctx.get("sglang_dp_size")
    if isinstance(dp, int) and dp > 1 and not ctx.get("sglang_enable_dp_attention"):
        out.append(ctx.err("sglang_dp_size", "SGLang data parallelism needs DP attention",
                           "set args.sglang_enable_dp_attention=true", "sglang_enable_dp_attention"))
    return out


@rule
def parallel_layout(ctx: Ctx) -> list[ConfigError]:
    if ctx.run.cluster.backend == "tiny":
        return []
    out = []
    tp, pp, cp = (int(ctx.get(d) or 1) for d in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                  "context_parallel_size"))
    world = ctx.actor_gpus
    if world % (tp * pp * cp):
        out.append(ctx.err("tensor_model_parallel_size", f"training world size {world} (actor_num_nodes x "
                           f"actor_num_gpus_per_node) is not divisible by TP x PP x CP = {tp}x{pp}x{cp} = {tp * pp * cp}",
                           f"choose TP/PP/CP whose product divides {world}, or change the GPU count",
                           "pipeline_model_parallel_size", "context_parallel_size", "actor_num_nodes",
                           "actor_num_gpus_per_node"))
    layers = ctx.get("num_layers")
    uneven = ctx.is_set("decoder_first_pipeline_num_layers") or ctx.is_set("decoder_last_pipeline_num_layers")
    # Megatron arguments.py:564-570 counts the embedding and the loss as a layer each when asked to
    counted = [d for d in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split") if ctx.get(d)]
    if isinstance(layers, int) and pp > 1 and (layers + len(counted)) % pp and not uneven:
        out.append(ctx.err("pipeline_model_parallel_size", f"num_layers {layers}{''.join(f' + 1 ({d})' for d in counted)} "
                           f"is not divisible by pipeline-parallel size {pp}", "pick a PP size that divides the layer "
                           "count, or set decoder_first/last_pipeline_num_layers", "num_layers", *counted))
    ep, experts = int(ctx.get("expert_model_parallel_size") or 1), ctx.get("num_experts")
    if isinstance(experts, int) and experts % ep:
        out.append(ctx.err("expert_model_parallel_size", f"{experts} experts cannot be split over EP={ep}",
                           "use an EP size that divides num_experts", "num_experts"))
    heads = ctx.get("num_attention_heads")
    if isinstance(heads, int) and heads % tp:
        out.append(ctx.err("tensor_model_parallel_size", f"{heads} attention heads cannot be split over TP={tp}",
                           "use a TP size that divides num_attention_heads", "num_attention_heads"))
    return out


@rule
def gpu_budget(ctx: Ctx) -> list[ConfigError]:
    """GPUs asked for fit the cluster; rollout GPUs split evenly into engines. Only the trainer's total
    counts: slime places one-GPU bundles (ray/placement_group.py:47-48) for actor_num_nodes x
    actor_num_gpus_per_node GPUs (:101), so 1 x 12 on two nodes of 8 runs (docs/validation.md)."""
    out = []
    c = ctx.run.cluster
    if ctx.actor_gpus > c.total_gpus:
        dest = "actor_num_nodes" if ctx.run.source("actor_num_nodes").startswith(("command line", "conf/")) and \
            not ctx.run.source("actor_num_gpus_per_node").startswith(("command line", "conf/")) else "actor_num_gpus_per_node"
        other = "actor_num_gpus_per_node" if dest == "actor_num_nodes" else "actor_num_nodes"
        return [ctx.err(dest, f"the trainer needs actor_num_nodes x actor_num_gpus_per_node = {ctx.actor_gpus} GPUs "
                        f"but cluster={c.name} has {c.total_gpus}", "lower the GPU counts, or use a bigger cluster",
                        other)]
    rollout = ctx.rollout_gpus
    if not ctx.train_only and not ctx.rollout_only and rollout is None and not ctx.is_set("rollout_external_engine_addrs"):
        out.append(ctx.err("rollout_num_gpus", "training and rollout are not colocated and no GPUs are given to "
                           "SGLang", "set cluster.rollout_num_gpus=N or cluster.colocate=true", "colocate"))
    if rollout:
        per_engine = int(ctx.get("rollout_num_gpus_per_engine") or 1)
        if rollout % per_engine:
            out.append(ctx.err("rollout_num_gpus_per_engine", f"{rollout} rollout GPUs cannot be split into engines "
                               f"of {per_engine} GPUs", f"use an engine size that divides {rollout}",
                               "rollout_num_gpus"))
        if per_engine > c.gpus_per_node and per_engine % c.gpus_per_node:
            out.append(ctx.err("rollout_num_gpus_per_engine", "a multi-node engine must span whole nodes",
                               f"use a multiple of {c.gpus_per_node}"))
        need = max(ctx.actor_gpus, rollout) if ctx.get("colocate") else ctx.actor_gpus + rollout
        if need > c.total_gpus:
            how = "max(actor, rollout)" if ctx.get("colocate") else "actor + rollout"
            out.append(ctx.err("rollout_num_gpus", f"the run needs {need} GPUs ({how}) but cluster={c.name} has "
                               f"{c.total_gpus}", "lower the GPU counts or use a bigger cluster",
                               "actor_num_nodes", "actor_num_gpus_per_node"))
    return out


@rule
def model_paths(ctx: Ctx) -> list[ConfigError]:
    """slime backend: SGLang serves --hf-checkpoint; fresh runs start from --ref-load."""
    if ctx.run.cluster.backend != "slime":
        return []
    out = []
    if not ctx.is_set("hf_checkpoint") and not ctx.train_only:
        out.append(ConfigError("model.hf_checkpoint", "is required: SGLang serves it and slime reads its tokenizer "
                               "and config.json", "set model.hf_checkpoint=/path/to/hf/model"))
    if not ctx.is_set("ref_load") and not ctx.is_set("hf_checkpoint"):
        out.append(ConfigError("model.ref_load", "a fresh run has no initial weights (neither --ref-load nor "
                               "--hf-checkpoint)", "set model.ref_load to the torch_dist conversion"))
    if not ctx.is_set("prompt_data") and not ctx.is_set("load_debug_rollout_data"):
        out.append(ConfigError("env.prompt_data", "is required: the rollout has no prompts",
                               "set env.prompt_data=/path/to/prompts.jsonl"))
    return out


@rule
def colocate_offload(ctx: Ctx) -> list[ConfigError]:
    """Warns only: slime turns training offload back on for PPO (utils/arguments.py:1909, :1961-1962:
    `use_critic` -> `offload_train = True`), so the run goes ahead with offload."""
    if ctx.get("offload_train") is False and ctx.get("advantage_estimator") == "ppo":
        ctx.run.warnings.append("offload_train=false with PPO: slime turns training offload back on for a critic "
                                "(slime utils/arguments.py:1961-1962), so the run offloads anyway")
    return []


@rule
def lease_settings(ctx: Ctx) -> list[ConfigError]:
    """A TTL of 0 would let any second launch take over a live run; a TTL too short for the grace
    period would have the guard stop a healthy trainer (it stops it grace + margin before expiry)."""
    from trainstack.fencing.fence import min_lease_ttl

    out = []
    ttl, grace = ctx.run.resume.lease_ttl_s, ctx.run.resume.grace_s
    grace_ok = isinstance(grace, (int, float)) and math.isfinite(grace) and grace >= 0
    if not grace_ok:
        out.append(ConfigError("resume.grace_s", "must be a finite number of seconds >= 0",
                               "use the default 30", value=grace))
    floor = min_lease_ttl(grace if grace_ok else 0.0)
    if not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl < floor:
        out.append(ConfigError("resume.lease_ttl_s", f"must be a finite number of seconds >= {floor:g} = 3 x "
                               "(resume.grace_s + 2): the lease is renewed every ttl/4, and a trainer is stopped "
                               "(with its grace period) before its lease can expire, so no second launch can take "
                               "over a live run", f"use the default 120, or at least {floor:g}", value=ttl))
    return out


TINY_CAPABILITIES = TINY_CAPS  # the same object the tiny trainer checks against


@rule
def tiny_backend(ctx: Ctx) -> list[ConfigError]:
    """The CPU backend trains small transformers with policy-gradient losses only."""
    if ctx.run.cluster.backend != "tiny":
        return []
    out = []
    model = ctx.run.meta.get("model", {})
    params = model.get("params")
    if params is None:
        h, layers = ctx.get("hidden_size") or 0, ctx.get("num_layers") or 0
        params = 12 * layers * h * h
    if TINY_CAPABILITIES.max_params is not None and params > TINY_CAPABILITIES.max_params:
        out.append(ConfigError("model", f"cluster={ctx.run.cluster.name} runs the tiny CPU trainer, which cannot "
                               f"train a {params / 1e9:.2f}B-parameter model", "use model=tiny, or a GPU cluster "
                               "(cluster=local_8xh100, slurm_8xh100, lium_8xh100)",
                               value=model.get("name"), source=ctx.run.origin.group_file("model")))
    est = ctx.get("advantage_estimator")
    if est not in TINY_CAPABILITIES.estimators:
        out.append(ctx.err("advantage_estimator",
                           f"the tiny CPU trainer implements {', '.join(TINY_CAPABILITIES.estimators)}",
                           "pick one of those algos, or a GPU cluster"))
    if ctx.get("loss_type") not in (None, *TINY_CAPABILITIES.loss_types):
        out.append(ctx.err("loss_type", "the tiny CPU trainer only implements the policy loss",
                           "use an RL algo (algo=grpo), or a GPU cluster"))
    return out


@rule
def model_backend(ctx: Ctx) -> list[ConfigError]:
    """A model preset may name the trainers that can train it (`meta.backends`): the tiny model has no
    Hugging Face weights for SGLang or Megatron, so slime on a GPU cluster would fail after the pods bill."""
    model = ctx.run.meta.get("model", {})
    allowed = model.get("backends")
    backend = ctx.run.cluster.backend
    if not isinstance(allowed, (list, tuple)) or not allowed or backend in allowed:
        return []
    who = "the tiny CPU trainer" if list(allowed) == ["tiny"] else f"backend {', '.join(map(str, allowed))}"
    return [ConfigError("model", f"model={model.get('name')} can only be trained by {who}; "
                        f"cluster={ctx.run.cluster.name} runs {backend}",
                        "pick a Hugging Face model preset for the GPU cluster (e.g. model=qwen3-0.6B, conf/model/), "
                        "or a CPU cluster (cluster=local_cpu)",
                        value=model.get("name"), source=ctx.run.origin.group_file("model"))]


def validate(run: ResolvedRun) -> list[ConfigError]:
    ctx = Ctx(run)
    errors: list[ConfigError] = []
    for r in RULES:
        errors += r(ctx)
    return errors


# Dotted paths into a plugin package trainstack renamed (trainstack/rules/plugin_paths.py, RENAMED).
from trainstack.rules.plugin_paths import renamed_plugin_paths  # noqa: E402

CORE_RULES.append(renamed_plugin_paths)
