"""slime's own ``parse_args`` on the final argv, on the host that runs the trainer, before Ray starts.

Where slime, Megatron-LM and SGLang are importable (a slime image or a GPU node's checkout), this is exact
for whatever slime version the node has: the argv is parsed by slime's three parsers and checked by its
validators in a child process (seconds), and trainstack refuses, in its own message style, what slime
refuses (an argparse error, a failed validator: the message and where it was raised) and what slime
silently ignores (a flag no parser took). Where that stack is absent (a CPU machine) nothing runs and the
dry run says the command was checked against trainstack's tables instead.

Tests run slime's real ``slime/utils/arguments.py`` with the GPU-only imports replayed
(``TRAINSTACK_REALPARSE_STANDINS=<table>``: ``trainstack.upstream.replay`` plus a Megatron ``parse_args``
that parses with the replayed parser and a no-op Megatron ``validate_args``).
"""
from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

STANDINS_ENV = "TRAINSTACK_REALPARSE_STANDINS"
STACK = ("megatron.training", "sglang.srt", "sglang_router")


@dataclass
class Verdict:
    """What slime's parser said about an argv."""

    ok: bool
    error: str | None = None  # argparse's message, or `Exception: message [at file:line]`
    ignored: list[str] = field(default_factory=list)  # flags no parser took (slime drops them silently)


def stack_present(root: str | Path, pythonpath: Sequence[str] = ()) -> bool:
    """Are Megatron-LM, SGLang and sglang-router importable for a trainer started with this PYTHONPATH?"""
    paths = [str(root), *pythonpath, *sys.path]
    for dotted in STACK:
        top, _, rest = dotted.partition(".")
        spec = importlib.machinery.PathFinder.find_spec(top, paths)
        if spec is None:
            return False
        if rest and spec.submodule_search_locations is not None:
            if importlib.machinery.PathFinder.find_spec(dotted, list(spec.submodule_search_locations)) is None:
                return False
    return True


def run(root: str | Path, argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 300) -> Verdict:
    """slime's parse_args on ``argv`` in a child process with the trainer's environment ``env``."""
    child_env = {**os.environ, **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "trainstack.upstream.realparse", str(root), *argv],
                          capture_output=True, text=True, timeout=timeout, env=child_env, cwd=str(root))
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        tail = " ".join(proc.stderr.strip().splitlines()[-3:])
        return Verdict(ok=False, error=f"slime's parser could not be run (exit {proc.returncode}): {tail}")
    return Verdict(**json.loads(line))


def problems(root: str | Path, argv: Sequence[str], env: dict[str, str] | None, label: str) -> list:
    """ConfigErrors for what slime's own parser refuses or ignores in ``argv``."""
    from trainstack.errors import ConfigError

    verdict = run(root, argv, env)
    out = []
    if verdict.error:
        out.append(ConfigError("slime", f"{label}'s own parser refuses this command: {verdict.error}",
                               "change the setting slime's message names (`trainstack args NAME` shows it), then "
                               "launch again; nothing was started", value=str(root)))
    for flag in verdict.ignored:
        out.append(ConfigError(flag, f"{label}'s parsers take no {flag}: slime would silently ignore it",
                               "remove it, or use the name this slime has (`trainstack args --search WORD`)",
                               value=str(root)))
    return out


# --- the child -------------------------------------------------------------------------------------------


def _megatron_standins(table: dict) -> dict[str, dict[str, Any]]:
    import argparse

    from trainstack.upstream import replay

    layers = replay.Layers(table)

    def parse_args(extra_args_provider=None, ignore_unknown_args=False):
        parser = argparse.ArgumentParser(description="Megatron-LM Arguments", allow_abbrev=False)
        parser = layers.add_megatron_arguments(parser)
        if extra_args_provider is not None:
            parser = extra_args_provider(parser)
        args, unknown = parser.parse_known_args()
        if unknown and not ignore_unknown_args:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        return args

    def validate_args(args, defaults=None):  # Megatron's GPU-side validation: trainstack's ported rules cover it
        return args

    def vocab_size_with_padding(orig_vocab_size, args, logging_enabled=True):
        return orig_vocab_size

    return {"megatron.training.arguments": {"parse_args": parse_args, "validate_args": validate_args},
            "megatron.core": {}, "megatron.core.tokenizers": {}, "megatron.core.tokenizers.utils": {},
            "megatron.core.tokenizers.utils.build_tokenizer": {"vocab_size_with_padding": vocab_size_with_padding}}


def _location(exc: BaseException) -> str:
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/trainstack/" not in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" [at {f.filename}:{f.lineno} `{(f.line or '').strip()}`]"


def child(root: Path, argv: list[str]) -> dict[str, Any]:
    import argparse
    import contextlib
    import io

    standins = os.environ.get(STANDINS_ENV)
    if standins:
        from trainstack.upstream import replay

        table = json.loads(Path(standins).read_text(encoding="utf-8"))
        replay.install(table, extra=_megatron_standins(table))
    sys.path.insert(0, str(root))
    sys.argv = ["train.py", *argv]
    leftovers: list[list[str]] = []
    original = argparse.ArgumentParser.parse_known_args

    def spy(self, args=None, namespace=None):
        ns, rest = original(self, args, namespace)
        if args is None or list(args) == argv:
            leftovers.append([t for t in rest if t.startswith("--")])
        return ns, rest

    argparse.ArgumentParser.parse_known_args = spy  # type: ignore[method-assign]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            from slime.utils.arguments import parse_args

            parse_args()
    except SystemExit as e:
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        return {"ok": False, "error": (lines[-1] if lines else f"exit {e.code}")}
    except Exception as e:  # a validator's assert / raise: its message and where slime raised it
        return {"ok": False, "error": f"{type(e).__name__}: {e}{_location(e)}"}
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    ignored = sorted(set.intersection(*(set(x) for x in leftovers))) if leftovers else []
    return {"ok": not ignored, "ignored": ignored}


if __name__ == "__main__":
    print(json.dumps(child(Path(sys.argv[1]).resolve(), sys.argv[2:])))
