"""slime custom generate function for HTTP environments: ``--custom-generate-function-path
trainstack_plugins.http_env.generate.generate`` (docs/http_env.md).

One sample = one episode: start a session for the sample's task, then alternate model turns and
env steps up to ``max_turns`` and the response budget (``sampling_params["max_new_tokens"]``,
model and observation tokens together), and close the session whatever happened.

Token in, token out: model turns are generated from token ids and the ids (and log-probs) the
inference server returns are kept as they are. The prompt is the chat template's rendering of the
first observation. Each later observation is tokenized as a delta appended after the model's own
tokens: the text the template writes after an assistant turn's content when the observation follows
(``ChatTokenizer.turn_tail``: the turn's closing, the observation's turn, the generation prompt),
rendered on a fixed stand-in conversation, never by re-rendering the episode's history (templates
rewrite history: Qwen3 drops an earlier answer's ``<think>`` block, GLM-4.5 its reasoning). Where the
model finished its turn by writing the start of that closing (``<|im_end|>``, ``<|eot_id|>``,
GLM's ``<|user|>``), those tokens are not repeated. ``loss_mask`` is 1 on model tokens and 0 on
observation tokens; ``rollout_log_probs`` are the server's for model tokens and 0.0 (masked) for
observation tokens.

Settings: ``args.http_env`` (from slime's ``--custom-config-path`` YAML, written by trainstack from
the env preset's ``meta.http_env``), updated by ``sample.metadata["http_env"]``; typed and checked
by ``trainstack.http_env.settings``. Statuses: COMPLETED (the env ended the episode), TRUNCATED
(turn limit, response budget, or the env's own step limit), ABORTED (the inference server aborted
the request), FAILED (the env or inference server failed past its retries, a timeout, a terminal
hook error, an episode the env's verdict marks ``invalid``; reward 0, ``remove_sample`` so it does
not train). The reward is set here, so slime skips the reward model.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Optional

from trainstack.errors import ConfigErrors
from trainstack.http_env.settings import CONFIG_KEY, HttpEnvSettings, parse_settings, with_overrides

from . import chat as chat_mod
from .client import CallFailed, CallStats, EnvClient, Retry, ssl_context
from .client import generate as generate_turn


class SettingsMissing(ValueError):
    """The run gives the generate function no settings: a configuration error, raised (not a failed sample)."""


def run_settings(args: Any) -> HttpEnvSettings:
    raw = getattr(args, CONFIG_KEY, None)
    if raw is None:
        raise SettingsMissing(f"args.{CONFIG_KEY} is not set: pass --custom-config-path FILE whose YAML has a top-level "
                              f"`{CONFIG_KEY}:` block (trainstack writes <run_dir>/http_env.yaml from the env preset's "
                              "meta.http_env); see docs/http_env.md")
    if not isinstance(raw, dict):
        raise SettingsMissing(f"args.{CONFIG_KEY} must be a mapping of settings, got {type(raw).__name__}")
    settings = parse_settings(raw, f"{CONFIG_KEY}.")
    if not settings.url:
        raise SettingsMissing(f"args.{CONFIG_KEY}.url is not set: the env server's URL (trainstack fills it in when it "
                              "serves the env itself)")
    return settings


def tokenizer_dir(args: Any, settings: HttpEnvSettings) -> str:
    path = settings.tokenizer or getattr(args, "hf_checkpoint", None)
    if not path:
        raise chat_mod.ChatTokenizerError("no tokenizer: set --hf-checkpoint (the model's Hugging Face directory) or "
                                          f"{CONFIG_KEY}.tokenizer (a directory with tokenizer.json and a chat template)")
    return str(path)


def aggregate(mode: str, rewards: list[float], validation: Optional[float], ended: bool) -> float:
    """The episode's reward: ``sum`` of step rewards (+ the terminal verdict), the ``last`` step's (the
    verdict replaces it), or ``terminal`` (the last/verdict only when the env ended the episode, else 0)."""
    if mode == "sum":
        return float(sum(rewards) + (validation or 0.0))
    final = validation if validation is not None else (rewards[-1] if rewards else 0.0)
    if mode == "last":
        return float(final)
    return float(final) if ended else 0.0


class _Fail(Exception):
    pass


def closing_overlap(model_ids: list[int], tail_ids: list[int]) -> int:
    """How many leading ids of ``tail_ids`` (what the template writes after an assistant message's
    content) the model's turn already ends with: its end-of-turn token (``<|im_end|>``, ``<|eot_id|>``,
    GLM's ``<|user|>``) is the template's closing, written once."""
    for k in range(min(len(model_ids), len(tail_ids)), 0, -1):
        if model_ids[-k:] == tail_ids[:k]:
            return k
    return 0


class Episode:
    def __init__(self, args: Any, sample: Any, sampling_params: dict, settings: HttpEnvSettings,
                 chat: chat_mod.ChatTokenizer, evaluation: bool):
        self.args, self.sample, self.settings, self.chat = args, sample, settings, chat
        self.params = dict(sampling_params)
        self.evaluation = evaluation
        self.prompt_ids: list[int] = []
        self.resp_ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.status = "completed"
        self.reason = ""
        self.ended = False  # the env said done
        self.rewards: list[float] = []
        self.validation: Optional[dict] = None
        self.turns: list[dict] = []
        self.errors: list[str] = []
        self.stats = CallStats()
        self.finished: list[tuple[list[int], list[int], list[int], list[float]]] = []  # context: step
        s = settings
        self.env_retry = Retry(s.timeout_s, s.retries, s.backoff_s, s.max_backoff_s, s.capacity_wait_s)
        self.close_retry = Retry(s.timeout_s, min(1, s.retries), s.backoff_s, s.max_backoff_s)
        self.gen_retry = Retry(s.generate_timeout_s, s.retries, s.backoff_s, s.max_backoff_s)
        self.generate_url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"
        if getattr(sample, "session_id", None) is None:
            sample.session_id = uuid.uuid4().hex  # slime's generate_and_rm_group sets one per sample; so do we
        # slime's own generate sends the sample's session id as the router's routing key under
        # consistent hashing, so every turn of one sample reaches the engine holding its prefix.
        self.routing_key = sample.session_id if getattr(args, "router_policy", None) == "consistent_hashing" else None
        self.template_kwargs = dict(settings.chat_template_kwargs or {})
        self.system = {"role": "system", "content": settings.system_prompt} if settings.system_prompt else None

    # --- the episode -------------------------------------------------------------------------
    async def run(self) -> Any:
        import httpx

        t0 = time.monotonic()
        async with httpx.AsyncClient(timeout=None, verify=ssl_context()) as http:
            env = EnvClient(http, str(self.settings.url), self.env_retry, self.stats)
            try:
                if self.settings.episode_timeout_s is not None:
                    await asyncio.wait_for(self._play(http, env), self.settings.episode_timeout_s)
                else:
                    await self._play(http, env)
            except asyncio.TimeoutError:
                self._failed(f"the episode took longer than episode_timeout_s={self.settings.episode_timeout_s:g}")
            except (CallFailed, _Fail) as e:
                self._failed(str(e))
            finally:
                env.retry = self.close_retry
                problem = await env.close()
                if problem:
                    self.errors.append(f"close: {problem}")
        return self._fill(env.session_id, time.monotonic() - t0)

    def _failed(self, why: str) -> None:
        self.status, self.reason = "failed", why
        self.errors.append(why)

    def _add(self, ids: list[int], logprobs: Optional[list[float]], trainable: bool) -> None:
        self.resp_ids += ids
        self.mask += [1 if trainable else 0] * len(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)

    def _task(self) -> dict:
        md = dict(self.sample.metadata or {})
        md.pop(CONFIG_KEY, None)
        return {"prompt": self.sample.prompt, "label": self.sample.label, "metadata": md}

    async def _play(self, http: Any, env: EnvClient) -> None:
        s, chat = self.settings, self.chat
        started = await env.start(self._task())
        messages: list[dict] = [self.system] if self.system else []
        messages.append({"role": "user", "content": started["observation"]})
        self.prompt_ids = chat.encode(chat.render(messages, add_generation_prompt=True, **self.template_kwargs))
        budget = int(self.params.get("max_new_tokens") or 0)
        step_context = s.context == "step"
        obs: dict = messages[-1]
        context_len = getattr(self.args, "rollout_max_context_len", None)
        for turn in range(s.max_turns):
            if step_context and turn:  # a new sample: this turn's observation alone is its prompt
                self.finished.append((self.prompt_ids, self.resp_ids, self.mask, self.logprobs))
                self.resp_ids, self.mask, self.logprobs = [], [], []
                alone = [*([self.system] if self.system else []), {"role": "user", "content": obs["content"]}]
                self.prompt_ids = chat.encode(chat.render(alone, add_generation_prompt=True, **self.template_kwargs))
            remaining = budget - len(self.resp_ids)
            if context_len:
                remaining = min(remaining, int(context_len) - len(self.prompt_ids) - len(self.resp_ids))
            if remaining <= 0:
                self.status, self.reason = "truncated", ("response budget used up" if remaining == budget - len(
                    self.resp_ids) else f"the context does not fit rollout_max_context_len={context_len}")
                return
            cap = min(remaining, s.max_tokens_per_turn or remaining)
            mt = await generate_turn(http, self.generate_url, self.prompt_ids + self.resp_ids,
                                     {**self.params, "max_new_tokens": cap}, self.gen_retry, self.stats,
                                     self.routing_key)
            self._add(mt.ids, mt.logprobs, trainable=True)
            record: dict = {"turn": turn, "model_tokens": len(mt.ids), "finish_reason": mt.finish_reason}
            self.turns.append(record)
            if mt.finish_reason == "abort":
                self.status, self.reason = "aborted", "the inference server aborted the request"
                return
            if not mt.ids:
                self.status, self.reason = "truncated", "the model produced no tokens (context full)"
                return
            reply = await env.step(turn, mt.text)
            self.rewards.append(float(reply["reward"]))
            record["reward"] = float(reply["reward"])
            if reply.get("replayed"):
                record["replayed"] = True
            if reply["done"]:
                self.ended = True
                self.validation = reply.get("validation")
                if self.validation is not None and self.validation.get("error"):
                    raise _Fail(f"terminal hook {self.validation.get('hook')} failed: {self.validation['error']}")
                if self.validation is not None and self.validation.get("invalid"):
                    # the env says its own infrastructure failed (LiveWeb's cache_error, a ground-truth
                    # system error): no evidence about the policy, so not trained on
                    raise _Fail(f"the env marked the episode invalid: {self.validation['invalid']}")
                if reply.get("truncated"):
                    self.status, self.reason = "truncated", "the env ended the episode early (its step limit)"
                return
            if turn == s.max_turns - 1:
                self.status, self.reason = "truncated", f"max_turns={s.max_turns} reached"
                return
            obs = {"role": s.observation_role, "content": reply.get("observation") or ""}
            if step_context:
                record["observation_chars"] = len(obs["content"])
                continue
            obs_ids, written = self._observation_tokens(obs, mt.ids, mt.finish_reason)
            record["observation_tokens"] = len(obs_ids)
            record["closing_written_by_model"] = written
            if len(self.resp_ids) + len(obs_ids) >= budget:
                self.status, self.reason = "truncated", "the next observation does not fit the response budget"
                return
            self._add(obs_ids, None, trainable=False)

    def _observation_tokens(self, obs: dict, model_ids: list[int], finish: Optional[str]) -> tuple[list[int], int]:
        """The ids that follow the model's turn for ``obs`` (a delta; the history is never re-rendered),
        and how many of the template's closing tokens the model wrote itself (not repeated)."""
        try:
            tail = self.chat.encode(self.chat.turn_tail(obs, self.system, **self.template_kwargs))
        except chat_mod.ChatTokenizerError as e:
            raise _Fail(str(e)) from None
        written = closing_overlap(model_ids, tail) if finish == "stop" else 0
        return tail[written:], written

    # --- the sample --------------------------------------------------------------------------
    def _fill(self, session_id: Optional[str], seconds: float) -> Any:
        if self.settings.context == "step" and self.finished:
            return self._fill_turns(session_id, seconds)
        return self._fill_one(self.sample, session_id, seconds)

    def _fill_turns(self, session_id: Optional[str], seconds: float) -> list:
        """``context: step``: one sample per model turn (slime's compact/fan-out shape), each its turn's
        prompt and response, all with the episode's reward and status and the parent's ``rollout_id``
        (slime counts them as one rollout; ``sample.index`` when unset, as slime's fan-out does)."""
        import copy

        turns = [*self.finished, (self.prompt_ids, self.resp_ids, self.mask, self.logprobs)]
        turns = [t for t in turns if t[1]] or turns[:1]  # a turn that generated nothing is no sample
        out = []
        rollout_id = self.sample.rollout_id if self.sample.rollout_id is not None else self.sample.index
        for k, (prompt, resp, mask, logprobs) in enumerate(turns):
            self.prompt_ids, self.resp_ids, self.mask, self.logprobs = prompt, resp, mask, logprobs
            smp = self._fill_one(copy.deepcopy(self.sample), session_id, seconds)
            smp.rollout_id = rollout_id
            smp.metadata["http_env_turn"] = k
            out.append(smp)
        return out

    def _fill_one(self, smp: Any, session_id: Optional[str], seconds: float) -> Any:
        status_enum = type(smp.status)
        failed = self.status == "failed"
        validation = None if self.validation is None else self.validation.get("reward")
        if not self.prompt_ids:  # the session never started: the task's prompt, so the sample has tokens
            first = [self.system] if self.system else []
            self.prompt_ids = self.chat.encode(self.chat.render(
                first + [{"role": "user", "content": str(smp.prompt)}], add_generation_prompt=True, **self.template_kwargs))
        smp.tokens = self.prompt_ids + self.resp_ids
        smp.response_length = len(self.resp_ids)
        smp.response = self.chat.decode(self.resp_ids)
        smp.loss_mask = [0] * len(self.mask) if failed else list(self.mask)
        smp.rollout_log_probs = list(self.logprobs)
        smp.reward = 0.0 if failed else aggregate(self.settings.reward, self.rewards, validation, self.ended)
        smp.status = status_enum(self.status)
        if failed:
            smp.remove_sample = True  # slime zeroes its loss mask; it is no evidence about the policy
        smp.metadata = dict(smp.metadata or {})
        smp.metadata["http_env_episode"] = {
            "session_id": session_id, "turns": len(self.turns), "per_turn": self.turns, "rewards": self.rewards,
            "validation": self.validation, "status_reason": self.reason, "errors": self.errors,
            "calls": self.stats.calls, "retries": self.stats.retries, "retried_after": self.stats.errors,
            "capacity_waits": self.stats.capacity_waits, "capacity_wait_s": round(self.stats.capacity_wait_s, 3),
            "seconds": round(seconds, 4), "evaluation": self.evaluation,
        }
        return smp


async def generate(args, sample, sampling_params, evaluation=False):
    """slime's custom generate signature; returns the sample with tokens, mask, log-probs, reward, status."""
    settings = run_settings(args)
    overrides = (sample.metadata or {}).get(CONFIG_KEY)
    chat = chat_mod.load(tokenizer_dir(args, settings))
    try:
        settings = with_overrides(settings, overrides, f"sample.metadata.{CONFIG_KEY}.")
    except ConfigErrors as e:  # a bad row fails its sample, not the run
        ep = Episode(args, sample, sampling_params, settings, chat, evaluation)
        ep._failed(f"bad sample.metadata.{CONFIG_KEY}: {e}")
        return ep._fill(None, 0.0)
    return await Episode(args, sample, sampling_params, settings, chat, evaluation).run()
