"""slime's argument table for any slime checkout, built on CPU from slime's own parser code.

slime's parsers are built exactly as ``sync_slime args`` builds them with the real stack, except that
Megatron's, SGLang's and the router's argument definitions are replayed (``trainstack.upstream.replay``)
from a recorded table (the packaged one by default). Everything slime itself defines (its flags, the
`--sglang-` prefixing and skip list, the Megatron defaults it resets, the router defaults it sets, the
pre-parse flags) comes from the checkout's code. Runs in a child process: each checkout's `slime`
package is imported fresh, and nothing of it stays in the caller.

    python -m trainstack.upstream.build SLIME_ROOT [--layers TABLE.json]   # the table as JSON on stdout
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# meta keys a build computes; every other key of the layers' table (the recorded libraries' versions,
# patches, notes) is carried over
COMPUTED_META = ("slime_commit", "counts", "option_strings_in_both_parsers", "dests_in_both_parsers", "fields",
                 "slime_sources", "built_by")


class BuildError(RuntimeError):
    """slime's parser code could not be run for this checkout (the message says why)."""


def build_in_process(slime_root: Path, layers_table: dict) -> dict[str, Any]:
    from trainstack.upstream import identity, replay, sync_slime

    replay.install(layers_table)
    parsers = sync_slime.build_slime_parsers(slime_root)
    previous = {k: v for k, v in layers_table["meta"].items() if k not in COMPUTED_META}
    doc = sync_slime.build_args_json(parsers, slime_commit=identity.git_commit(slime_root) or "unknown",
                                     previous_meta=previous)
    doc["meta"]["slime_sources"] = identity.source_blobs(slime_root)
    doc["meta"]["built_by"] = ("trainstack.upstream.build: slime's own parser code from the checkout; Megatron-LM, "
                               "SGLang and sglang-router argument definitions replayed from the recorded table")
    return doc


def build(slime_root: str | Path, layers: str | Path | None = None, timeout: float = 300) -> dict[str, Any]:
    """The table document for the checkout at ``slime_root`` (a child process; raises BuildError)."""
    from trainstack.upstream.argtable import TABLE_PATH

    cmd = [sys.executable, "-m", "trainstack.upstream.build", str(Path(slime_root).resolve()),
           "--layers", str(layers or TABLE_PATH)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(Path(slime_root)))
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        raise BuildError(f"slime's parser code at {slime_root} could not be run on the replayed stack:\n{tail}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m trainstack.upstream.build")
    p.add_argument("slime_root")
    p.add_argument("--layers", required=True, help="the recorded table whose Megatron/SGLang/router actions to replay")
    ns = p.parse_args(argv)
    layers = json.loads(Path(ns.layers).read_text(encoding="utf-8"))
    doc = build_in_process(Path(ns.slime_root).resolve(), layers)
    sys.stdout.write(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
