"""slime's ``Sample`` (slime/utils/types.py) with the same field names and status values.

A reward or generate function written for slime reads and writes these fields; keeping the
names identical is what lets the same plugin file run on both backends. No torch import.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Optional, Union


@dataclass
class Sample:
    """One prompt/response pair as it flows through rollout, reward and training."""

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    group_index: Optional[int] = None
    index: Optional[int] = None
    rollout_id: Optional[int] = None
    # prompt side
    prompt: Union[str, list[dict[str, str]]] = ""
    tokens: list[int] = field(default_factory=list)  # prompt + response ids (prefilled with the prompt ids here)
    multimodal_inputs: Any = None
    multimodal_train_inputs: Any = None
    multimodal_train_input_id: Any = None
    apply_chat_template_kwargs: Optional[dict] = None
    # response side
    response: str = ""
    response_length: int = 0
    label: Optional[str] = None
    reward: Optional[Union[float, dict[str, Any]]] = None
    loss_mask: Optional[list[int]] = None
    weight_versions: list[str] = field(default_factory=list)
    # replay
    rollout_log_probs: Optional[list[float]] = None
    rollout_top_p_token_ids: Any = None
    rollout_top_p_token_offsets: Any = None
    rollout_routed_experts: Any = None
    teacher_log_probs: Optional[list[float]] = None
    # control
    remove_sample: bool = False
    status: "Sample.Status" = Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: Optional[str] = None
    custom_rm_path: Optional[str] = None
    train_metadata: Optional[dict] = None
    session_id: Optional[str] = None
    non_generation_time: float = 0.0
    # stats
    spec_info: dict = field(default_factory=dict)
    prefix_cache_info: dict = field(default_factory=dict)

    def append_response_tokens(self, args, tokens: list[int], log_probs: Optional[list[float]] = None,
                               trainable: bool = True, meta_info: Optional[dict] = None, text: Optional[str] = None):
        """Append response tokens keeping tokens / loss_mask / rollout_log_probs aligned (slime helper)."""
        tokens = list(tokens)
        self.tokens = list(self.tokens) + tokens
        self.response_length += len(tokens)
        self.loss_mask = list(self.loss_mask or []) + [1 if trainable else 0] * len(tokens)
        lp = list(log_probs) if log_probs is not None else [0.0] * len(tokens)
        self.rollout_log_probs = list(self.rollout_log_probs or []) + lp
        if text is not None:
            self.response += text

    def get_reward_value(self, args) -> float:
        """The scalar reward: a dict reward is indexed by --reward-key (slime semantics)."""
        r = self.reward
        if isinstance(r, dict):
            key = getattr(args, "reward_key", None)
            if key is None:
                raise ValueError("dict reward needs --reward-key")
            return float(r[key])
        if r is None:
            raise ValueError("sample has no reward")
        return float(r)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["status"] = self.status.value
        return d

    @staticmethod
    def from_dict(d: dict) -> "Sample":
        d = dict(d)
        d["status"] = Sample.Status(d.get("status", "pending"))
        return Sample(**{k: v for k, v in d.items() if k in Sample.__dataclass_fields__})
