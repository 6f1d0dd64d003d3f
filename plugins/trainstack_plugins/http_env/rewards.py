"""slime reward post-process for episodes that fan out into one sample per turn (``context: step``):
``--custom-reward-post-process-path trainstack_plugins.http_env.rewards.normalize_by_group``.

slime's default (``RolloutManager._post_process_rewards``) reshapes the rewards as
``(-1, n_samples_per_prompt)``; with a varying number of samples per prompt it falls back to one
group for the whole batch, so GRPO's baseline is no longer the prompt's. Here the groups are the
samples' ``group_index`` (the prompt), and each episode (``rollout_id``) counts once in its group's
mean and standard deviation, whatever its number of turns; every turn of an episode gets the
episode's normalised reward. Same switches as slime's: ``--advantage-estimator`` (grpo, gspo, cispo,
reinforce_plus_plus_baseline normalise), ``--disable-rewards-normalization``,
``--disable-grpo-std-normalization``. Stdlib only.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

NORMALISED = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
STD_NORMALISED = ("grpo", "gspo", "cispo")


# slime's parser defaults, for an `args` that lacks them (slime's own plugin-contract test passes a bare one:
# slime/tests/plugin_contracts/test_plugin_runtime_hook_contracts.py `invoke_reward_post_process`)
DEFAULTS = {"reward_key": None, "advantage_estimator": "grpo", "rewards_normalization": True,
            "grpo_std_normalization": True}


def _arg(args: Any, name: str) -> Any:
    return getattr(args, name, DEFAULTS[name])


def normalize_by_group(args: Any, samples: list) -> tuple[list[float], list[float]]:
    key = _arg(args, "reward_key")  # Sample.get_reward_value (slime/utils/types.py:246-247), with the default
    raw = [float(s.reward if not key else s.reward[key]) for s in samples]
    estimator = _arg(args, "advantage_estimator")
    if estimator not in NORMALISED or not _arg(args, "rewards_normalization"):
        return raw, list(raw)
    episodes: dict[Any, dict[Any, float]] = defaultdict(dict)  # group -> rollout -> reward
    for i, s in enumerate(samples):
        rollout = s.rollout_id if s.rollout_id is not None else ("sample", i)
        episodes[s.group_index][rollout] = raw[i]
    stats = {}
    for group, by_rollout in episodes.items():
        values = list(by_rollout.values())
        mean = sum(values) / len(values)
        # torch.std's default (unbiased), as slime's; one episode: no spread
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        stats[group] = (mean, std)
    out = []
    for s, r in zip(samples, raw):
        mean, std = stats[s.group_index]
        value = r - mean
        if estimator in STD_NORMALISED and _arg(args, "grpo_std_normalization"):
            value /= std + 1e-6
        out.append(value)
    return raw, out
