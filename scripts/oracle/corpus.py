"""Build the slime-parse oracle corpus and write trainstack's side of it.

    python scripts/oracle/corpus.py render OUT.json     # corpus -> trainstack verdict + argv per entry
    python scripts/oracle/corpus.py record RENDERED.json VERDICTS.json   # merge slime's verdicts into
                                                          # tests/oracle/slime_parse_oracle.json
    python scripts/oracle/corpus.py retrack               # re-judge trainstack's column only

`make oracle` runs both around scripts/oracle/real_parse.py (slime's real parser). The corpus is
deterministic (fixed seed): every experiment; every model preset with each algo on the first
cluster it fits; random combinations; user overrides of every argparse action kind; and configs
that trip each validator rule.
"""
from __future__ import annotations

import json
import random
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "devtools")]  # trainstack_dev (the oracle's judge) is not installed

from trainstack_dev.oracle import ORACLE_PATH, judge, write_oracle  # noqa: E402

SEED = 20261122
GPU_CLUSTERS = ["cluster=local_1xh100", "cluster=local_8xh100", *(
    f"cluster=slurm_8xh100 cluster.num_nodes={n}" for n in (2, 4, 8, 16, 32, 64))]
RL_BASE = ["experiment=qwen3-4B-grpo-dapo"]
Q32_PP4 = ["model=qwen3-32B", "cluster=slurm_8xh100", "cluster.num_nodes=2", "model.tensor_model_parallel_size=4",
           "model.pipeline_model_parallel_size=4"]
DSV3_16 = ["model=deepseek-v3", "cluster=slurm_8xh100", "cluster.num_nodes=16"]
NO_RECOMPUTE = ["args.recompute_granularity=null", "args.recompute_method=null", "args.recompute_num_layers=null"]
SFT_BASE = ["experiment=qwen3-4B-base-sft"]

