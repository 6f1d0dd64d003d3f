"""trainstack's site hook: first on a fenced trainer's PYTHONPATH (trainstack/tracker_fence.py).

Under a lease (TRAINSTACK_LEASE_FILE set) it patches Megatron's tracker write when
megatron.training.checkpointing is imported, then runs the sitecustomize it shadows (the next one
on sys.path), so an environment's own site hook still runs. Outside a lease it only chains.
"""
import os
import sys


def _install() -> None:
    if not os.environ.get("TRAINSTACK_LEASE_FILE"):
        return
    try:
        from trainstack.tracker_fence import install_import_hook
    except ImportError:  # a trainer Python without trainstack installed: the checkout it came from
        sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        from trainstack.tracker_fence import install_import_hook
    install_import_hook()


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
