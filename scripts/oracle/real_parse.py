"""Run every rendered argv of the oracle corpus through slime's REAL parser (developer machines).

    $SLIME_PARSE_HOME/venv/bin/python scripts/oracle/real_parse.py RENDERED.json VERDICTS.json

Uses the slime-parse check (`slime_real_parse.py`, path in $SLIME_PARSE_TOOL) unchanged, but
instead of a fresh interpreter per argv (8 s, almost all imports) it imports slime, Megatron and
SGLang once, with the same device patches the check applies, and forks a child per argv that
runs the check's own child program. `--verify N` also runs the first N argvs through the
unmodified check (a subprocess each) and fails if any verdict differs.
Only the standard library is used outside slime's environment.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from typing import Any


def load_check(path: str) -> Any:
    """slime_real_parse.py as a module (Any: a file outside this repo, its names known at run time)."""
    spec = importlib.util.spec_from_file_location("slime_real_parse", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the parse check {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def preload(check) -> None:
    """Import what the check's child imports, patched the same way and in the same order."""
    sys.path[:0] = [check.SLIME, check.MEGATRON]
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    import torch
    import megatron.training.arguments as mta

    mta.get_device_arch_version = lambda: 9
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    import slime.utils.arguments  # noqa: F401  (pulls sglang, sglang_router, transformers)


# One layer deeper (issue #24): after the check's child has parsed, build Megatron's TransformerConfig
# from the parsed namespace as slime's model provider does (model_provider.py:134), on CPU, and record
# whether its __post_init__ accepts it. Appended to the child program; writes to TC_OUT (set per argv).
TC_OUT = ""
TC_SNIPPET = r"""
try:
    # No Transformer Engine on CPU: the GPU image has it (recent enough for every version check here).
    import megatron.core.transformer.transformer_config as _tcm
    import megatron.core.models.common.embeddings.rope_utils as _ru
    _tcm.is_te_min_version = lambda *a, **k: True
    import megatron.core.transformer.moe.moe_utils as _mu
    for _m, _names in ((_ru, ("fused_apply_rotary_pos_emb", "fused_apply_rotary_pos_emb_thd")),
                       (_mu, ("fused_permute", "fused_permute_with_probs", "fused_sort_chunks_by_index",
                              "fused_sort_chunks_by_index_with_probs", "fused_unpermute"))):
        for _n in _names:
            if getattr(_m, _n, None) is None:
                setattr(_m, _n, lambda *a, **k: None)
    if getattr(ns, "debug_rollout_only", False):  # slime builds no Megatron model in a rollout-only run
        _tc = {"ok": True, "skipped": "debug_rollout_only"}
    else:
        from megatron.training.arguments import core_transformer_config_from_args as _tc_from_args
        _tc_cfg = _tc_from_args(ns)
        _tc = {"ok": True, "class": type(_tc_cfg).__name__}
except BaseException as _e:
    _fr = traceback.extract_tb(_e.__traceback__)[-1]
    _tc = {"ok": False, "error": "%s: %s [at %s:%s `%s`]" % (type(_e).__name__, str(_e)[:500],
           os.path.relpath(_fr.filename, os.environ.get("SLIME_PARSE_ROOT", "/")), _fr.lineno, (_fr.line or "").strip())}
with open(TC_OUT_PATH, "w") as _f:
    json.dump(_tc, _f)
"""