# One entry per argparse action kind and value shape a user writes (on the GRPO recipe unless noted).
ACTION_CASES: dict[str, list[str]] = {
    "store_true/on": ["args.calculate_per_token_loss=true"],
    "store_true/off": ["args.rollout_shuffle=false"],
    "store_true/sglang": ["args.sglang_enable_metrics=true"],
    "store_true/no_save_optim": ["args.no_save_optim=true"],
    "store_true/release_train_disk_sync": ["args.release_train=true", "args.update_weight_transport=disk",
                                           "args.update_weight_disk_dir=/RUNS/w"],
    "store_false/off": ["args.rollout_global_dataset=false"],
    "store_false/on": ["args.rollout_global_dataset=true"],
    "store_false/megatron": ["args.gradient_accumulation_fusion=false"],
    "store_false/masked_softmax": ["args.masked_softmax_fusion=false"],
    "two_actions/enable_chunked_prefill": ["args.disable_chunked_prefill=false"],
    "two_actions/disable_chunked_prefill": ["args.disable_chunked_prefill=true"],
    "tristate/offload_train_false": ["args.offload_train=false"],
    "tristate/offload_train_true": ["args.offload_train=true"],
    "tristate/offload_rollout_false": ["args.offload_rollout=false"],
    "tristate/offload_null": ["args.offload_train=null"],
    "tristate/megatron_rl": ["args.rl_use_sequence_packing=true"],
    "nargs/rollout_stop": ["args.rollout_stop=['</answer>','<|im_end|>']"],
    "nargs/stop_token_ids": ["args.rollout_stop_token_ids=[151643,151645]"],
    "nargs/eval_pairs": ["env.eval_prompt_data=[aime,/DATA/aime.jsonl,math500,/DATA/math500.jsonl]"],
    "nargs/eval_single": ["env.eval_prompt_data=[/DATA/aime.jsonl]"],
    "nargs/freeze": ["args.freeze_params_name_list=[embedding]"],
    "nargs/only_train": ["args.only_train_params_name_list=[decoder]"],
    "nargs/aux_loss": ["args.moe_aux_loss_coeff=[0.001]"],
    "nargs/star_router_headers": ["args.router_request_id_headers=[x-request-id]"],
    "append/sample_hook": ["args.rollout_sample_hook_path=[my_hooks.a,my_hooks.b]"],
    "json/train_env_vars": ["args.train_env_vars={A:'1',B:'two'}"],
    "json/chat_template_kwargs": ["args.apply_chat_template_kwargs={enable_thinking:false}"],
    "json/sglang_sampling": ["args.sglang_preferred_sampling_params={temperature:0.7}"],
    "choices/kl_loss_type": ["args.kl_loss_type=k3"],
    "choices/sglang_attention": ["args.sglang_attention_backend=fa3"],
    "choices/advantage": ["algo.advantage_estimator=gspo"],
    "choices/lr_decay": ["algo.lr_decay_style=cosine", "args.min_lr=1e-7"],
    "number/negative_sci": ["args.entropy_coef=-0.00001"],
    "number/negative_tiny": ["args.entropy_coef=-1e-30"],
    "number/negative_int": ["args.rollout_top_k=-1"],
    "number/sci_lr": ["algo.lr=3e-6"],
    "number/negative_float": ["args.entropy_coef=-0.5"],
    "number/big_int": ["args.seed=123456789"],
    "sglang/mem_fraction": ["args.sglang_mem_fraction_static=0.55"],
    "sglang/cuda_graph_bs": ["args.sglang_cuda_graph_max_bs_decode=64"],
    "sglang/dp_attention": ["args.sglang_enable_dp_attention=true", "args.sglang_dp_size=2"],
    "sglang/server_concurrency": ["args.sglang_server_concurrency=256"],
    "sglang/router_ip": ["args.sglang_router_port=30000"],
    "router/balance": ["args.router_balance_abs_threshold=5"],
    "router/policy": ["args.router_policy=round_robin"],
    "router/prefill_append": ["args.router_prefill=[http://10.0.0.1:30000]"],
    "router/prefill_append_pairs": ["args.router_prefill=[[http://10.0.0.1:30000,8998],[http://10.0.0.2:30000]]"],
    "router/decode_append": ["args.router_decode=[http://10.0.0.3:30000,http://10.0.0.4:30000]"],
    "layout/tp16_two_nodes": ["cluster=slurm_8xh100", "cluster.num_nodes=2", "model.tensor_model_parallel_size=16"],
    "layout/seq_parallel_tp1": ["model.tensor_model_parallel_size=1", "model.sequence_parallel=true"],
    "layout/pp2_uneven_first_stage": ["model.pipeline_model_parallel_size=2", "args.decoder_first_pipeline_num_layers=20"],
    "megatron/recompute": ["args.recompute_granularity=selective", "args.recompute_method=null",
                           "args.recompute_num_layers=null"],
    "megatron/clip_grad": ["args.clip_grad=0.5"],
    "slime/eps_clip": ["algo.eps_clip=0.1", "algo.eps_clip_high=0.3"],
    "slime/dynamic_batch": ["args.use_dynamic_batch_size=true", "args.max_tokens_per_gpu=4096"],
    "slime/steps_per_rollout": ["env.global_batch_size=null", "args.num_steps_per_rollout=4"],
    "slime/save_interval": ["args.save_interval=5"],
    "slime/num_epoch": ["env.num_rollout=null", "args.num_epoch=2"],
    "sft/dropped_preset_sglang": [*SFT_BASE[1:], "model=qwen3-30B-A3B", "cluster.num_nodes=1"],
    "str/leading_dash": ["args.wandb_group=-grp"],
    # issue #24: what users type, each kind once, where trainstack refused it or could not land it
    "placement/rollout_part_of_node": ["cluster=slurm_8xh100", "cluster.num_nodes=2", "cluster.colocate=false",
                                       "cluster.rollout_num_gpus=12"],
    "placement/rollout_gpus_under_args": ["cluster.colocate=false", "args.rollout_num_gpus=4"],
    "placement/async_separate_gpus": ["slime.entrypoint=train_async.py", "cluster.colocate=false",
                                      "cluster.rollout_num_gpus=4"],
    # issue #33: slime turns offload back on for PPO (utils/arguments.py:1961-1962); trainstack warns, accepts
    "slime/ppo_offload_false": ["algo=ppo", "args.offload_train=false"],
    "alias/sglang_cuda_graph_bs": ["args.sglang_cuda_graph_bs=[1,2,4,8,16]"],
    "env/null_removes_variable": ["runtime_env.env_vars.PYTORCH_CUDA_ALLOC_CONF=null"],
    "env/value": ["runtime_env.env_vars.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"],
    "store_true/megatron_none_false": ["args.no_load_optim=false", "args.use_cpu_initialization=false"],
    "store_true/sglang_multimodal_on": ["args.sglang_enable_multimodal=true"],
    "optimizer/offload_with_precision_aware": ["args.optimizer_cpu_offload=true",
                                               "args.use_precision_aware_optimizer=true"],
    "optimizer/sgd": ["algo.optimizer=sgd"],
    "optimizer/cosine_weight_decay": ["args.weight_decay_incr_style=cosine", "args.start_weight_decay=0.0",
                                      "args.end_weight_decay=0.1"],
    "vpp/even_stages": [*Q32_PP4, "args.num_layers_per_virtual_pipeline_stage=8"],
    "vpp/uneven_stages": [*Q32_PP4, "args.decoder_first_pipeline_num_layers=14",
                          "args.decoder_last_pipeline_num_layers=14", "args.num_virtual_stages_per_pipeline_rank=2"],
    "pp/uneven_last_stage": [*Q32_PP4, "args.decoder_last_pipeline_num_layers=16"],
    "moe/etp2": ["model=qwen3-30B-A3B", "model.expert_model_parallel_size=4", "args.expert_tensor_parallel_size=2"],
    "moe/a2a_overlap": ["model=qwen3-30B-A3B", "args.overlap_moe_expert_parallel_comm=true", *NO_RECOMPUTE],
    "cp/cp2": ["model.context_parallel_size=2"],
}

