"""Stand-in for liveweb-arena's env.py at 350b4ff: Actor with the same reset/step/stop signatures.

A task has one subtask whose answer is on a page: ``goto`` that page, then ``stop`` with the
answer. Step shaping: +0.1 for a new page, -0.08 for an unparsable action; the stop action
returns reward 0.0 and no validation, as the real one does.
"""
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from liveweb_arena.core.agent_policy import AgentPolicy

PAGES = {"https://prices.example/item/{n}": "Item {n} costs {price} coins."}


@dataclass
class OpenEnvResponse:
    observation: str = ""
    episode_id: Optional[str] = None
    reward: float = 0.0
    done: bool = False
    truncated: bool = False
    info: Dict[str, Any] = field(default_factory=dict)


@dataclass
class SubTask:
    answer_tag: str
    intent: str
    plugin_name: str
    validation_info: dict


@dataclass
class CompositeTask:
    subtasks: list


class GTCollector:
    def __init__(self, truth: str):
        self.truth, self.visited = truth, False

    async def fetch_remaining_api_gt(self):
        from liveweb_arena.core.gt_collector import get_current_gt_collector

        assert get_current_gt_collector() is self, "the real one reads ground truth through the current collector"

    def get_gt_for_subtask(self, subtask):
        return self.truth if self.visited else None

    def get_failure_reason(self, subtask):
        return "the answer page was never visited"


@dataclass
class Breakdown:
    total: float


class StepwiseRewardCalculator:
    def calculate_terminal_reward(self, validation_score, steps_used, max_steps, truncated):
        total = (-0.25 if truncated else 0.0) + (2.0 if validation_score >= 0.8 else 0.7 * validation_score)
        return Breakdown(total)


@dataclass
class EpisodeState:
    episode_id: str
    task_id: Optional[int]
    seed: int
    task: CompositeTask
    gt_collector: GTCollector
    policy: AgentPolicy
    url: str
    current_step: int = 0
    max_steps: int = 5
    done: bool = False
    truncated: bool = False
    final_answer: Optional[dict] = None
    reward_calculator: StepwiseRewardCalculator = field(default_factory=StepwiseRewardCalculator)


class Plugin:
    def get_validation_rules(self, validation_info):
        return "exact"


class TaskManager:
    def get_plugin(self, name):
        return Plugin()


class Actor:
    def __init__(self, api_key: str = None, cache_dir=None, use_cache: bool = True):
        self.api_key = api_key or "standin-key"
        self.task_manager = TaskManager()
        self._episodes: Dict[str, EpisodeState] = {}
        self.stopped = []

    async def reset(self, task_id: Optional[int] = None, seed: Optional[int] = None) -> OpenEnvResponse:
        n = task_id if task_id is not None else seed
        st = SubTask("answer1", f"What does item {n} cost?", "prices", {"item": n})
        ep = EpisodeState(uuid.uuid4().hex, task_id, seed or 0, CompositeTask([st]), GTCollector(str(7 * n)),
                          AgentPolicy(), "about:blank")
        self._episodes[ep.episode_id] = ep
        return OpenEnvResponse(observation=f"Task: what does item {n} cost? Pages: https://prices.example/item/<n>",
                               episode_id=ep.episode_id, info={"task_id": task_id, "seed": seed})

    async def step(self, action: str, episode_id: Optional[str] = None) -> OpenEnvResponse:
        ep = self._episodes.get(episode_id)
        if ep is None:
            return OpenEnvResponse(observation="not found", done=True, truncated=True,
                                   info={"error": {"type": "episode_not_found", "retryable": True}})
        parsed = ep.policy.parse_response(action)
        if parsed is None:
            ep.current_step += 1
            return OpenEnvResponse(observation="Action parse failed.", episode_id=episode_id, reward=-0.08,
                                   info={"error": {"type": "action_parse", "retryable": True}})
        if parsed.action_type == "stop":
            ep.done = True
            final = parsed.params.get("final", {})
            ep.final_answer = final if final else parsed.params
            return OpenEnvResponse(observation="Task completed. Episode finished.", episode_id=episode_id,
                                   reward=0.0, done=True, info={"final_answer": ep.final_answer})
        ep.current_step += 1
        reward = 0.0
        if parsed.action_type == "goto":
            url = parsed.params.get("url", "")
            n = ep.task.subtasks[0].validation_info["item"]
            if url == f"https://prices.example/item/{n}":
                ep.gt_collector.visited = True
                reward = 0.1
            ep.url = url
        if ep.current_step >= ep.max_steps:
            ep.done = ep.truncated = True
        n = ep.task.subtasks[0].validation_info["item"]
        page = f"Item {n} costs {7 * n} coins." if ep.gt_collector.visited else "Nothing here."
        return OpenEnvResponse(observation=f"URL: {ep.url}\n{page}", episode_id=episode_id, reward=reward,
                               done=ep.done, truncated=ep.truncated, info={"current_step": ep.current_step})

    async def stop(self, episode_id: Optional[str] = None) -> Dict[str, Any]:
        ep = self._episodes.pop(episode_id, None)
        self.stopped.append(episode_id)
        return {"status": "ok", "stopped": ep is not None, "episode_id": episode_id}

