"""Named hook points: how a feature (Hub sync, HTTP envs, the tiny trainer, a third party's) joins
the core without the core importing it.

Why: the core (compose, resolve, validate, render, spec, preflight, lifecycle) must run, and be
read, without knowing which features exist. Each place where a feature may add something is one
named `HookPoint` below, with the signature its hooks have; the core asks `hooks.get(POINT)` and
calls what it gets, in a fixed order. A feature says what it adds in one `register(registry)`
function, found through the `trainstack.features` entry-point group (`trainstack/features.py`).

This module imports nothing of trainstack: the core's objects (ResolvedRun, RunSpec, RunDir, a
lease, a resume plan) reach the hooks as arguments, typed here only by what the hooks use.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Mapping, Optional, Protocol, TypeVar

F = TypeVar("F")


@dataclass(frozen=True)
class HookPoint(Generic[F]):
    """One place in the core where features may add behaviour; `F` is the hooks' signature."""

    name: str
    why: str


# ------------------------------------------------------------------------------------------
# What hooks receive and return (Protocols: the core's own classes fit them as they are)
# ------------------------------------------------------------------------------------------
class RemoteCheckpoint(Protocol):
    """A copy of a run's checkpoints elsewhere (the Hub), as a resume plan sees it."""

    @property
    def source(self) -> str:
        """ResumePlan.source when it wins over the run dir ("hub")."""

    @property
    def record(self) -> Optional[dict[str, Any]]:
        """Its newest checkpoint's record (iteration, args, inputs); None: nothing there yet."""

    @property
    def latest(self) -> Optional[int]:
        """That checkpoint's iteration."""

    @property
    def where(self) -> str:
        """For messages: "the Hub (alice/ckpts)"."""

    @property
    def where_at(self) -> str:
        """For messages, at the version read: "the Hub (alice/ckpts@0f3c...)"."""


@dataclass
class RunContext:
    """One execution of a stored run, as the lifecycle hooks see it (the lease is held)."""

    spec: Any  # trainstack.run.spec.RunSpec
    rundir: Any  # trainstack.run.rundir.RunDir
    lease: Any  # trainstack.fencing.lease.Lease
    plan: Any  # trainstack.run.resume.ResumePlan


class Companion(Protocol):
    """What a feature keeps running beside the trainer (the Hub's sync worker)."""

    def on_signal(self, signum: int, grace_s: float) -> None:
        """The launcher got SIGINT/SIGTERM/SIGHUP; the trainer has `grace_s` for a final checkpoint."""

    def after_trainer(self, signalled: Optional[int]) -> None:
        """The trainer has exited; runs before the run's exit is recorded."""


IdentityHook = Callable[[Mapping[str, Any]], Mapping[str, Any]]  # the run's meta -> extra run_id inputs
RuleHook = Callable[[Any], list]  # validate.Ctx -> [ConfigError]
PreflightHook = Callable[[Any, Any, Callable[[str], bool]], list]  # (run, cmd, made_by_data_hook) -> [ConfigError]
ResumeLookupHook = Callable[[Any, Optional[int], bool], Optional[RemoteCheckpoint]]  # (run, local latest, dry)
DryRunNotesHook = Callable[[Any], list]  # ResolvedRun -> [str]
WrapRunnerHook = Callable[[Any, Callable], Callable]  # (spec, start) -> start
BeforeTrainerHook = Callable[[RunContext], None]
TrainerStartedHook = Callable[[RunContext], Optional[Companion]]
LaunchFilesHook = Callable[[Mapping[str, Any], Mapping[str, Any]], Mapping[str, str]]  # (config, args) -> files
CliHook = Callable[[Any], None]  # argparse subparsers -> None (adds commands)

IDENTITY: HookPoint[IdentityHook] = HookPoint(
    "resolve.identity", "feature settings that change what is trained are part of the run_id hash")
RULES: HookPoint[RuleHook] = HookPoint(
    "validate.rules", "cross-field rules beyond the core's own (upstream ports, a feature's config block)")
PREFLIGHT: HookPoint[PreflightHook] = HookPoint(
    "preflight.check", "a backend's own checks of the rendered run, before anything is written")
RESUME_LOOKUP: HookPoint[ResumeLookupHook] = HookPoint(
    "resume.lookup", "a newer checkpoint held elsewhere wins over the run dir's; `dry` lookups may skip the network")
DRY_RUN_NOTES: HookPoint[DryRunNotesHook] = HookPoint(
    "display.dry_run_notes", "what a launch will do that the dry run only describes (a server, a remote lookup)")
