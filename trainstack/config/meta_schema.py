"""The `meta` block of each dest namespace (model/algo/env/args), typed: what a preset says about
itself (name, description, Hub repo, size) and the hooks trainstack runs for it (the env's data
`prepare` hook, its `data` sources, its `http_env`). A misspelled key (`env.meta.htp_env`) used to
be carried silently and its feature never ran; `env.meta=5` ended in a traceback. Unknown keys are
refused with a did-you-mean, values by type and domain (issue #36). The features check the content
of the blocks they own (`data`: trainstack/inputs, `http_env`: trainstack/http_env).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional

from trainstack.errors import ConfigError


@dataclass
class ModelMeta:
    """`model.meta`: docs/models.md, docs/inputs.md."""

    name: Optional[str] = None
    description: Optional[str] = None
    hf_repo: Optional[str] = None  # owner/name on the Hugging Face Hub (null: the paths are yours)
    revision: Optional[str] = None  # branch, tag or commit of hf_repo
    params: Optional[int] = None  # parameters: sizes one checkpoint (the free-space check)
    params_source: Optional[str] = None
    source: Optional[str] = None  # where the preset's architecture comes from (slime's scripts/models/...)
    family: Optional[str] = None
    backends: Optional[list[str]] = None  # the backends that can train it (tiny: no HF weights)

    BACKENDS = ("slime", "tiny")

    def problems(self) -> list[tuple[str, Any, str, str]]:
        out: list[tuple[str, Any, str, str]] = []
        if self.params is not None and self.params < 1:
            out.append(("params", self.params, "must be a positive number of parameters",
                        "set it to the model's parameter count, or null"))
        for b in self.backends or []:
            if b not in self.BACKENDS:
                out.append(("backends", b, f"{b!r} is not a backend", f"use some of: {', '.join(self.BACKENDS)}"))
        if self.hf_repo is not None and (self.hf_repo.count("/") != 1 or not all(self.hf_repo.split("/"))):
            out.append(("hf_repo", self.hf_repo, "is not a Hugging Face repo id (owner/name)",
                        "e.g. model.meta.hf_repo=Qwen/Qwen3-4B, or null to use local paths"))
        return out


@dataclass
class AlgoMeta:
    """`algo.meta`."""

    name: Optional[str] = None
    description: Optional[str] = None
    entrypoint: Optional[str] = None  # the slime script the algorithm needs (slime.entrypoint wins)

    CHOICES = {"entrypoint": (None, "train.py", "train_async.py")}


@dataclass
class EnvMeta:
    """`env.meta`: docs/config.md, docs/inputs.md (data), docs/http_env.md (http_env)."""

    name: Optional[str] = None
    description: Optional[str] = None
    prepare: Optional[str] = None  # pkg.module.fn(data_root): writes the env's data at launch
    data: Optional[list[Any]] = None  # dataset sources downloaded at launch (trainstack/inputs checks them)
    http_env: Optional[dict[str, Any]] = None  # an HTTP environment (trainstack/http_env checks it)

    def problems(self) -> list[tuple[str, Any, str, str]]:
        if self.prepare is not None and not (len(self.prepare.split(".")) >= 2
                                             and all(p.isidentifier() for p in self.prepare.split("."))):
            return [("prepare", self.prepare, "not a dotted path package.module.function",
                     "e.g. env.meta.prepare=trainstack.tiny.arithmetic.prepare, or null")]
        return []


@dataclass
class ArgsMeta:
    """`args.meta`: nothing is read from it."""


META_CLASSES: dict[str, type] = {"model": ModelMeta, "algo": AlgoMeta, "env": EnvMeta, "args": ArgsMeta}


def check(ns: str, node: Any, source_of: Callable[[str], str]) -> tuple[dict[str, Any], list[ConfigError]]:
    """(the block as a plain dict, what is wrong with it) for `<ns>.meta`."""
    from trainstack.config.schema import to_typed

    key = f"{ns}.meta"
    if node is None:
        return {}, []
    if not isinstance(node, dict):
        fields = ", ".join(f.name for f in dataclasses.fields(META_CLASSES[ns])) or "nothing"
        return {}, [ConfigError(key, f"must be a mapping of what the {ns} says about itself ({fields})",
                                f"remove {key}=..., or set keys of it ({key}.name=...)", value=node,
                                source=source_of(key))]
    _, errors = to_typed(META_CLASSES[ns], node, f"{key}.", source_of)
    return node, errors
