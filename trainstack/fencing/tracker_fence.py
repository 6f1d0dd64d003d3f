"""The fencing rule for slime's own Megatron checkpoints: a wrapper around Megatron's tracker write.

slime saves through `megatron.training.checkpointing.save_checkpoint`. At the pinned Megatron-LM
commit (MEGATRON_COMMIT) rank 0 publishes a checkpoint in `iter_finalize_fn` with

    with open_file(tracker_filename, 'w') as f:
        f.write("release" if release else str(iteration))

where `open_file` is a global of that module (from megatron.core.msc_utils) and `tracker_filename`
is `<save>/latest_checkpointed_iteration.txt`. That write is unfenced (a superseded writer can land
it after a newer epoch's), in place (a crash between truncate and write leaves an empty tracker,
which Megatron's `read_metadata` exits on) and records no epoch. slime cannot be changed, so the
trainer process gets `open_file` replaced in that module (`patch`): opening the tracker for
writing returns a buffer whose close is `publish_tracker`:

    fence check -> iter_N/manifest.json (every file's size, SHA-256 up to HASH_MAX_BYTES, the epoch,
    the run's training identity) -> write a temp file, fsync -> fence check -> rename over the tracker
    -> one publish.jsonl line {iter, epoch, pid, time, writer: megatron}

the same publish the tiny trainer does (trainstack/tiny/checkpoint.py), so the resume plan's rule
(trainstack/storage/checkpoints.py `authority`: the newest publish of the highest epoch wins; a tracker
behind it is a superseded writer's late rename, repaired and never followed) holds for Megatron
runs too. A fenced writer raises trainstack.fencing.fence.Fenced and publishes nothing; the guard turns
the trainer's failure under a lost lease into exit 75. Every other `open_file` call passes through.

How it gets into the trainer (and into every Ray actor it starts, which inherit the environment):
the guard puts `trainstack/sitehook` first on the trainer's PYTHONPATH when it runs under a lease;
its `sitecustomize` (stdlib only: a trainer that never imports Megatron pays nothing) hands the
import of Megatron's module to `PatchAfterImport`, which patches it right after Python executes it,
whoever imports it first (slime does `from megatron.training.checkpointing import
save_checkpoint`; `open_file` is looked up in the module's globals at call time). Stdlib only.

Proven against Megatron's own source at the pinned commit by tests/test_tracker_fence.py (the real
`save_checkpoint`'s tracker write, extracted with `ast` and run against `patch`) where that source is
present (TRAINSTACK_MEGATRON_SRC); CI, which cannot fetch Megatron, checks the recorded contract
(MEGATRON_CONTRACT: names and a hash of the function) against this module instead (docs/resume.md).
"""
from __future__ import annotations

import io
import json
import os
import secrets
import sys
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

from trainstack.fencing.fence import Fence
from trainstack.storage.layout import PUBLISH_LOG, TRACKER

MEGATRON_COMMIT = "1dcf0daf"  # the Megatron-LM commit slime's pinned image uses (docs/resume.md)
MEGATRON_MODULE = "megatron.training.checkpointing"
PATCHED_GLOBAL = "open_file"
WRITER = "megatron"
# What the wrapper relies on, as read from Megatron-LM's megatron/training/checkpointing.py at
# MEGATRON_COMMIT (tests/test_tracker_fence.py re-reads it where the source is present).
MEGATRON_CONTRACT = {
    "module": MEGATRON_MODULE,
    "function": "save_checkpoint",
    "finalizer": "iter_finalize_fn",
    "opener": PATCHED_GLOBAL,
    "opener_imported_from": "megatron.core.msc_utils",
    "tracker_name_function": "get_checkpoint_tracker_filename",
    "tracker_file": TRACKER,
    "write_mode": "w",
    # the loader slime calls (slime/backends/megatron_utils/checkpoint.py imports it from the module, so
    # a wrapper set right after the module executes is the one slime binds) and Megatron's args getter
    "loader": "load_checkpoint",
    "args_getter": "get_args",
    # sha256 of ast.unparse() of the finalizer that writes the tracker: a changed one is re-read by hand
    "finalizer_sha256": "596c79b2149fe8e20f1c8e11048a9c9db84379c6316648dc198b8039f3ba7f2e",
}
_PATCHED = "__trainstack_fenced__"