def forked_run(cmd, env=None, capture_output=True, text=True, timeout=300, cwd=None, **_):
    """subprocess.run for `[python, -c, CHILD]`, as a fork of this preloaded interpreter."""
    code = cmd[-1] + (TC_SNIPPET.replace("TC_OUT_PATH", repr(TC_OUT)) if TC_OUT else "")
    out = tempfile.TemporaryFile(mode="w+b")
    err = tempfile.TemporaryFile(mode="w+b")
    pid = os.fork()
    if pid == 0:  # child
        rc = 0
        try:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
            sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), write_through=True)
            if cwd:
                os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env or {})
            exec(compile(code, "<slime_real_parse child>", "exec"), {"__name__": "__main__"})
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            rc = 1
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(rc)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise subprocess.TimeoutExpired(cmd, timeout)
        time.sleep(0.02)
    rc = os.waitstatus_to_exitcode(status)
    out.seek(0)
    err.seek(0)
    return subprocess.CompletedProcess(cmd, rc, out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def with_launch_files(row: dict, workdir: str) -> tuple[list, dict]:
    """argv and intended dests with each file the launch would write (e.g. an HTTP env's
    --custom-config-path YAML in the run dir) written here and its path swapped in."""
    argv, intended = list(row["argv"]), dict(row["intended"])
    for i, (path, text) in enumerate(sorted((row.get("launch_files") or {}).items())):
        local = os.path.join(workdir, f"launch-file-{i}{os.path.splitext(path)[1]}")
        with open(local, "w") as f:
            f.write(text)
        argv = [local if t == path else t for t in argv]
        intended = {k: (local if v == path else v) for k, v in intended.items()}
    return argv, intended


def check_one(check, row: dict, workdir: str, forked: bool) -> dict:
    """The check's JSON report for one corpus row."""
    argv_file = os.path.join(workdir, "argv.json")
    intended_file = os.path.join(workdir, "intended.json")
    argv, intended = with_launch_files(row, workdir)
    with open(argv_file, "w") as f:
        json.dump({"argv": ["python3", "train.py", *argv], "env": row["env"]}, f)
    with open(intended_file, "w") as f:
        json.dump(intended, f)
    args = [argv_file, "--intended", intended_file]
    if not forked:
        r = subprocess.run([sys.executable, check.__file__, *args], capture_output=True, text=True)
        return json.loads(r.stdout)
    buf = io.StringIO()
    old_argv = sys.argv
    sys.argv = [check.__file__, *args]
    try:
        with contextlib.redirect_stdout(buf):
            check.main()
    except SystemExit:
        pass
    finally:
        sys.argv = old_argv
    return json.loads(buf.getvalue())


def verdict(report: dict) -> dict:
    """What the oracle keeps of a report (no temp paths)."""
    keep = ("pass", "ok", "error", "problems", "not_as_intended", "unknown_flags", "checked", "flags",
            "intended_checked", "phases", "rewritten_by_validators")
    v = {k: report.get(k) for k in keep if k in report}
    v["rewritten_by_validators"] = sorted(r["dest"] for r in v.get("rewritten_by_validators") or [])
    error = v.get("error")
    if isinstance(error, str):
        v["error"] = error.replace(report.get("world", "") or "\0", "<world>")[:600]
    return v


def parse_row(check, row: dict, work: str) -> dict:
    """slime's verdict on one rendered row, with Megatron's TransformerConfig where the parse passed."""
    global TC_OUT
    TC_OUT = os.path.join(work, "transformer_config.json")
    with contextlib.suppress(FileNotFoundError):
        os.remove(TC_OUT)
    try:
        rep = check_one(check, row, work, forked=True)
    finally:
        TC_OUT = ""
    v = verdict(rep)
    tc_file = os.path.join(work, "transformer_config.json")
    if v.get("ok") and os.path.exists(tc_file):
        with open(tc_file) as f:
            v["transformer_config"] = json.load(f)
    return v


def versions(tool: str) -> dict:
    """The pins of the checker's environment (slime, Megatron, SGLang...), recorded with the verdicts."""
    import importlib.metadata as md

    pins = {}
    with open(os.path.join(os.path.dirname(os.path.abspath(tool)), "setup.sh")) as f:
        for line in f:
            for key in ("SLIME_COMMIT", "MEGATRON_COMMIT", "SERVER_ARGS_PATCHED"):
                if line.startswith(key + "="):
                    pins[key.lower()] = line.split("=", 1)[1].strip()
    return {**pins, "sglang": md.version("sglang"), "sglang_router": md.version("sglang-router"),
            "transformers": md.version("transformers"), "checker": "shared/tools/slime-parse/slime_real_parse.py"}


def serve(check) -> int:
    """`--serve`: one rendered row (JSON) per stdin line -> one `@@` + verdict JSON line on stdout,
    so a caller can bisect batches adaptively without paying the preload again."""
    print("@@" + json.dumps({"ready": versions(check.__file__)}), flush=True)
    with tempfile.TemporaryDirectory() as work:
        for line in sys.stdin:
            if not line.strip():
                continue
            row = json.loads(line)
            t = time.time()
            v = parse_row(check, row, work)
            v["seconds"] = round(time.time() - t, 2)
            print("@@" + json.dumps(v), flush=True)
    return 0


def main() -> int:
    args = sys.argv[1:]
    if args == ["--serve"]:
        tool = os.environ.get("SLIME_PARSE_TOOL", "")
        if not os.path.isfile(tool):
            print(f"real_parse.py: slime_real_parse.py not found at {tool!r}: set SLIME_PARSE_TOOL", file=sys.stderr)
            return 2
        check = load_check(tool)
        t0 = time.time()
        preload(check)
        print(f"preloaded slime's parser in {time.time() - t0:.1f} s", file=sys.stderr)
        check.subprocess = types.SimpleNamespace(run=forked_run, TimeoutExpired=subprocess.TimeoutExpired)
        return serve(check)
    verify = 0
    if "--verify" in args:
        i = args.index("--verify")
        verify = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tool = os.environ.get("SLIME_PARSE_TOOL") or os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "shared", "tools", "slime-parse", "slime_real_parse.py")
    if not os.path.isfile(tool):
        print(f"real_parse.py: slime_real_parse.py not found at {tool}: set SLIME_PARSE_TOOL", file=sys.stderr)
        return 2
    check = load_check(tool)
    rows = [r for r in json.load(open(args[0])) if r["argv"] is not None]
    t0 = time.time()
    preload(check)
    print(f"preloaded slime's parser in {time.time() - t0:.1f} s", file=sys.stderr)
    # The check calls subprocess.run([python, -c, CHILD]); give it the fork instead (its module only).
    check.subprocess = types.SimpleNamespace(run=forked_run, TimeoutExpired=subprocess.TimeoutExpired)
    out, mismatches = [], []
    with tempfile.TemporaryDirectory() as work:
        for i, row in enumerate(rows):
            t = time.time()
            v = parse_row(check, row, work)
            out.append({"id": row["id"], "slime": v})
            print(f"{'pass' if v.get('pass') else 'FAIL'} {time.time() - t:4.1f}s {row['id']}"
                  + ("" if v.get("pass") else f"  {str(v.get('error') or v.get('problems'))[:160]}"),
                  file=sys.stderr)
            if i < verify:
                ref = check_one(check, row, work, forked=False)
                if verdict(ref) != {k: x for k, x in out[-1]["slime"].items() if k != "transformer_config"}:
                    mismatches.append(row["id"])
    meta = {**versions(tool), "seconds": round(time.time() - t0, 1)}
    with open(args[1], "w") as f:
        json.dump({"meta": meta, "verdicts": out}, f, indent=1)
    passed = sum(1 for v in out if v["slime"].get("pass"))
    print(f"{len(out)} argvs: {passed} accepted by slime, {len(out) - passed} refused; "
          f"{time.time() - t0:.0f} s", file=sys.stderr)
    if mismatches:
        print(f"forked verdicts differ from the plain check for: {mismatches}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