# Configs that trip a rule (slime, Megatron or SGLang would refuse them, or trainstack's extra
# checks do). Each is a list of overrides on RL_BASE unless it starts with "experiment=".
INVALID_CASES: dict[str, list[str]] = {
    "min_lr_above_lr": ["algo.lr=1e-6", "args.min_lr=1e-5"],
    "last_stage_layers_pp1": ["args.decoder_last_pipeline_num_layers=8"],
    "first_stage_layers_pp1": ["args.decoder_first_pipeline_num_layers=8"],
    "mtp_without_layers": ["args.enable_mtp_training=true"],
    "only_train_and_freeze": ["args.only_train_params_name_list=[decoder]", "args.freeze_params_name_list=[embedding]"],
    "prompt_len_not_below_context": ["args.rollout_max_context_len=4096", "args.rollout_max_prompt_len=4096"],
    "allgather_cp_dense": ["args.allgather_cp=true", "model.context_parallel_size=2"],
    "ep16_on_8_gpus": ["model=qwen3-30B-A3B", "model.expert_model_parallel_size=16"],
    "sglang_in_train_only": [*SFT_BASE, "args.sglang_mem_fraction_static=0.8"],
    "router_in_train_only": [*SFT_BASE, "args.router_balance_abs_threshold=4"],
    "save_interval_null": ["args.save_interval=null"],
    "temperature_zero": ["env.rollout_temperature=0.0"],
    "kl_without_ref": ["algo.kl_coef=0.1", "model.ref_load=null"],
    "kl_loss_without_ref": ["algo.use_kl_loss=true", "algo.kl_loss_coef=0.01", "model.ref_load=null"],
    "kl_both": ["algo.kl_coef=0.1", "algo.kl_loss_coef=0.1"],
    "rpp_without_norm": ["algo=reinforce_plus_plus", "args.normalize_advantages=false"],
    "tis_and_rollout_logprobs": ["args.use_tis=true", "args.use_rollout_logprobs=true"],
    "mismatch_without_tis_fn": ["args.get_mismatch_metrics=true"],
    "opd_without_type": ["args.use_opd=true"],
    "opd_teacher_without_opd": ["args.opd_teacher_load=/MODELS/teacher"],
    "eval_odd_pairs": ["env.eval_prompt_data=[a,/DATA/a.jsonl,b]"],
    "eval_interval_without_data": ["env.eval_prompt_data=null"],
    "train_only_and_rollout_only": ["args.debug_train_only=true", "args.debug_rollout_only=true"],
    "dp_without_dp_attention": ["args.sglang_dp_size=2"],
    "prefill_servers_and_sglang_config": ["args.prefill_num_servers=1", "args.sglang_config=/DATA/sglang.yaml"],
    "gbs_not_dividing": ["env.global_batch_size=100"],
    "gbs_above_samples": ["env.global_batch_size=512"],
    "steps_vs_gbs": ["args.num_steps_per_rollout=3"],
    "oversampling_below_rbs": ["args.over_sampling_batch_size=16"],
    "dynamic_without_budget": ["args.use_dynamic_batch_size=true", "args.max_tokens_per_gpu=null"],
    "flops_without_dynamic": ["args.balance_by_flops=true", "args.use_dynamic_batch_size=false"],
    "tp_not_dividing_world": ["model.tensor_model_parallel_size=3"],
    "heads_not_dividing_tp": ["model=qwen2.5-0.5B", "model.tensor_model_parallel_size=4"],
    "recompute_selective_with_method": ["args.recompute_granularity=selective"],
    "layers_not_dividing_pp": ["model.pipeline_model_parallel_size=8", "model.tensor_model_parallel_size=1"],
    "experts_not_dividing_ep": ["model=qwen3-30B-A3B", "model.expert_model_parallel_size=3"],
    "gpus_above_cluster": ["args.actor_num_gpus_per_node=16"],
    "engine_not_dividing_rollout": ["args.rollout_num_gpus_per_engine=3"],
    "no_rollout_length": ["env.num_rollout=null"],
    "no_rollout_batch_size": ["env.rollout_batch_size=null"],
    "negative_rollout_batch_size": ["env.rollout_batch_size=-32"],
    "zero_lr": ["algo.lr=0.0"],
    "negative_lr": ["algo.lr=-1e-6"],
    "epoch_without_global_dataset": ["env.num_rollout=null", "args.num_epoch=2", "args.rollout_global_dataset=false"],
    "micro_batch_not_dividing": ["model.use_dynamic_batch_size=false", "args.micro_batch_size=3"],
    "release_train_without_save": ["args.release_train=true", "args.save=null"],
    "release_train_nccl_sync": ["args.release_train=true"],
    "disk_sync_without_dir": ["args.update_weight_transport=disk"],
    "delta_sync_colocated": ["args.update_weight_mode=delta", "args.update_weight_transport=disk",
                             "args.update_weight_disk_dir=/RUNS/w", "args.update_weight_local_checkpoint_dir=/tmp/w"],
    "wandb_without_group": ["args.use_wandb=true", "args.wandb_group=null"],
    "separate_gpus_without_rollout": ["cluster.colocate=false"],
    "no_hf_checkpoint": ["model.hf_checkpoint=null"],
    "no_prompt_data": ["env.prompt_data=null"],
    "negative_n_samples": ["env.n_samples_per_prompt=0"],
    "zero_save_interval": ["args.save_interval=0"],
    "zero_eval_interval": ["env.eval_interval=0"],
    "pp_uneven_layers_too_many": ["model.pipeline_model_parallel_size=2", "args.decoder_first_pipeline_num_layers=40"],
    "sglang_pp_not_dividing_engine": ["args.sglang_pp_size=3"],
    "dump_details_same_templates": ["args.dump_details=/RUNS/dump", "args.save_debug_rollout_data=/x/{rollout_id}.pt",
                                    "args.save_debug_train_data=/x/{rollout_id}.pt"],
    "mtp_training_zero_layers": ["args.enable_mtp_training=true", "args.mtp_num_layers=0"],
    "hidden_not_divisible_by_heads": ["model.hidden_size=2500", "model.kv_channels=null"],
    "cp_seq_length": ["model.context_parallel_size=2", "args.seq_length=4098"],
    "positions_below_seq_length": ["args.seq_length=8192", "args.max_position_embeddings=4096"],
    "distribute_saved_activations_tp1": ["model.tensor_model_parallel_size=1", "args.distribute_saved_activations=true"],
    "tp_comm_overlap_without_sp": ["model.tensor_model_parallel_size=1", "args.tp_comm_overlap=true"],
    "overlap_param_gather_without_grad": ["args.overlap_param_gather=true", "args.overlap_grad_reduce=false"],
    "ep_on_dense_model": ["model.expert_model_parallel_size=2"],
    "deterministic_with_fused_ce": ["experiment=qwen2.5-0.5B-reproducibility", "args.cross_entropy_loss_fusion=true"],
    "deterministic_without_nccl_algo": ["experiment=qwen2.5-0.5B-reproducibility", "runtime_env.env_vars.NCCL_ALGO=Auto"],
    "cuda_connections_override": ["runtime_env.env_vars.CUDA_DEVICE_MAX_CONNECTIONS=8"],
    # issue #24: Megatron's validate_args and TransformerConfig, slime's defaults feeding them
    "optimizer_offload_without_precision_aware": ["args.optimizer_cpu_offload=true"],
    "moe_precision_aware_off": ["model=qwen3-30B-A3B", "args.use_precision_aware_optimizer=false"],
    "muon": ["algo.optimizer=muon"],
    "dist_muon": ["algo.optimizer=dist_muon"],
    "cosine_weight_decay_without_ends": ["args.weight_decay_incr_style=cosine"],
    "start_weight_decay_constant": ["args.start_weight_decay=0.0"],
    "vpp_layers_with_uneven_stages": [*DSV3_16, "args.num_layers_per_virtual_pipeline_stage=2"],
    "vpp_two_ways": [*Q32_PP4, "args.num_layers_per_virtual_pipeline_stage=4",
                     "args.num_virtual_stages_per_pipeline_rank=4"],
    "vpp_layers_not_dividing_stage": [*Q32_PP4, "args.num_layers_per_virtual_pipeline_stage=5"],
    "vpp_pp2_without_p2p_overlap": ["model.pipeline_model_parallel_size=2",
                                    "args.num_virtual_stages_per_pipeline_rank=2", "args.overlap_p2p_comm=false"],
    "pp_last_stage_leaves_middle_uneven": [*Q32_PP4, "args.decoder_last_pipeline_num_layers=14"],
    "pp_uneven_stage_not_dividing_vpp": [*Q32_PP4, "args.decoder_first_pipeline_num_layers=15",
                                         "args.decoder_last_pipeline_num_layers=13",
                                         "args.num_virtual_stages_per_pipeline_rank=2"],
    "moe_a2a_overlap_full_recompute": ["model=qwen3-30B-A3B", "args.overlap_moe_expert_parallel_comm=true"],
    "sglang_multimodal_false": ["args.sglang_enable_multimodal=false"],
    "sglang_lora_false": ["args.sglang_enable_lora=false"],
    "sglang_removed_option": ["args.sglang_collect_tokens_histogram=true"],
    "cuda_connections_removed": ["runtime_env.env_vars.CUDA_DEVICE_MAX_CONNECTIONS=null"],
    "lease_ttl_too_short": ["resume.lease_ttl_s=1"],
    "tiny_backend_4b_model": ["cluster=local_cpu", "args.rollout_num_gpus_per_engine=1"],
    # issue #25: the tiny model has no Hugging Face weights; slime's parser takes its flags (validate.model_backend)
    "tiny_model_on_slime": ["experiment=cpu-agentic", "cluster=lium_8xh100"],
    "renamed_plugin_path": ["args.custom_generate_function_path=plugins.http_env.generate.generate"],
    # issue #20: slime asserts top-p ids a custom generate function does not fill (upstream_rules)
    "custom_generate_top_p": ["args.custom_generate_function_path=trainstack_plugins.http_env.generate.generate",
                              "args.rollout_top_p=0.9"],
    # issue #25 / #22: ranges the parser does not check (trainstack/rules/range_rules.py)
    "mem_fraction_above_one": ["args.sglang_mem_fraction_static=1.5"],
    "top_p_zero": ["args.rollout_top_p=0.0"],
    "top_k_zero": ["args.rollout_top_k=0"],
}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml"))


