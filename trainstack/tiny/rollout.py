"""One rollout (or eval pass): prompts -> responses -> hooks -> rewards, on slime's Sample.

Built-in generation samples the policy in-process (batched). With
``--custom-generate-function-path`` every sample goes through the user's
``async generate(args, sample, sampling_params[, evaluation])``, which reaches the policy
over the tiny SGLang server; it is awaited one sample at a time so requests arrive in a
deterministic order.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from . import plugins
from .arithmetic import score
from .generate import Generation, make_generator, sample
from .sample import Sample
from .tokenizer import CharTokenizer


@dataclass
class RolloutSettings:
    max_new_tokens: int
    temperature: float
    top_p: float
    evaluation: bool


def sampling_params(args, s: RolloutSettings) -> dict:
    """What slime's GenerateState builds from the --rollout-*/--eval-* flags."""
    return {
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": -1,
        "max_new_tokens": s.max_new_tokens,
        "stop": args.rollout_stop,
        "stop_token_ids": args.rollout_stop_token_ids,
        "skip_special_tokens": True,
        "no_stop_trim": False,
        "spaces_between_special_tokens": False,
    }


class Rollouts:
    def __init__(self, args, model_getter, server=None):
        self.args = args
        self.model_getter = model_getter
        self.server = server
        self.tok = CharTokenizer()
        self.generate_fn = (plugins.load_function(args.custom_generate_function_path, "--custom-generate-function-path")
                            if args.custom_generate_function_path else None)
        self.rm_fn = plugins.load_function(args.custom_rm_path, "--custom-rm-path") if args.custom_rm_path else None
        self.hooks = [plugins.load_function(p, "--rollout-sample-hook-path") for p in (args.rollout_sample_hook_path or [])]
        self._rm_random = None

    def run(self, groups: list[list[Sample]], rollout_id: int, s: RolloutSettings, purpose: str) -> list[list[Sample]]:
        gen = make_generator(self.args.seed, rollout_id, purpose)
        self._rm_random = random.Random(f"{self.args.seed}-{rollout_id}-{purpose}-rm")
        for g in groups:
            for smp in g:
                smp.rollout_id = rollout_id
        if self.generate_fn is None:
            flat = [smp for g in groups for smp in g]
            outs = sample(self.model_getter(), [list(x.tokens) for x in flat], max_new_tokens=s.max_new_tokens,
                          temperature=s.temperature, top_p=s.top_p, generator=gen,
                          stop_token_ids=self.args.rollout_stop_token_ids, stop=self.args.rollout_stop, tokenizer=self.tok)
            for smp, o in zip(flat, outs):
                self._fill(smp, o)
            return plugins.run(self._finish(groups, rollout_id, s))
        self.server.generator = gen
        return plugins.run(self._custom(groups, rollout_id, s))

    def _fill(self, smp: Sample, o: Generation) -> None:
        smp.tokens = list(smp.tokens) + o.output_ids
        smp.response_length = len(o.output_ids)
        smp.response = self.tok.decode(o.output_ids)
        smp.loss_mask = [1] * len(o.output_ids)
        smp.rollout_log_probs = list(o.logprobs)
        smp.status = Sample.Status.COMPLETED if o.finish_reason == "stop" else Sample.Status.TRUNCATED

    async def _custom(self, groups, rollout_id, s):
        params = sampling_params(self.args, s)
        pass_eval = plugins.accepts(self.generate_fn, "evaluation")
        out_groups = []
        for g in groups:
            new_g = []
            for smp in g:
                kw = {"evaluation": s.evaluation} if pass_eval else {}
                res = await plugins.maybe_await(self.generate_fn(self.args, smp, dict(params), **kw))
                new_g.extend(res if isinstance(res, list) else [res])
            out_groups.append(new_g)
        return await self._finish(out_groups, rollout_id, s)

    async def _finish(self, groups, rollout_id, s):
        for g in groups:
            for i, smp in enumerate(g):
                for h in self.hooks:
                    r = await plugins.maybe_await(h(self.args, smp, rollout_id=rollout_id, evaluation=s.evaluation))
                    if isinstance(r, Sample):
                        g[i] = smp = r
                if smp.loss_mask is None:
                    smp.loss_mask = [1] * smp.response_length
                if smp.remove_sample:  # slime: a removed sample stays in the batch with its loss masked out
                    smp.loss_mask = [0] * smp.response_length
                if smp.reward is None:
                    smp.reward = await self._reward(smp)
        return groups

    async def _reward(self, smp: Sample):
        if self.rm_fn is not None:
            return await plugins.maybe_await(self.rm_fn(self.args, smp))
        if self.args.rm_type == "random":
            return float(self._rm_random.randint(0, 1))
        if self.args.rm_type is None:  # slime would fail the same way: nothing gives this sample a reward
            raise ValueError("the custom generate function left sample.reward unset and no --custom-rm-path or "
                             "--rm-type is given")
        return score(smp.response, smp.label)  # --rm-type math: leading number equals the label
