"""Prompt data and the global-dataset cursor, with slime's RolloutDataSource semantics.

The cursor (sample_offset, epoch_id, sample_group_index, sample_index) is what makes a
resumed run draw exactly the prompts the uninterrupted run would have drawn; the shuffle
of epoch ``e`` is a pure function of ``seed + e`` like slime's ``Dataset.shuffle``.
"""
from __future__ import annotations

import copy
import json
import os
import random
from dataclasses import asdict, dataclass

from .sample import Sample
from .tokenizer import CharTokenizer


def read_prompts(path: str, input_key: str, label_key: str | None, metadata_key: str = "metadata") -> list[Sample]:
    """jsonl (or a json list) -> Samples with prompt/label/metadata; prompt ids prefilled in ``tokens``."""
    tok = CharTokenizer()
    rows: list[dict] = []
    with open(path, encoding="utf-8") as f:
        if path.endswith(".json"):
            rows = json.load(f)
        else:
            rows = [json.loads(line) for line in f if line.strip()]
    out = []
    for i, r in enumerate(rows):
        if input_key not in r:
            raise KeyError(f"{path}:{i + 1}: no key {input_key!r} (set --input-key)")
        prompt = r[input_key]
        out.append(Sample(prompt=prompt, tokens=tok.encode(str(prompt)), label=r.get(label_key) if label_key else None,
                          metadata=dict(r.get(metadata_key) or {})))
    return out


@dataclass
class CursorState:
    sample_offset: int = 0
    epoch_id: int = 0
    sample_group_index: int = 0
    sample_index: int = 0
    metadata: dict | None = None


class DataSource:
    """``get_samples(n)`` -> n groups of n_samples_per_prompt deep copies, advancing the cursor."""

    def __init__(self, args):
        self.args = args
        self.state = CursorState(metadata={})
        self.base: list[Sample] | None = None
        self.order: list[int] = []
        if args.rollout_global_dataset:
            self.base = read_prompts(args.prompt_data, args.input_key, args.label_key, args.metadata_key)
            self._shuffle(0)

    def __len__(self) -> int:
        return len(self.base) if self.base is not None else 0

    def _shuffle(self, epoch_id: int) -> None:
        self.order = list(range(len(self)))
        if self.args.rollout_shuffle:
            random.Random(self.args.seed + epoch_id).shuffle(self.order)

    def get_samples(self, num_samples: int) -> list[list[Sample]]:
        st, a = self.state, self.args
        if self.base is None:
            prompts = [Sample() for _ in range(num_samples)]
        else:
            n = len(self.base)
            picked: list[int] = []
            while len(picked) < num_samples:
                take = min(num_samples - len(picked), n - st.sample_offset)
                picked += self.order[st.sample_offset:st.sample_offset + take]
                st.sample_offset += take
                if st.sample_offset >= n and len(picked) < num_samples:
                    st.epoch_id += 1
                    st.sample_offset = 0
                    self._shuffle(st.epoch_id)
            prompts = [self.base[i] for i in picked]
        groups = []
        for p in prompts:
            group = []
            for _ in range(a.n_samples_per_prompt):
                s = copy.deepcopy(p)
                s.group_index = st.sample_group_index
                s.index = st.sample_index
                st.sample_index += 1
                group.append(s)
            st.sample_group_index += 1
            groups.append(group)
        return groups

    # --- persistence: {dir}/rollout/global_dataset_state_dict_{rollout_id}.pt ---
    @staticmethod
    def state_path(ckpt_dir: str, rollout_id: int) -> str:
        from trainstack.checkpoints import data_cursor

        return os.path.join(ckpt_dir, data_cursor(rollout_id))

    def cursor_bytes(self) -> bytes | None:
        """The cursor as saved with a checkpoint (None without the global dataset, as slime)."""
        if self.base is None:
            return None
        from .checkpoint import torch_bytes

        return torch_bytes(asdict(self.state))

    def load(self, ckpt_dir: str | None, rollout_id: int) -> bool:
        if self.base is None or ckpt_dir is None or rollout_id < 0:
            return False
        path = self.state_path(ckpt_dir, rollout_id)
        if not os.path.exists(path):
            return False
        import torch

        d = torch.load(path, weights_only=False)
        self.state = CursorState(**{k: d.get(k, getattr(CursorState(), k)) for k in CursorState.__dataclass_fields__})
        self._shuffle(self.state.epoch_id)
        return True
