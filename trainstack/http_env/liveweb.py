"""LiveWeb-Arena behind the HTTP env protocol: its ``Actor`` (reset / step / stop) as an env.

Targets liveweb-arena commit ``350b4ff`` (2026-03-13, AffineFoundation/liveweb-arena): the last one
whose ``Actor.step(action, episode_id)`` parses text actions, one JSON object in the model's reply:

    {"action": {"type": "goto", "params": {"url": "https://..."}}}
    {"action": {"type": "stop", "params": {"format": "json", "final": {"answers": {"answer1": "..."}}}}}

(types: goto, click, type, press, scroll, view_more, wait, click_role, type_role, stop). From
``526f951`` on, ``step`` parses only OpenAI tool calls, which ``reset``/``step`` cannot carry, so
every text action fails to parse; the bridge refuses such a checkout (its
``liveweb_arena/core/agent_policy.py`` is gone).

Mapping: start -> ``reset(task_id, seed)`` with ``metadata.task_id`` / ``metadata.seed`` of the
sample; a row with only ``task_id`` gets the task id's own variation seed (``parse_task_id(task_id)
["variation_seed"]``, what ``Actor.evaluate`` uses), never ``reset``'s random one, so every sample of
a GRPO group, and a resumed run, gets the same task; step -> ``step(action, episode_id)`` (its reward is the step shaping reward; None is 0.0);
close -> ``stop(episode_id)``. LiveWeb's stop action ends the episode with reward 0.0 and no
answer validation, so the bridge's terminal hook (``validate_stop_answer``, the server runs it
before the session is closed) validates the answers the way ``Actor.evaluate`` does: ground truth
from the pages the episode visited, the LLM validator, and LiveWeb's terminal reward
(success / partial / truncation). An episode LiveWeb cut at its ``max_steps`` without an answer gets
the terminal reward of score 0 with the truncation penalty. An episode ended by an infrastructure
failure (``cache_error`` and the other failures ``Actor.evaluate`` reports as an error, or ground
truth that failed with a system error) is marked invalid (``validation.invalid``): the generate
function fails that sample (``remove_sample``), so it is not trained on as the agent's failure. Options (``--option KEY=VALUE``): ``root`` (the checkout with
``env.py``; default ``$LIVEWEB_ARENA_ROOT``), ``cache_dir``, ``use_cache``. Secrets (``API_KEY``,
``VALIDATOR_API_KEY``) come from the server's environment.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.http_env.envs import EpisodeLost, Started, Stepped, TaskError

TARGET_COMMIT = "350b4ff"
TEXT_PROTOCOL_MARKER = Path("liveweb_arena") / "core" / "agent_policy.py"  # removed in 526f951
ROOT_ENV = "LIVEWEB_ARENA_ROOT"
OPTIONS = ("root", "cache_dir", "use_cache")
LOST_EPISODE = ("episode_not_found", "no_episode_id")
# Failures Actor.evaluate (350b4ff) reports as an evaluation error: the system's, not the agent's.
INVALID_FAILURES = ("cache_error", "llm_error", "agent_timeout", "site_unreachable")
TASK_REGISTRY = Path("liveweb_arena") / "core" / "task_registry.py"


@lru_cache(maxsize=4)
def _task_registry(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("trainstack_liveweb_task_registry", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # stdlib only: no browser stack needed
    return module


def variation_seed(task_id: int, root: Optional[str]) -> int:
    """The seed ``Actor.evaluate`` gives a task id without a seed: ``parse_task_id(task_id)["variation_seed"]``
    from the checkout's own task registry (``liveweb_arena/core/task_registry.py``, loaded from its file)."""
    path = Path(root) / TASK_REGISTRY if root else None
    if path is None or not path.is_file():
        raise TaskError(f"metadata.task_id={task_id} without metadata.seed needs liveweb-arena's {TASK_REGISTRY} "
                        "(the task id's variation seed); give metadata.seed")
    try:
        return int(_task_registry(str(path)).parse_task_id(task_id)["variation_seed"])
    except ValueError as e:
        raise TaskError(f"metadata.task_id={task_id}: {e}") from None


def _get(resp: Any, name: str) -> Any:
    """A field of an OpenEnvResponse (an object) or of a plain dict."""
    if isinstance(resp, dict):
        return resp.get(name)
    return getattr(resp, name, None)