def preset_entries() -> list[tuple[str, str, list[str]]]:
    """Every model preset with each algo, on the first GPU cluster where trainstack accepts it."""
    out = []
    recorded = {}  # the cluster the last recording chose: tried first, so a re-render judges it once
    if ORACLE_PATH.exists():
        recorded = {e["id"]: e["overrides"] for e in json.loads(ORACLE_PATH.read_text())["entries"]
                    if e["kind"] == "preset"}
    for model in options("model"):
        if model == "tiny":
            continue
        for algo in options("algo"):
            env = "env=openhermes_sft" if algo == "sft" else "env=dapo_math"
            base = [f"model={model}", f"algo={algo}", env]
            chosen = None
            last = recorded.get(f"preset/{model}/{algo}", [])
            first = [" ".join(last[len(base):])] if last[:len(base)] == base and len(last) > len(base) else []
            for cluster in [*first, *(c for c in GPU_CLUSTERS if [c] != first)]:
                overrides = [*base, *cluster.split()]
                if judge(overrides).accepted:
                    chosen = overrides
                    break
            out.append(("preset", f"preset/{model}/{algo}", chosen or [*base, *GPU_CLUSTERS[-1].split()]))
    return out


def random_entries(n: int) -> list[tuple[str, str, list[str]]]:
    rng = random.Random(SEED)
    models = [m for m in options("model") if m != "tiny"]
    knobs = [
        ["algo.lr=1e-6", "algo.lr=2e-6", "algo.lr=5e-7"],
        ["env.rollout_batch_size=16", "env.rollout_batch_size=32", "env.rollout_batch_size=64"],
        ["env.n_samples_per_prompt=4", "env.n_samples_per_prompt=8", "env.n_samples_per_prompt=16"],
        ["args.sglang_mem_fraction_static=0.6", "args.sglang_mem_fraction_static=0.8"],
        ["args.entropy_coef=0.0", "args.entropy_coef=-0.001", "args.entropy_coef=1e-4"],
        ["cluster.colocate=false cluster.rollout_num_gpus=4", "cluster.colocate=true"],
        ["args.rollout_max_response_len=4096", "args.rollout_max_response_len=16384"],
        ["args.offload_rollout=false", "args.offload_train=true", ""],
    ]
    out = []
    for i in range(n):
        ov = [f"model={rng.choice(models)}", f"algo={rng.choice(['grpo', 'gspo', 'dapo', 'reinforce_plus_plus'])}",
              f"env={rng.choice(['dapo_math', 'gsm8k'])}", *rng.choice(GPU_CLUSTERS).split()]
        for k in rng.sample(knobs, rng.randint(1, 4)):
            ov += rng.choice(k).split()
        out.append(("random", f"random/{i:03d}", ov))
    return out