class TrackerWrite(io.StringIO):
    """What Megatron's `open_file(tracker, 'w')` returns: text buffered until close, then published."""

    def __init__(self, path: str, fence: Fence | None):
        super().__init__()
        self.path = path
        self.fence = fence

    def close(self) -> None:
        if self.closed:
            return
        text = self.getvalue()
        super().close()
        publish_tracker(self.path, text, self.fence)

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.close()
        else:  # Megatron's write failed: publish nothing
            io.StringIO.close(self)


def publish_tracker(path: str, text: str, fence: Fence | None) -> None:
    """Fenced, atomic tracker publish with its epoch logged (see the module docstring)."""
    save_dir = os.path.dirname(os.path.abspath(path))
    if fence is not None:
        fence.check()
    value = text.strip()
    if value.isdigit():  # the checkpoint's proof and identity, before it becomes visible
        write_manifest(save_dir, int(value), fence)
    tmp = f"{path}.tmp.{os.getpid()}.{secrets.token_hex(3)}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if fence is not None:
            fence.check()  # the last check: a write stalled past it is repaired by readers (the epoch rule)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if value.isdigit():
        line = {"iter": int(value), "epoch": fence.epoch if fence else None, "pid": os.getpid(),
                "time": time.time(), "writer": WRITER}
        with open(os.path.join(save_dir, PUBLISH_LOG), "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


# Files above this size are recorded by size only: hashing a multi-GB torch_dist shard on rank 0 at every
# save would stall training (docs/resume.md, "slime's Megatron checkpoints").
HASH_MAX_BYTES = 64 << 20


def write_manifest(save_dir: str, iteration: int, fence: Fence | None) -> bool:
    """`iter_N/manifest.json` for a Megatron checkpoint Megatron just finalized: every file with its
    size, the SHA-256 of each up to HASH_MAX_BYTES, the writer's epoch and the run's training identity
    (`<save>/identity.json`). False when there is no such iter dir (nothing to describe)."""
    from trainstack.storage import checkpoints as ck
    from trainstack.storage.layout import MANIFEST, iter_name

    root = os.path.join(save_dir, iter_name(iteration))
    if not os.path.isdir(root):
        return False
    rel: list[str] = []
    sums: dict[str, str] = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = os.path.join(dirpath, name)
            r = os.path.relpath(full, save_dir)
            if name == MANIFEST and dirpath == root:
                continue
            rel.append(r)
            if os.path.getsize(full) <= HASH_MAX_BYTES:
                sums[r] = ck.file_sha256(full)
    manifest = ck.Manifest.of_files(save_dir, iteration, rel, WRITER, fence.epoch if fence else None, sums,
                                    ck.read_identity(save_dir))
    target = os.path.join(root, MANIFEST)
    tmp = f"{target}.tmp.{os.getpid()}.{secrets.token_hex(3)}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(manifest.to_json())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    return True


def fenced_opener(original: Callable[..., Any], fence: Fence | None = None,
                  fence_of: Callable[[], Fence | None] = Fence.from_env) -> Callable[..., Any]:
    """`original` with the tracker's write replaced by a TrackerWrite (everything else passes through)."""

    def open_file(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode and "b" not in mode and os.path.basename(str(path)) == TRACKER:
            return TrackerWrite(str(path), fence if fence is not None else fence_of())
        return original(path, mode, *args, **kwargs)

    setattr(open_file, _PATCHED, original)
    return open_file


def recording_loader(original: Callable[..., Any], ns: dict[str, Any]) -> Callable[..., Any]:
    """Megatron's `load_checkpoint`, recording a failure to load the run's own published checkpoint in
    `<save>/load_failures.jsonl` (trainstack/storage/checkpoints.py): the launcher sets it aside once and
    resumes from the previous intact one, instead of every relaunch dying on it."""

    def load_checkpoint(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except Exception as ex:
            _record_failure(ns, str(kwargs.get("load_arg", "load")), ex)
            raise

    setattr(load_checkpoint, _PATCHED, original)
    return load_checkpoint


def _record_failure(ns: dict[str, Any], load_arg: str, ex: BaseException) -> None:
    try:
        margs = ns[MEGATRON_CONTRACT["args_getter"]]()
        load, save = getattr(margs, load_arg, None), getattr(margs, "save", None)
        if not load or not save or os.path.realpath(load) != os.path.realpath(save):
            return  # initial weights (ref_load, a pretrained checkpoint): not this run's to set aside
        from trainstack.storage import checkpoints as ck

        tracker = ck.read_tracker(load)
        if tracker is not None and tracker.isdigit():
            ck.record_load_failure(load, int(tracker), f"{type(ex).__name__}: {ex}")
    except Exception:  # noqa: BLE001 - recording must never hide the load's own error
        pass


def patch(module: ModuleType | dict[str, Any], fence: Fence | None = None) -> bool:
    """Replace `open_file` in Megatron's checkpointing module (or a namespace holding its functions),
    and wrap its `load_checkpoint` (recording_loader); False when there is no `open_file` to replace
    (a Megatron without it: tests/test_tracker_fence.py says which). Idempotent."""
    ns = module if isinstance(module, dict) else vars(module)
    current = ns.get(PATCHED_GLOBAL)
    if current is None:
        return False
    if not hasattr(current, _PATCHED):
        ns[PATCHED_GLOBAL] = fenced_opener(current, fence)
    loader = ns.get(MEGATRON_CONTRACT["loader"])
    if callable(loader) and not hasattr(loader, _PATCHED):
        ns[MEGATRON_CONTRACT["loader"]] = recording_loader(loader, ns)
    return True


def _patching(run: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
    def exec_module(module: ModuleType) -> None:
        run(module)
        if not patch(module):
            print(f"trainstack: {MEGATRON_MODULE} has no {PATCHED_GLOBAL}: its tracker writes are not "
                  "fenced (a Megatron other than the pinned one?)", file=sys.stderr, flush=True)

    return exec_module


class PatchAfterImport:
    """A meta path finder that finds nothing itself: it wraps the real loader of MEGATRON_MODULE so
    `patch` runs right after it. (The site hook's finder hands over to it: `trainstack_hook`.)"""

    trainstack_hook = True  # finders with this flag are skipped when looking for the real one

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
                  ) -> "ModuleSpec | None":
        if name != MEGATRON_MODULE:
            return None
        for finder in sys.meta_path:
            if getattr(finder, "trainstack_hook", False) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader.exec_module = _patching(spec.loader.exec_module)  # type: ignore[method-assign,assignment]
                return spec
        return None


def install_import_hook() -> None:
    """Patch Megatron's checkpointing when it is imported (now, if it already was)."""
    loaded = sys.modules.get(MEGATRON_MODULE)
    if loaded is not None:
        patch(loaded)
        return
    if not any(isinstance(f, PatchAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, PatchAfterImport())


def sitehook_dir() -> str:
    """The directory whose sitecustomize installs the hook: first on the trainer's PYTHONPATH."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sitehook")


def trainer_pythonpath(current: str | None) -> str:
    """PYTHONPATH for a fenced trainer: the site hook first, whatever was there after it."""
    parts = [sitehook_dir()] + [p for p in (current or "").split(os.pathsep) if p and p != sitehook_dir()]
    return os.pathsep.join(parts)