def load_actor_class(root: str) -> type:
    """``Actor`` from ``<root>/env.py`` of a liveweb-arena checkout, after checking it is one the bridge targets."""
    r = Path(root)
    if not (r / "env.py").is_file():
        raise ConfigErrors([ConfigError("serve.options.root", f"{r / 'env.py'} does not exist",
                                        f"point root (or ${ROOT_ENV}) at a liveweb-arena checkout", value=root)])
    if not (r / TEXT_PROTOCOL_MARKER).is_file():
        raise ConfigErrors([ConfigError(
            "serve.options.root", f"this liveweb-arena checkout has no {TEXT_PROTOCOL_MARKER}: from 526f951 on, "
            "Actor.step parses only tool calls, so every text action from reset/step fails to parse",
            f"check out {TARGET_COMMIT} (git -C {root} checkout {TARGET_COMMIT}); see docs/http_env.md", value=root)])
    if str(r) not in sys.path:
        sys.path.insert(0, str(r))  # env.py imports the liveweb_arena package next to it
    spec = importlib.util.spec_from_file_location("liveweb_arena_env", r / "env.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as e:
        raise ConfigErrors([ConfigError("serve.options.root", f"{r / 'env.py'} cannot be imported: {e}",
                                        "install liveweb-arena's requirements (pip install -e <root>, affinetes, "
                                        "playwright) in this environment", value=root)]) from None
    return module.Actor


class LiveWebEnv:
    name = "liveweb"
    default_terminal_hook = "trainstack.http_env.liveweb.validate_stop_answer"

    def __init__(self, actor: Any, root: Optional[str] = None):
        self.actor = actor
        self.root = root

    async def start(self, task: dict) -> Started:
        md = task.get("metadata") or {}
        task_id, seed = md.get("task_id"), md.get("seed")
        for key, v in (("task_id", task_id), ("seed", seed)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise TaskError(f"metadata.{key} must be an integer, got {v!r}")
        if task_id is None and seed is None:
            raise TaskError("a LiveWeb task needs metadata.task_id and/or metadata.seed (reset would draw a random "
                            "one, and a resumed run could not replay it)")
        if seed is None:  # reset would draw a random seed: the samples of a group would answer different tasks
            assert task_id is not None
            seed = variation_seed(task_id, self.root)
        resp = await self.actor.reset(task_id=task_id, seed=seed)
        episode_id = _get(resp, "episode_id")
        if not episode_id:
            raise RuntimeError(f"Actor.reset returned no episode_id: {_get(resp, 'info')}")
        return Started(episode_id, str(_get(resp, "observation") or ""), dict(_get(resp, "info") or {}))

    async def step(self, handle: Any, action: str) -> Stepped:
        resp = await self.actor.step(action, episode_id=handle)
        info = dict(_get(resp, "info") or {})
        err = info.get("error") or {}
        if isinstance(err, dict) and err.get("type") in LOST_EPISODE:
            raise EpisodeLost(f"the Actor lost episode {handle}: {err.get('type')}")
        reward = _get(resp, "reward")
        return Stepped(observation=_get(resp, "observation"), reward=float(reward or 0.0),
                       done=bool(_get(resp, "done")), truncated=bool(_get(resp, "truncated")), info=info)

    async def close(self, handle: Any) -> None:
        await self.actor.stop(episode_id=handle)


def make_env(options: dict) -> LiveWebEnv:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigErrors([ConfigError(f"serve.options.{unknown[0]}", "liveweb has no such option",
                                        f"liveweb takes: {', '.join(OPTIONS)}", value=options[unknown[0]])])
    root = options.get("root") or os.environ.get(ROOT_ENV)
    if not root:
        raise ConfigErrors([ConfigError("serve.options.root", "no liveweb-arena checkout given",
                                        f"--option root=/path/to/liveweb-arena (at {TARGET_COMMIT}), or export "
                                        f"{ROOT_ENV}")])
    actor_cls = load_actor_class(str(root))
    kwargs: dict[str, Any] = {}
    if options.get("cache_dir"):
        kwargs["cache_dir"] = Path(options["cache_dir"])
    if options.get("use_cache") is not None:
        kwargs["use_cache"] = bool(options["use_cache"])
    return LiveWebEnv(actor_cls(**kwargs), str(root))


# --- the terminal hook: validate the stop action's answers -------------------------------------
async def validate_stop_answer(ctx: Any) -> Optional[dict]:
    """LiveWeb's answer validation for the episode that just ended (``Actor.evaluate``'s steps, at
    liveweb-arena 350b4ff): ground truth collected from the pages visited (plus API ground truth),
    answers parsed from the stop action, the LLM validator per subtask, then the terminal reward of
    the episode's reward calculator. An episode ended by an infrastructure failure is ``invalid``
    (not trained on); one cut at LiveWeb's ``max_steps`` gets the truncation penalty (score 0)."""
    actor = ctx.env.actor
    episode = actor._episodes.get(ctx.handle)  # pinned internals (350b4ff): the episode's task, GT and rewards
    if episode is None:
        raise EpisodeLost(f"episode {ctx.handle} is gone before its answers were validated")
    failure = getattr(episode, "failure_reason", None)
    if failure in INVALID_FAILURES:
        return {"reward": 0.0, "invalid": f"{failure}: LiveWeb's infrastructure failed, not the agent",
                "failure_reason": failure}
    if episode.final_answer is None:
        if not episode.truncated:
            return None
        cut = episode.reward_calculator.calculate_terminal_reward(
            validation_score=0.0, steps_used=episode.current_step, max_steps=episode.max_steps, truncated=True)
        return {"reward": float(cut.total), "score": 0.0, "success": False, "truncated": True,
                "failure_reason": failure}
    from liveweb_arena.core.gt_collector import set_current_gt_collector
    from liveweb_arena.core.parser import AnswerParser
    from liveweb_arena.core.validators.llm_validator import validate_answers_with_llm
    from liveweb_arena.utils.llm_client import LLMClient

    subtasks = list(episode.task.subtasks)
    set_current_gt_collector(episode.gt_collector)  # hybrid templates read ground truth through this global
    try:
        await episode.gt_collector.fetch_remaining_api_gt()
    finally:
        set_current_gt_collector(None)
    truths, missing = {}, {}
    for st in subtasks:
        value = episode.gt_collector.get_gt_for_subtask(st)
        if value is None:
            missing[st.answer_tag] = episode.gt_collector.get_failure_reason(st)
        else:
            truths[st.answer_tag] = value
    is_system_error = getattr(episode.gt_collector, "is_system_error", lambda st: False)
    system_errors = [f"[{st.answer_tag}] {missing[st.answer_tag]}" for st in subtasks
                     if st.answer_tag in missing and is_system_error(st)]
    if system_errors:  # Actor.evaluate: a GT system error makes the evaluation invalid
        return {"reward": 0.0, "invalid": f"ground truth system error: {'; '.join(system_errors)}"}
    answers = AnswerParser().parse_answers(episode.final_answer, len(subtasks))
    rules = {}
    for st in subtasks:
        plugin = actor.task_manager.get_plugin(st.plugin_name)
        if hasattr(plugin, "get_validation_rules"):
            rules[st.answer_tag] = plugin.get_validation_rules(st.validation_info)
    verdicts = [{"answer_tag": tag, "score": 0.0, "is_correct": False, "actual": answers.get(tag),
                 "reasoning": f"ground truth not collected: {why}"} for tag, why in missing.items()]
    todo = [st for st in subtasks if st.answer_tag not in missing]
    if todo:
        base_url = os.environ.get("VALIDATOR_BASE_URL")
        api_key = os.environ.get("VALIDATOR_API_KEY") or actor.api_key
        if not base_url or not api_key:
            raise RuntimeError("the LLM validator needs VALIDATOR_BASE_URL and VALIDATOR_API_KEY (or API_KEY) in the "
                               "env server's environment")
        client = LLMClient(base_url=base_url, api_key=api_key)
        verdicts += await validate_answers_with_llm(llm_client=client, subtasks=todo, answers=answers,
                                                    ground_truths=truths, validation_rules=rules)
    score = sum(float(v["score"]) for v in verdicts) / len(verdicts) if verdicts else 0.0
    terminal = episode.reward_calculator.calculate_terminal_reward(
        validation_score=score, steps_used=episode.current_step, max_steps=episode.max_steps,
        truncated=bool(episode.truncated))
    return {"reward": float(terminal.total), "score": score, "success": score >= 0.8,
            "answers": {v.get("answer_tag"): {k: v.get(k) for k in ("score", "actual", "expected", "reasoning")}
                        for v in verdicts}}
