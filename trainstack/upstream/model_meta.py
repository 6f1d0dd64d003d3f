"""Curated per-model metadata for the generated ``conf/model/*.yaml`` presets.

The architecture flags of every preset come from slime's ``scripts/models/*.sh`` (see
``trainstack/data/slime_models.json``); everything else in a preset comes from ``MODELS`` below:
the Hugging Face repo and checkpoint directory name, the family, a nominal parameter count, and
model-size-dependent training defaults (parallelism + perf flags).

Edit this file, then regenerate with ``python -m trainstack.upstream.sync_slime presets``; the presets
are never edited by hand (``--check`` in CI catches drift).

Perf defaults marked ``upstream`` copy the ``PERF_ARGS`` (and the CPU-offload optimizer flags) of the
named upstream run script at the pinned slime commit; the others are trainstack's suggestions,
scaled by model size (bigger models: more TP/PP/EP, CPU optimizer offload).
"""
from __future__ import annotations

import re
from typing import Any, Mapping

# ---------------------------------------------------------------------------------------------
# Perf / parallelism defaults
# ---------------------------------------------------------------------------------------------


def perf(
    tp: int,
    *,
    pp: int = 1,
    cp: int = 1,
    ep: int = 1,
    etp: int = 1,
    sp: bool = True,
    recompute: bool = True,
    tokens: int = 9216,
    offload: bool = False,
    first: int | None = None,
    last: int | None = None,
    engine: int | None = None,
    mem_fraction: float = 0.7,
) -> dict[str, Any]:
    """PERF_ARGS as the upstream run scripts spell them, as an ordered dest -> value dict."""
    out: dict[str, Any] = {"tensor_model_parallel_size": tp}
    if sp:
        out["sequence_parallel"] = True
    out["pipeline_model_parallel_size"] = pp
    if first is not None:
        out["decoder_first_pipeline_num_layers"] = first
    if last is not None:
        out["decoder_last_pipeline_num_layers"] = last
    out["context_parallel_size"] = cp
    out["expert_model_parallel_size"] = ep
    out["expert_tensor_parallel_size"] = etp
    if recompute:
        out["recompute_granularity"] = "full"
        out["recompute_method"] = "uniform"
        out["recompute_num_layers"] = 1
    out["use_dynamic_batch_size"] = True
    out["max_tokens_per_gpu"] = tokens
    if offload:  # upstream always pairs these three (OPTIMIZER_ARGS / PERF_ARGS)
        out["optimizer_cpu_offload"] = True
        out["overlap_cpu_optimizer_d2h_h2d"] = True
        out["use_precision_aware_optimizer"] = True
    # SGLang engines: one engine spans the training TP size unless told otherwise (upstream pairing).
    out["rollout_num_gpus_per_engine"] = engine if engine is not None else min(tp, 8)
    out["sglang_mem_fraction_static"] = mem_fraction
    return out


# Numerics every upstream run script passes (MISC_ARGS): RL fine-tuning without dropout, fp32
# grad accumulation and softmax, flash attention (dropped for MLA models, which need another backend).
MISC = {
    "attention_dropout": 0.0,
    "hidden_dropout": 0.0,
    "accumulate_allreduce_grads_in_fp32": True,
    "attention_softmax_in_fp32": True,
    "attention_backend": "flash",
}


def _m(
    hf_repo: str,
    family: str,
    nominal: int | None,
    perf_defaults: dict[str, Any],
    perf_source: str,
    *,
    hf_dir: str | None = None,
    params_source: str = "computed",
    note: str | None = None,
    revision: str = "main",
) -> dict[str, Any]:
    return {
        "hf_repo": hf_repo,
        # The Hub revision a launch downloads (trainstack/inputs, docs/inputs.md): "main" is resolved to a
        # commit sha at prepare time and recorded in the run; pin a 40-hex sha here to make it part of run ids.
        "revision": revision,
        "hf_dir": hf_dir or hf_repo.rsplit("/", 1)[-1],
        "family": family,
        "nominal_params": nominal,
        "params_source": params_source,
        "perf": perf_defaults,
        "perf_source": perf_source,
        "note": note,
    }