def corpus() -> list[tuple[str, str, list[str]]]:
    entries = [("experiment", f"experiment/{e}", [f"experiment={e}"]) for e in options("experiment")]
    entries += preset_entries()
    entries += random_entries(40)
    for name, ov in ACTION_CASES.items():
        base = [] if any(o.startswith("experiment=") for o in ov) else RL_BASE
        entries.append(("action", f"action/{name}", [*base, *ov] if not name.startswith("sft/") else [*SFT_BASE, *ov]))
    for name, ov in INVALID_CASES.items():
        base = [] if any(o.startswith("experiment=") for o in ov) else RL_BASE
        entries.append(("invalid", f"invalid/{name}", [*base, *ov]))
    return entries


def render_corpus(out: Path) -> None:
    rows = []
    for kind, eid, overrides in corpus():
        j = judge(overrides)
        rows.append({"id": eid, "kind": kind, **asdict(j)})
        print(f"{'ok ' if j.accepted else 'NO '} {eid}  {' '.join(j.rules)}", file=sys.stderr)
    out.write_text(json.dumps(rows, indent=1))
    acc = sum(r["accepted"] for r in rows)
    print(f"{len(rows)} entries: {acc} accepted by trainstack, {len(rows) - acc} refused, "
          f"{sum(r['argv'] is None for r in rows)} not renderable", file=sys.stderr)


