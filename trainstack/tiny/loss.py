"""Advantages and the policy loss with slime's formulas (slime/utils/ppo_utils.py semantics).

Rewards arrive post-processed by slime's ``RolloutManager._post_process_rewards`` (group
normalisation). grpo: the reward broadcast to tokens; gspo: same advantages, sequence-level
ratio; reinforce_plus_plus: discounted token returns then whitening;
reinforce_plus_plus_baseline: reward minus group mean, then whitening.
Log-probs are taken from logits divided by --rollout-temperature, as slime does.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch



@dataclass
class Batch:
    """Right-padded prompt+response ids and per-response-token tensors, aligned at response start."""

    ids: torch.Tensor  # [B, T]
    prompt_lens: list[int]
    resp_lens: list[int]
    mask: torch.Tensor  # [B, R] loss mask (0 past the response)
    rollout_logp: torch.Tensor | None  # [B, R]


def make_batch(td: dict, rows: slice | None = None, pad_id: int = 0) -> Batch:
    """Rows of slime's train data (``RolloutManager._convert_samples_to_train_data``'s dict) as tensors."""
    rows = rows or slice(None)
    tokens, lens, masks = td["tokens"][rows], td["response_lengths"][rows], td["loss_masks"][rows]
    lps = td.get("rollout_log_probs")
    lps = lps[rows] if lps is not None else None
    T = max(len(t) for t in tokens)
    R = max(max(lens), 1)
    ids = torch.full((len(tokens), T), pad_id, dtype=torch.long)
    mask = torch.zeros(len(tokens), R)
    have_lp = lps is not None and all(lp is not None and len(lp) == n for lp, n in zip(lps, lens))
    rlp = torch.zeros(len(tokens), R) if have_lp else None
    for i, (t, n) in enumerate(zip(tokens, lens)):
        ids[i, :len(t)] = torch.tensor(list(t), dtype=torch.long)
        if n:
            mask[i, :n] = torch.tensor([float(m) for m in masks[i]])
            if rlp is not None and lps is not None:
                rlp[i, :n] = torch.tensor(lps[i], dtype=torch.float32)
    return Batch(ids, [len(t) - n for t, n in zip(tokens, lens)], list(lens), mask, rlp)


def logprobs_and_entropy(model, b: Batch, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per response token: log p(token) and entropy of the temperature-scaled distribution ([B, R])."""
    logits = model(b.ids).float() / temperature
    logp_all = logits.log_softmax(-1)
    B, R = b.mask.shape
    pos = torch.zeros(B, R, dtype=torch.long)
    tgt = torch.zeros(B, R, dtype=torch.long)
    for i, (p, n) in enumerate(zip(b.prompt_lens, b.resp_lens)):
        r = torch.arange(n)
        pos[i, :n] = p - 1 + r
        tgt[i, :n] = b.ids[i, p + r]
    lp_rows = logp_all.gather(1, pos[:, :, None].expand(B, R, logp_all.shape[-1]))
    logp = lp_rows.gather(2, tgt[:, :, None]).squeeze(2)
    entropy = -(lp_rows.exp() * lp_rows).sum(-1)
    return logp, entropy


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    n = mask.sum().clamp(min=1)
    mean = (x * mask).sum() / n
    var = (((x - mean) ** 2) * mask).sum() / n
    return (x - mean) * torch.rsqrt(var + eps) * mask


def advantages(args, rewards: list[float], b: Batch) -> torch.Tensor:
    """[B, R] token advantages from slime's post-processed rewards (``_post_process_rewards`` already
    group-normalised them for grpo/gspo/reinforce_plus_plus_baseline), per --advantage-estimator."""
    r = torch.tensor(rewards, dtype=torch.float32)
    est = args.advantage_estimator
    if est in ("grpo", "gspo", "reinforce_plus_plus_baseline"):
        adv = r[:, None] * b.mask  # slime get_grpo_returns: the reward on every token
    elif est == "reinforce_plus_plus":
        gamma = float(args.gamma if args.gamma is not None else 1.0)
        adv = torch.zeros_like(b.mask)
        for i, length in enumerate(b.resp_lens):
            k = torch.arange(length, dtype=torch.float32)
            adv[i, :length] = float(r[i]) * gamma ** (length - 1 - k)
        adv = adv * b.mask
    else:  # refused at parse time
        raise ValueError(est)
    if args.normalize_advantages:
        adv = masked_whiten(adv, b.mask)
    return adv


def kl(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    log_ratio = logp - ref_logp
    if kind == "k2":
        return log_ratio ** 2 / 2.0
    if kind in ("k3", "low_var_kl"):
        lr = -log_ratio
        out = lr.exp() - 1 - lr
        return out.clamp(-10, 10) if kind == "low_var_kl" else out
    return log_ratio  # k1


@dataclass
class LossOut:
    loss: torch.Tensor
    stats: dict[str, float]


def policy_loss(args, logp, entropy, old_logp, adv, mask, ref_logp=None, rollout_logp=None) -> LossOut:
    """PPO-clip policy loss + entropy bonus + optional KL loss, reduced like slime."""
    if args.calculate_per_token_loss:
        denom = mask.sum().clamp(min=1)

        def reduce(x):
            return (x * mask).sum() / denom
    else:
        per = mask.sum(1).clamp(min=1)

        def reduce(x):
            return ((x * mask).sum(1) / per).mean()

    ppo_kl = old_logp - logp
    if args.advantage_estimator == "gspo":
        per = mask.sum(1, keepdim=True).clamp(min=1)
        ppo_kl = ((ppo_kl * mask).sum(1, keepdim=True) / per).expand_as(logp)
    ratio = (-ppo_kl).exp()
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1 - args.eps_clip, 1 + args.eps_clip_high)
    pg = torch.maximum(pg1, pg2)
    clipfrac = (pg2 > pg1).float()
    if args.eps_clip_c is not None:
        pg3 = -adv * args.eps_clip_c
        pg = torch.where(adv < 0, torch.minimum(pg3, pg), pg)
    pg_loss = reduce(pg)
    ent = reduce(entropy)
    loss = pg_loss - args.entropy_coef * ent
    stats = {"pg_loss": pg_loss, "entropy_loss": ent, "pg_clipfrac": reduce(clipfrac), "ppo_kl": reduce(ppo_kl)}
    if args.use_kl_loss and ref_logp is not None:
        kl_loss = reduce(kl(logp, ref_logp, args.kl_loss_type))
        loss = loss + args.kl_loss_coef * kl_loss
        stats["kl_loss"] = kl_loss
    if rollout_logp is not None:
        stats["train_rollout_logprob_abs_diff"] = reduce((logp.detach() - rollout_logp).abs())
    stats["loss"] = loss
    return LossOut(loss, {k: float(v.detach()) for k, v in stats.items()})