S = "trainstack suggestion"
B = 1_000_000_000

# name (= slime scripts/models/<name>.sh stem) -> curated metadata.
# nominal_params: the published size (HF model card / safetensors count, without MTP heads unless
# the script enables MTP); None where no such checkpoint is published (truncated test variants).
# params_source "nominal": param_count() cannot see the architecture (linear-attention hybrids,
# vision towers), so the nominal value is used for meta.params.
MODELS: dict[str, dict[str, Any]] = {
    # --- Qwen2.5 ---
    "qwen2.5-0.5B": _m("Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5", 494_032_768,
                       perf(1, recompute=False), "upstream scripts/run-qwen2.5-0.5B-reproducibility.sh"),
    "qwen2.5-1.5B": _m("Qwen/Qwen2.5-1.5B-Instruct", "qwen2.5", 1_543_714_304, perf(1), S),
    "qwen2.5-3B": _m("Qwen/Qwen2.5-3B", "qwen2.5", 3_085_938_688, perf(2),
                     "upstream examples/search-r1/run_qwen2.5_3B.sh"),
    "qwen2.5-7B": _m("Qwen/Qwen2.5-7B-Instruct", "qwen2.5", 7_615_616_512, perf(2), S),
    "qwen2.5-32B": _m("Qwen/Qwen2.5-32B-Instruct", "qwen2.5", 32_763_876_352,
                      perf(8, tokens=20480, offload=True), S),
    # --- Qwen3 dense ---
    "qwen3-0.6B": _m("Qwen/Qwen3-0.6B", "qwen3", 596_049_920, perf(1, recompute=False), S),
    "qwen3-1.7B": _m("Qwen/Qwen3-1.7B", "qwen3", 1_720_574_976, perf(1), S),
    "qwen3-4B": _m("Qwen/Qwen3-4B", "qwen3", 4_022_468_096, perf(2), "upstream scripts/run-qwen3-4B.sh"),
    "qwen3-4B-Instruct-2507": _m("Qwen/Qwen3-4B-Instruct-2507", "qwen3", 4_022_468_096, perf(2),
                                 "upstream examples/tau-bench/run_qwen3_4B.sh"),
    "qwen3-8B": _m("Qwen/Qwen3-8B", "qwen3", 8_190_735_360, perf(2, tokens=16384),
                   "upstream examples/on_policy_distillation/run-qwen3-8B-opd.sh"),
    "qwen3-14B": _m("Qwen/Qwen3-14B", "qwen3", 14_768_307_200, perf(4, tokens=16384), S),
    "qwen3-32B": _m("Qwen/Qwen3-32B", "qwen3", 32_762_123_264, perf(8, tokens=20480, offload=True),
                    "upstream scripts/run-qwen3-32B.sh"),
    # --- Qwen3 MoE ---
    "qwen3-30B-A3B": _m("Qwen/Qwen3-30B-A3B", "qwen3_moe", 30_532_122_624,
                        perf(4, ep=8, tokens=20480, offload=True), "upstream scripts/run-qwen3-30B-A3B.sh"),
    "qwen3-235B-A22B": _m("Qwen/Qwen3-235B-A22B", "qwen3_moe", 235_093_634_560,
                          perf(4, pp=4, cp=2, ep=16, last=22, tokens=16384, offload=True),
                          "upstream scripts/run-qwen3-235B-A22B.sh"),
    "qwen3-next-80B-A3B": _m("Qwen/Qwen3-Next-80B-A3B-Thinking", "qwen3_next", 80 * B,
                             perf(2, pp=4, cp=4, ep=8, last=9, tokens=8192, offload=True),
                             "upstream scripts/run-qwen3-next-80B-A3B.sh (CP_SIZE default 4)",
                             params_source="nominal",
                             note="hybrid Gated-DeltaNet/attention layers come from --spec; not countable from flags"),
    # --- Qwen3.5 (hybrid linear attention, natively multimodal) ---
    "qwen3.5-0.8B": _m("Qwen/Qwen3.5-0.8B", "qwen3_5", 800_000_000, perf(1, recompute=False), S,
                       params_source="nominal"),
    "qwen3.5-4B": _m("Qwen/Qwen3.5-4B", "qwen3_5", 4 * B, perf(2), S, params_source="nominal"),
    "qwen3.5-9B": _m("Qwen/Qwen3.5-9B", "qwen3_5", 9 * B, perf(2), S, params_source="nominal"),
    "qwen3.5-27B": _m("Qwen/Qwen3.5-27B", "qwen3_5", 27 * B,
                      perf(4, pp=2, cp=4, last=30, tokens=8192, offload=True),
                      "upstream scripts/run-qwen3.5-27B.sh (CP_SIZE default 4)", params_source="nominal"),
    "qwen3.5-35B-A3B": _m("Qwen/Qwen3.5-35B-A3B", "qwen3_5_moe", 35 * B,
                          perf(2, ep=8, tokens=8192, offload=True),
                          "upstream scripts/run-qwen3.5-35B-A3B-sft.sh", params_source="nominal"),
    "qwen3.5-35B-A3B-vl": _m("Qwen/Qwen3.5-35B-A3B", "qwen3_5_moe", 35 * B,
                             perf(2, ep=8, tokens=8192, offload=True),
                             "upstream scripts/run-qwen3.5-35B-A3B-sft.sh (text model)", params_source="nominal"),
    # --- GLM ---
    "glm4-9B": _m("THUDM/GLM-Z1-9B-0414", "glm4", 9_400_279_040, perf(2, cp=2, tokens=4608),
                  "upstream scripts/run-glm4-9B.sh"),
    "glm4-32B": _m("THUDM/GLM-4-32B-0414", "glm4", None, perf(8, tokens=16384, offload=True), S,
                   note="slime's glm4-32B.sh (64 layers, 8 query groups, 34.7B) does not match GLM-4-32B-0414 "
                   "(61 layers, 2 KV heads, 32.6B): slime's HF config check rejects that checkpoint with this "
                   "script; use a checkpoint with the script's architecture"),
    "glm4.5-106B-A12B": _m("zai-org/GLM-4.5-Air", "glm4_moe", 106 * B,
                           perf(4, pp=2, ep=8, tokens=16384, offload=True), S,
                           note="nominal excludes the MTP layer of the HF checkpoint"),
    "glm4.5-355B-A32B": _m("zai-org/GLM-4.5", "glm4_moe", 355 * B,
                           perf(8, pp=4, cp=2, ep=16, tokens=16384, offload=True),
                           "upstream scripts/run-glm4.7-355B-A32B.sh (same architecture)"),
    "glm4.7-30B-A3B": _m("zai-org/GLM-4.7-Flash", "glm4_moe_lite", 30 * B,
                         perf(2, pp=2, cp=2, ep=8, last=23, tokens=32768, offload=True),
                         "upstream scripts/run-glm4.7-30B-A3B.sh"),
    "glm5-744B-A40B": _m("zai-org/GLM-5", "glm5", 744 * B,
                         perf(4, pp=4, cp=2, ep=32, last=18, tokens=16384, offload=True),
                         "upstream scripts/run-glm5-744B-A40B.sh"),
    "glm5.2-744B-A40B": _m("zai-org/GLM-5.2", "glm5", 744 * B,
                           perf(4, pp=8, cp=8, ep=32, first=14, last=16, tokens=8192, offload=True),
                           "upstream scripts/run-glm5.2-744B-A40B.sh"),
    # --- DeepSeek / Kimi / Moonlight (MLA + MoE) ---
    "deepseek-v3": _m("deepseek-ai/DeepSeek-V3", "deepseek_v3", 671 * B,
                      perf(8, pp=4, cp=4, ep=32, last=13, tokens=16384, offload=True),
                      "upstream scripts/run-deepseek-r1.sh (same architecture)"),
    "deepseek-v3-20layer": _m("deepseek-ai/DeepSeek-V3", "deepseek_v3", None,
                              perf(8, pp=4, ep=16, tokens=16384, offload=True), S,
                              hf_dir="DeepSeek-V3-20layer",
                              note="truncated test variant; make the checkpoint yourself"),
    "deepseek-v3-5layer": _m("deepseek-ai/DeepSeek-V3", "deepseek_v3", None,
                             perf(4, ep=8, tokens=16384, offload=True), S,
                             hf_dir="DeepSeek-V3-5layer",
                             note="truncated test variant; make the checkpoint yourself"),
    "kimi-k2": _m("moonshotai/Kimi-K2-Instruct", "kimi_k2", 1_026 * B,
                  perf(8, pp=8, cp=4, ep=32, last=5, tokens=16384, offload=True),
                  "upstream scripts/run-kimi-k2-Instruct.sh"),
    "kimi-k2-thinking": _m("moonshotai/Kimi-K2-Thinking", "kimi_k2", 1_026 * B,
                           perf(8, pp=8, cp=4, ep=32, last=5, tokens=16384, offload=True),
                           "upstream scripts/run-kimi-k2-Thinking.sh"),
    "moonlight": _m("moonshotai/Moonlight-16B-A3B", "deepseek_v3", 15_960_000_000,
                    perf(4, ep=8, tokens=8192, offload=True), "upstream scripts/run-moonlight-16B-A3B.sh"),
    # --- others ---
    "minimax-m2": _m("MiniMaxAI/MiniMax-M2", "minimax_m2", 229 * B,
                     perf(2, pp=2, ep=4, tokens=8192, offload=True),
                     "upstream scripts/run-minimax-m2.sh (MiniMax-M2.5, same architecture)"),
    "mimo-7B-rl": _m("XiaomiMiMo/MiMo-7B-RL", "mimo", 7_830_000_000, perf(2),
                     "upstream scripts/run-mimo-7B-rl-eagle.sh", note="nominal includes the MTP layer"),
    "llama3.1-8B-Instruct": _m("meta-llama/Llama-3.1-8B-Instruct", "llama", 8_030_261_248, perf(2), S),
    "llama3.2-3B-Instruct": _m("meta-llama/Llama-3.2-3B-Instruct", "llama", 3_212_749_824, perf(2), S),
    "llama3.2-3B-Instruct-amd": _m("meta-llama/Llama-3.2-3B-Instruct", "llama", 3_212_749_824, perf(2), S),
}


