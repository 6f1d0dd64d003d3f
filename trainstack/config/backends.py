"""The trainers trainstack can start, described once: entrypoint, whether they need Ray, and what
they implement. The validator and the tiny trainer read the same objects, so they cannot drift."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """What a backend implements (checked before launch and by the trainer itself)."""

    estimators: tuple[str, ...]
    loss_types: tuple[str, ...]
    max_params: int | None = None  # largest model it can train


@dataclass(frozen=True)
class Backend:
    name: str
    needs_ray: bool  # the trainer joins a Ray cluster (slime: one head per job)
    module: str | None = None  # `python -m <module>` entrypoint; None: `python3 <slime.root>/<entrypoint>`
    capabilities: Capabilities | None = None  # None: everything slime's parser accepts
    extra: str | None = None  # the pip extra whose modules its trainer imports here (trainstack/extras.py)
    imports: tuple[str, ...] = ()  # those modules (the extra may hold more, for other uses)
    # a function (dotted path) the trainer calls before it loads plugins; the plugin probe calls it too
    # (trainstack/preflight/plugin_probe.py). The tiny trainer makes slime's own modules importable from the submodule
    # (its `load`, less an import that only saves time).
    prelude: str | None = None


TINY_CAPABILITIES = Capabilities(
    estimators=("grpo", "gspo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"),
    loss_types=("policy_loss",),
    max_params=50_000_000,
)

# Exit codes a trainer uses for a reason of its own; the launcher records the reason in status.json.
EXIT_REASONS: dict[int, str] = {
    9: "stopped: too many failed or aborted samples (rollout/failed_frac above the threshold for N rollouts, "
       "or every sample of the last rollout failed; docs/tiny_trainer.md, Failed samples)",
}

SLIME = Backend("slime", needs_ray=True)
TINY = Backend("tiny", needs_ray=False, module="trainstack.tiny.train", capabilities=TINY_CAPABILITIES, extra="cpu",
               imports=("torch", "numpy", "transformers", "tensorboard", "pylatexenc", "jinja2", "httpx", "aiohttp"),
               prelude="trainstack.tiny.slime_upstream.make_importable")
BACKENDS: dict[str, Backend] = {b.name: b for b in (SLIME, TINY)}


def backend(name: str) -> Backend:
    return BACKENDS[name]
