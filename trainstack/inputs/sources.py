"""Where a run's inputs come from, read from its config: a model repo, dataset repos, a conversion.

Why one reader: the dry run (plan), the launch (prepare), the preflight (paths a launch will
create) and the run id (pinned revisions) must all agree on what a run's inputs are.

A model source: `model.meta.hf_repo` + `model.meta.revision` (default "main", a branch resolved to
a commit sha at prepare time and recorded in the run). Its download lands at `hf_checkpoint`; when
`ref_load` names a directory, that is the torch_dist conversion of the download. A local path
works as before: set `model.meta.hf_repo=null`, or point the dest at an existing directory that
trainstack did not make (it is used as it is).

A dataset source: one entry of `env.meta.data`:
    {repo: zhuzilin/dapo-math-17k, revision: main, files: {dapo-math-17k.jsonl: dapo-math-17k/dapo-math-17k.jsonl},
     transform: null | keys | openhermes | pkg.module.fn, keys: {question: prompt}}
`files` maps a file of the repo to a path under `paths.data_root`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from trainstack.errors import ConfigError

DEFAULT_REVISION = "main"
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
TRANSFORMS = ("keys", "openhermes")


def pinned(revision: str) -> bool:
    """A commit sha names fixed content; a branch or tag can move."""
    return bool(SHA_RE.match(revision))


@dataclass(frozen=True)
class ModelSource:
    repo: str
    revision: str
    hf_dir: str  # where the download is linked (the hf_checkpoint dest)
    torch_dist_dir: str | None  # where the conversion is linked (ref_load), None: no conversion
    models_root: str


@dataclass(frozen=True)
class DatasetSource:
    repo: str
    revision: str
    files: dict[str, str]  # repo file -> absolute target path (under data_root)
    transform: str | None
    keys: dict[str, str] = field(default_factory=dict)
    data_root: str = ""


@dataclass
class Sources:
    model: ModelSource | None
    datasets: list[DatasetSource]

    def paths(self) -> list[str]:
        """Every path a prepare step creates (the preflight trusts these to appear)."""
        out: list[str] = []
        if self.model:
            out += [self.model.hf_dir] + ([self.model.torch_dist_dir] if self.model.torch_dist_dir else [])
        for d in self.datasets:
            out += list(d.files.values())
        return out

    def identity(self) -> dict[str, str]:
        """Pinned sources by content (repo@sha, transform) for the run id; a floating revision is
        resolved at prepare time and recorded in the run instead (it cannot be known offline)."""
        out = {}
        if self.model and pinned(self.model.revision):
            out["model"] = f"{self.model.repo}@{self.model.revision}"
        for d in self.datasets:
            if pinned(d.revision):
                out[f"data:{d.repo}"] = f"{d.repo}@{d.revision} {d.transform or ''} {sorted(d.keys.items())}"
        return out


def _meta(config: Mapping[str, Any], group: str) -> Mapping[str, Any]:
    block = config.get(group) or {}
    meta = block.get("meta") if isinstance(block, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def _root(config: Mapping[str, Any], name: str, args: Mapping[str, Any]) -> str:
    paths = config.get("paths") or {}
    return os.path.abspath(str(paths.get(name) or name.split("_")[0]))


def read(config: Mapping[str, Any], args: Mapping[str, Any]) -> tuple[Sources, list[ConfigError]]:
    """The run's sources from its resolved config tree and args, and what is wrong with them."""
    errors: list[ConfigError] = []
    model = None
    mmeta = _meta(config, "model")
    repo = mmeta.get("hf_repo")
    hf_dir = args.get("hf_checkpoint")
    if repo:
        revision = mmeta.get("revision") or DEFAULT_REVISION
        if not isinstance(repo, str) or repo.count("/") != 1:
            errors.append(ConfigError("model.meta.hf_repo", "is not a Hugging Face repo id (owner/name)",
                                      "e.g. model.meta.hf_repo=Qwen/Qwen3-4B, or null to use local paths", value=repo))
        elif hf_dir is None:  # no HF checkpoint in this run (slime accepts that): nothing to download for it
            pass
        elif not isinstance(hf_dir, str):
            errors.append(ConfigError("model.hf_checkpoint", f"model.meta.hf_repo={repo} needs a directory to "
                                      "download it to", "set model.hf_checkpoint=${paths.models_root}/<Name>",
                                      value=hf_dir))
        else:
            ref = args.get("ref_load")
            model = ModelSource(repo, str(revision), hf_dir, ref if isinstance(ref, str) and ref else None,
                                _root(config, "models_root", args))
    datasets = []
    data = _meta(config, "env").get("data") or []
    data_root = _root(config, "data_root", args)
    if not isinstance(data, list):
        errors.append(ConfigError("env.meta.data", "must be a list of dataset sources",
                                  "e.g. [{repo: owner/name, files: {train.jsonl: name/train.jsonl}}]", value=data))
        data = []
    for i, entry in enumerate(data):
        key = f"env.meta.data[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("repo"), str) \
                or not isinstance(entry.get("files"), Mapping) or not entry["files"]:
            errors.append(ConfigError(key, "needs `repo` (owner/name) and `files` ({file in the repo: path under "
                                      "paths.data_root})", "e.g. {repo: zhuzilin/aime-2024, files: "
                                      "{aime-2024.jsonl: aime-2024/aime-2024.jsonl}}", value=entry))
            continue
        if entry["repo"].count("/") != 1 or not all(entry["repo"].split("/")):
            errors.append(ConfigError(f"{key}.repo", "is not a Hugging Face dataset repo id (owner/name)",
                                      "e.g. repo: zhuzilin/dapo-math-17k", value=entry["repo"]))
            continue
        transform = entry.get("transform")
        if transform is not None and transform not in TRANSFORMS and "." not in str(transform):
            errors.append(ConfigError(f"{key}.transform", f"unknown transform {transform!r}",
                                      f"one of {', '.join(TRANSFORMS)}, a dotted path pkg.module.fn, or null",
                                      value=transform))
            continue
        files = {str(src): os.path.join(data_root, str(dst)) for src, dst in entry["files"].items()}
        datasets.append(DatasetSource(entry["repo"], str(entry.get("revision") or DEFAULT_REVISION), files,
                                      transform, dict(entry.get("keys") or {}), data_root))
    return Sources(model, datasets), errors