# ---------------------------------------------------------------------------------------------
# Parameter count from the architecture flags (dest -> value, as in the presets)
# ---------------------------------------------------------------------------------------------

_FREQ_TERM = re.compile(r"^\[([0-9,\s]*)\](?:\*(\d+))?$")


def moe_layer_pattern(freq: Any, num_layers: int) -> list[int]:
    """Megatron's ``--moe-layer-freq``: an int k (every k-th layer is MoE) or a list expression
    such as ``[0,0,1]`` / ``[0]*3+[1]*58``. Parsed without eval."""
    if isinstance(freq, int) or (isinstance(freq, str) and freq.strip().isdigit()):
        k = int(freq)
        return [1 if i % k == 0 else 0 for i in range(num_layers)]
    if isinstance(freq, (list, tuple)):
        pattern = [int(x) for x in freq]
    else:
        pattern = []
        for term in str(freq).replace(" ", "").split("+"):
            m = _FREQ_TERM.match(term)
            if not m:
                raise ValueError(f"cannot parse moe_layer_freq {freq!r}")
            items = [int(x) for x in m.group(1).split(",") if x != ""]
            pattern += items * int(m.group(2) or 1)
    if len(pattern) != num_layers:
        raise ValueError(f"moe_layer_freq {freq!r} has {len(pattern)} entries for {num_layers} layers")
    return pattern


