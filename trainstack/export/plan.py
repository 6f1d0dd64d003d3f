"""What an export reads and writes: the source checkpoint, the output directory, the provenance record,
and for slime checkpoints the converter's command."""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack.errors import ConfigError, ConfigErrors

PROVENANCE = "trainstack_export.json"  # in the export directory
CONVERTER = "tools/convert_torch_dist_to_hf.py"  # slime's, relative to the slime checkout


@dataclass(frozen=True)
class Export:
    spec: Any  # the source RunSpec
    iteration: int
    save_dir: str
    out: Path

    @property
    def checkpoint(self) -> str:
        from trainstack.storage.layout import iter_name

        return os.path.join(self.save_dir, iter_name(self.iteration))

    def provenance(self, how: str) -> dict[str, Any]:
        """What the export was made from (written beside the weights; the tiny writer also puts it in config.json)."""
        from trainstack.run.spec import checkout_state
        from trainstack.storage.checkpoints import Manifest

        try:
            manifest = Manifest.read(self.save_dir, self.iteration)
        except ValueError:
            manifest = None
        sha, dirty = checkout_state()
        from trainstack import __version__

        return {"source_run": self.spec.run_id, "source_run_dir": self.spec.run_dir, "iteration": self.iteration,
                "checkpoint": self.checkpoint, "checkpoint_sha256": dict(manifest.sha256) if manifest else None,
                "slime_commit": self.spec.provenance.slime_commit, "backend": self.spec.cluster.backend,
                "converter": how, "trainstack_version": __version__, "trainstack_git_sha": sha,
                "exported_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def plan(spec: Any, iteration: int | None, out: str | Path, force: bool) -> Export:
    """The checkpoint to export (default: the newest complete one) and where; ConfigErrors for what cannot be."""
    from trainstack.evals.plan import complete_iterations

    save_dir = spec.args.get("save") or str(Path(spec.run_dir) / "checkpoints")
    available = complete_iterations(save_dir)
    if not available:
        raise ConfigErrors([ConfigError("RUN", f"run {spec.run_id} has no complete checkpoint to export",
                                        "train it first (with args.save_interval set)", value=spec.run_id)])
    if iteration is None:
        iteration = available[-1]
    elif iteration not in available:
        raise ConfigErrors([ConfigError("--iter", f"run {spec.run_id} has no complete checkpoint at rollout {iteration}",
                                        f"pick one of {', '.join(map(str, available[-12:]))}", value=iteration)])
    target = Path(out).expanduser()
    if target.exists() and (not target.is_dir() or any(target.iterdir())) and not force:
        raise ConfigErrors([ConfigError("--to", f"{target} exists and is not empty", "pick a new directory, or "
                                        "add --force to write into it", value=str(target))])
    return Export(spec, iteration, save_dir, target)


def converter_argv(ex: Export, vocab_size: int | None = None) -> list[str]:
    """slime's torch_dist -> HF converter for this checkpoint: `--origin-hf-dir` is the run's --hf-checkpoint
    (its config, tokenizer and parameter names), `--vocab-size` drops Megatron's vocabulary padding."""
    root = str(ex.spec.command.get("cwd") or "slime").rstrip("/")
    argv = ["python3", f"{root}/{CONVERTER}", "--input-dir", ex.checkpoint, "--output-dir", str(ex.out)]
    origin = ex.spec.args.get("hf_checkpoint")
    if origin:
        argv += ["--origin-hf-dir", str(origin)]
    else:
        raise ConfigErrors([ConfigError("hf_checkpoint", f"run {ex.spec.run_id} names no --hf-checkpoint, which slime's "
                                        "converter needs for the model's config, tokenizer and parameter names",
                                        "export a run that has model.hf_checkpoint set", value=None)])
    if vocab_size:
        argv += ["--vocab-size", str(vocab_size)]
    if ex.out.exists():
        argv += ["--force"]  # plan() allowed writing into it
    return argv