WRAP_RUNNER: HookPoint[WrapRunnerHook] = HookPoint(
    "lifecycle.wrap_runner", "processes that live exactly as long as the trainer (an env server)")
BEFORE_TRAINER: HookPoint[BeforeTrainerHook] = HookPoint(
    "lifecycle.before_trainer", "with the lease held and the plan made, before the trainer (or a finished "
    "run's report): bring a remote checkpoint in, push what a remote copy missed")
TRAINER_STARTED: HookPoint[TrainerStartedHook] = HookPoint(
    "lifecycle.trainer_started", "work beside the trainer that hears its signals and ends after it (Hub sync)")
LAUNCH_FILES: HookPoint[LaunchFilesHook] = HookPoint(
    "render.launch_files", "files a launch writes before the trainer that its argv names (for the parse oracle)")
CLI: HookPoint[CliHook] = HookPoint("cli.commands", "a feature's own `trainstack` subcommands")

POINTS: tuple[HookPoint[Any], ...] = (IDENTITY, RULES, PREFLIGHT, RESUME_LOOKUP, DRY_RUN_NOTES, WRAP_RUNNER,
                                      BEFORE_TRAINER, TRAINER_STARTED, LAUNCH_FILES, CLI)


@dataclass(order=True)
class _Entry:
    order: int
    feature: str
    seq: int
    fn: Any = field(compare=False)


class Registry:
    """Hooks by point. Order is deterministic: `order` (lower first), then the feature's name, then
    registration order, so a run behaves the same whichever order the features were discovered in."""

    def __init__(self) -> None:
        self._entries: dict[str, list[_Entry]] = {}
        self._feature = "core"
        self._seq = 0
        self.features: list[str] = []

    def add(self, point: HookPoint[F], fn: F, *, order: int = 100) -> F:
        if point not in POINTS:
            raise ValueError(f"unknown hook point {point.name!r}; known: {', '.join(p.name for p in POINTS)}")
        self._seq += 1
        entries = self._entries.setdefault(point.name, [])
        entries.append(_Entry(order, self._feature, self._seq, fn))
        entries.sort()
        return fn

    def get(self, point: HookPoint[F]) -> list[F]:
        return [e.fn for e in self._entries.get(point.name, [])]

    def register(self, feature: str, register: Callable[["Registry"], None]) -> None:
        """Let one feature add its hooks (they are filed under its name)."""
        self._feature = feature
        try:
            register(self)
        finally:
            self._feature = "core"
        self.features.append(feature)


_REGISTRY: Registry | None = None


def registry() -> Registry:
    """The process's registry, filled from the installed features on first use (then cached)."""
    global _REGISTRY
    if _REGISTRY is None:
        from trainstack.features import discover

        reg = Registry()
        for name, register in discover():
            reg.register(name, register)
        _REGISTRY = reg
    return _REGISTRY


def get(point: HookPoint[F]) -> list[F]:
    """The hooks of one point, in order."""
    return registry().get(point)


def use(reg: Registry | None) -> Registry | None:
    """Replace the process's registry (tests; None: rediscover on next use); returns the old one."""
    global _REGISTRY
    old, _REGISTRY = _REGISTRY, reg
    return old


# ------------------------------------------------------------------------------------------
# Points added by the inputs feature (trainstack/inputs: model weights, datasets, torch_dist)
# ------------------------------------------------------------------------------------------
PreparedPathsHook = Callable[[Mapping[str, Any], Mapping[str, Any]], Any]  # (config tree, args) -> [paths]
PrepareInputsHook = Callable[[Any, Any], None]  # (RunSpec, RunDir) -> None

PREPARED_PATHS: HookPoint[PreparedPathsHook] = HookPoint(
    "host.prepared_paths", "input paths a launch creates before the trainer (the host checks trust them to appear)")
PREPARE_INPUTS: HookPoint[PrepareInputsHook] = HookPoint(
    "lifecycle.prepare_inputs", "lease held, before the trainer on the executing host: download, convert, link "
    "the run's inputs")
POINTS = POINTS + (PREPARED_PATHS, PREPARE_INPUTS)

# ------------------------------------------------------------------------------------------
# Points added by the hub feature (trainstack/hub: checkpoint sync and restore)
# ------------------------------------------------------------------------------------------
RegisterCheckHook = Callable[[Mapping[str, Any]], Optional[str]]  # a run's stored spec -> why it is refused

REGISTER_CHECK: HookPoint[RegisterCheckHook] = HookPoint(
    "commander.register", "what a commander cannot serve, refused when the run is registered (before any pod "
    "is rented): a Hub-synced run and no token to hand its pods")
POINTS = POINTS + (REGISTER_CHECK,)