def param_count(v: Mapping[str, Any]) -> int:
    """Parameters of the Megatron GPT model the flags describe (HF convention: no padding of the
    vocabulary; the MTP block counted when ``mtp_num_layers`` is set).

    Counts embedding, per layer attention (MHA/GQA incl. qkv bias, qk-layernorm, output gate, or
    MLA with its low-rank projections and norms), MLP (dense, swiglu) or MoE (router, routed
    experts, shared experts + gate), the layer norms (incl. GLM's post norms), the final norm and
    the output layer unless tied. Linear-attention hybrids that only ``--spec`` knows about are
    not representable; use the nominal count for those.
    """
    h = int(v["hidden_size"])
    L = int(v["num_layers"])
    V = int(v["vocab_size"])
    nh = int(v["num_attention_heads"])
    ffn = int(v.get("ffn_hidden_size") or 4 * h)
    kv_ch = int(v.get("kv_channels") or h // nh)
    ng = int(v.get("num_query_groups") or nh) if v.get("group_query_attention") else nh
    bias = bool(v.get("add_bias_linear", True))
    glu = 2 if v.get("swiglu") else 1
    layernorm = v.get("normalization", "LayerNorm") == "LayerNorm"
    norm = (2 if layernorm else 1)  # weight (+ bias for LayerNorm) per hidden unit

    # --- attention ---
    if v.get("multi_latent_attention"):
        qk = int(v.get("qk_head_dim") or 128)
        pos = int(v.get("qk_pos_emb_head_dim") or 64)
        vd = int(v.get("v_head_dim") or 128)
        q_lora = v.get("q_lora_rank")
        kv_lora = int(v.get("kv_lora_rank") or 512)
        if q_lora:
            q_lora = int(q_lora)
            attn = h * q_lora + q_lora * norm + q_lora * nh * (qk + pos)
        else:
            attn = h * nh * (qk + pos)
        attn += h * (kv_lora + pos) + kv_lora * norm + kv_lora * nh * (qk + vd)
        attn += nh * vd * h
        if bias:
            attn += h
    else:
        q_out = nh * kv_ch * (2 if v.get("attention_output_gate") else 1)
        kv_out = 2 * ng * kv_ch
        attn = h * (q_out + kv_out) + nh * kv_ch * h
        if bias or v.get("add_qkv_bias"):
            attn += q_out + kv_out
        if bias:
            attn += h
        if v.get("qk_layernorm"):
            attn += 2 * kv_ch * norm

    # --- MLP / MoE ---
    def mlp(width: int) -> int:
        p = glu * h * width + width * h
        if bias:
            p += glu * width + h
        return p

    dense = mlp(ffn)
    E = int(v.get("num_experts") or 0)
    if E:
        moe_ffn = int(v.get("moe_ffn_hidden_size") or ffn)
        moe = h * E + E * mlp(moe_ffn)
        shared = v.get("moe_shared_expert_intermediate_size")
        if shared:
            moe += mlp(int(shared))
            if v.get("moe_shared_expert_gate"):
                moe += h
        pattern = moe_layer_pattern(v.get("moe_layer_freq", 1), L)
    else:
        moe = 0
        pattern = [0] * L

    per_layer_norms = 2 * h * norm
    if v.get("post_self_attn_layernorm"):
        per_layer_norms += h * norm
    if v.get("post_mlp_layernorm"):
        per_layer_norms += h * norm
    layers = sum(attn + per_layer_norms + (moe if is_moe else dense) for is_moe in pattern)

    total = V * h + layers + h * norm  # embedding, layers, final norm
    if v.get("untie_embeddings_and_output_weights"):
        total += V * h
    if v.get("position_embedding_type") == "learned_absolute" and v.get("max_position_embeddings"):
        total += int(v["max_position_embeddings"]) * h

    mtp = int(v.get("mtp_num_layers") or 0)
    if mtp:  # per MTP layer: enorm + hnorm, eh_proj (2h -> h), one transformer layer, final norm
        last_is_moe = pattern[-1] if pattern else 0
        total += mtp * (2 * h * norm + 2 * h * h + attn + per_layer_norms + (moe if last_is_moe else dense) + h * norm)
    return int(total)


def meta_for(name: str) -> dict[str, Any]:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(
            f"model {name!r} has no entry in trainstack/upstream/model_meta.py MODELS; add one "
            "(hf_repo, family, nominal params, perf defaults) and regenerate"
        ) from None