def record(rendered: Path, verdicts: Path) -> None:
    from trainstack.upstream.argtable import load_table

    rows = json.loads(rendered.read_text())
    slime = {v["id"]: v for v in json.loads(verdicts.read_text())["verdicts"]}
    meta = json.loads(verdicts.read_text())["meta"]
    meta["slime_commit_table"] = load_table().slime_commit
    entries = []
    for r in rows:
        if r["argv"] is None:
            continue  # trainstack refused it while resolving: nothing for slime to parse
        v = dict(slime[r["id"]]["slime"])
        # The dests slime's namespace holds with exactly the intended value (checked by --intended).
        v["landed"] = sorted(d for d, x in r["intended"].items() if x is not None) if v.get("pass") else []
        entries.append({"id": r["id"], "kind": r["kind"], "overrides": r["overrides"], "argv": r["argv"],
                        "env": r["env"],
                        "trainstack": {"accepted": r["accepted"], "rules": r["rules"]}, "slime": v})
    _write(meta, entries)


def retrack() -> None:
    """Re-judge every recorded entry and update only trainstack's column (a rule added or changed
    that leaves every argv as recorded; slime's verdicts stand). Refuses when an argv or env drifted."""
    oracle = json.loads(ORACLE_PATH.read_text())
    for e in oracle["entries"]:
        j = judge(e["overrides"])
        if j.argv != e["argv"] or j.env != e["env"]:
            raise SystemExit(f"{e['id']}: the argv or env drifted; run `make oracle` instead")
        e["trainstack"] = {"accepted": j.accepted, "rules": j.rules}
    _write(oracle["meta"], oracle["entries"])


def _write(meta: dict, entries: list[dict]) -> None:
    write_oracle(ORACLE_PATH, meta, entries)
    print(f"wrote {ORACLE_PATH.relative_to(ROOT)}: {len(entries)} entries", file=sys.stderr)


def main(argv: list[str]) -> int:
    if argv == ["retrack"]:
        retrack()
        return 0
    if len(argv) == 2 and argv[0] == "render":
        render_corpus(Path(argv[1]))
        return 0
    if len(argv) == 3 and argv[0] == "record":
        record(Path(argv[1]), Path(argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
