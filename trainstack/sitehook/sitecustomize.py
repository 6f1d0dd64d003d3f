"""trainstack's site hook: first on a fenced trainer's PYTHONPATH (trainstack/fencing/tracker_fence.py).

Under a lease (TRAINSTACK_LEASE_FILE set) it patches Megatron's tracker write when
megatron.training.checkpointing is imported; trainstack itself is imported only then, so a trainer
that never imports Megatron pays nothing. Then it runs the sitecustomize it shadows (the next one on
sys.path), so an environment's own site hook still runs. Outside a lease it only chains.
"""
import os
import sys

_MODULE = "megatron.training.checkpointing"


class _OnMegatronImport:
    trainstack_hook = True  # trainstack.fencing.tracker_fence.PatchAfterImport skips finders with this flag

    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        try:
            from trainstack.fencing.tracker_fence import PatchAfterImport
        except ImportError:  # a trainer Python without trainstack installed: the checkout it came from
            sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
            from trainstack.fencing.tracker_fence import PatchAfterImport
        return PatchAfterImport().find_spec(name, path, target)


def _install() -> None:
    if not os.environ.get("TRAINSTACK_LEASE_FILE"):
        return
    if _MODULE in sys.modules:  # imported before site ran (never, in practice): patch it now
        from trainstack.fencing.tracker_fence import patch

        patch(sys.modules[_MODULE])
    elif not any(getattr(f, "trainstack_hook", False) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnMegatronImport())


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


try:
    _install()
except Exception as ex:  # never stop a trainer from starting; say that its tracker writes are unfenced
    print(f"trainstack: could not fence Megatron's tracker writes ({type(ex).__name__}: {ex})", file=sys.stderr)
try:
    _chain()
except Exception as ex:
    print(f"trainstack: the environment's own sitecustomize failed ({type(ex).__name__}: {ex})", file=sys.stderr)
