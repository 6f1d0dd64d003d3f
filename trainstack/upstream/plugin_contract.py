"""slime's plugin contract, and the probe that checks a run's plugins against it in the trainer's
own interpreter.

slime loads every `--*-path` plugin with `slime/utils/misc.py:39-47` `load_function` (import the
module, `getattr` the name) in the process that calls it, and calls it one fixed way: awaited or
not, with these positional arguments and keywords. `CONTRACTS` says how, per dest, citing the slime
line (at the pinned commit) that does the call; `tests/test_plugin_contract.py` checks each cited
line still reads so. A plugin that cannot be imported there, or that slime cannot call that way,
fails the run after the launch (a `ModuleNotFoundError` in rollout 1, `TypeError: object float
can't be used in 'await' expression`, ...): the dry run asks the trainer's interpreter first.

This file is also the probe's child process: `INTERPRETER plugin_contract.py RESULT_FILE` with a
JSON request on stdin (trainstack/preflight/plugin_probe.py builds it). It runs in the trainer's interpreter
and environment, which may have no trainstack at all (a GPU host's `python3`), so it imports only
the standard library; the request's `prelude` (the tiny backend's slime import set-up) is the one
exception, named by the backend (trainstack/config/backends.py).
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

# The rollout manager that imports and calls the rollout-side plugins is a Ray actor with no GPU
# (`num_gpus: 0`, slime/ray/placement_group.py:230-237), so the probe imports with no visible GPU too:
# a plugin that needs one at import time would fail there.
NO_GPU_ENV = {"CUDA_VISIBLE_DEVICES": ""}
NO_GPU_SOURCE = "slime/ray/placement_group.py:230-237"


@dataclass(frozen=True)
class Contract:
    """How slime calls one plugin dest."""

    call: str  # the call as slime writes it
    source: str  # slime file:line (or first-last) of the load and the call
    marker: str  # text on the cited lines (tests/test_plugin_contract.py reads them in the submodule)
    positional: tuple[str, ...] = ()  # passed by position
    keywords: tuple[str, ...] = ()  # passed by keyword
    optional: tuple[str, ...] = ()  # keywords slime passes only to a function whose signature names them
    mode: str = "sync"  # "sync": called, never awaited; "async": awaited; "either": awaited when awaitable; "class"
    shape: tuple[str, str] | None = None  # (the name slime's own contract test wants for the 2nd parameter, the
    # name that means the other shape: a per-group reward named `samples` where one sample comes, ...)


ROLLOUT_FN = ("args", "rollout_id", "data_source")
CONTRACTS: dict[str, Contract] = {
    "rollout_function_path": Contract(
        "fn(args, rollout_id, data_source, evaluation=False)", "slime/rollout/base_types.py:19-20",
        "output = fn(*args, **kwargs, evaluation=evaluation)", ROLLOUT_FN, ("evaluation",)),
    "eval_function_path": Contract(
        "fn(args, rollout_id, data_source, evaluation=True)", "slime/rollout/base_types.py:19-20",
        "output = fn(*args, **kwargs, evaluation=evaluation)", ROLLOUT_FN, ("evaluation",)),
    "custom_rm_path": Contract(
        "await fn(args, sample)", "slime/rollout/rm_hub/__init__.py:61-63",
        "return await rm_function(args, sample, **kwargs)", ("args", "sample"), mode="async",
        shape=("sample", "samples")),
    "custom_generate_function_path": Contract(
        "await fn(args, sample, sampling_params[, evaluation=...])", "slime/rollout/sglang_rollout.py:254-260",
        "sample = await custom_generate_func(args, sample, sampling_params)", ("args", "sample", "sampling_params"),
        optional=("evaluation",), mode="async"),
    "dynamic_sampling_filter_path": Contract(
        "fn(args, group)", "slime/rollout/filter_hub/base_types.py:31-35",
        "output = fn(*args, **kwargs)", ("args", "samples")),
    "buffer_filter_path": Contract(
        "fn(args, None, buffer, num_samples)", "slime/rollout/data_source.py:195",
        "samples = self.buffer_filter(self.args, None, self.buffer, num_samples)",
        ("args", "rollout_id", "buffer", "num_samples")),
    "data_source_path": Contract(
        "cls(args)", "slime/ray/rollout.py:383-384", "self.data_source = data_source_cls(args)", ("args",),
        mode="class"),
    "rollout_sample_filter_path": Contract(
        "fn(args, data)", "slime/rollout/sglang_rollout.py:461-463", "filter_func(args, data)", ("args", "groups")),
    "rollout_all_samples_process_path": Contract(
        "fn(args, all_samples, data_source)", "slime/rollout/sglang_rollout.py:466-468",
        "process_func(args, all_samples, data_source)", ("args", "all_groups", "data_source")),
    "rollout_sample_hook_path": Contract(
        "fn(args, sample[, rollout_id=..., evaluation=...]), awaited when it returns an awaitable",
        "slime/rollout/sample_hooks.py:25-29", "result = hook(args, sample, **_accepted_kwargs(hook, kwargs))",
        ("args", "sample"), optional=("rollout_id", "evaluation"), mode="either"),
    "custom_rollout_log_function_path": Contract(
        "fn(rollout_id, args, samples, rollout_extra_metrics, rollout_time)",
        "slime/observability/rollout_metrics.py:258-259",
        "custom_log_func(rollout_id, args, samples, rollout_extra_metrics, rollout_time)",
        ("rollout_id", "args", "samples", "rollout_extra_metrics", "rollout_time")),
    "custom_eval_rollout_log_function_path": Contract(
        "fn(rollout_id, args, data, extra_metrics)", "slime/observability/rollout_metrics.py:225-226",
        "custom_log_func(rollout_id, args, data, extra_metrics)", ("rollout_id", "args", "data", "extra_metrics")),
    "custom_reward_post_process_path": Contract(
        "fn(args, samples)", "slime/ray/rollout.py:609-610", "return self.custom_reward_post_process_func(self.args, "
        "samples)", ("args", "samples")),
    "custom_convert_samples_to_train_data_path": Contract(
        "fn(args, samples)", "slime/ray/rollout.py:639-640",
        "return self.custom_convert_samples_to_train_data_func(self.args, samples)", ("args", "samples")),
    "rollout_data_postprocess_path": Contract(
        "fn(args, rollout_id, rollout_data)", "slime/backends/megatron_utils/actor.py:505-506",
        "self.rollout_data_postprocess(self.args, rollout_id, rollout_data)", ("args", "rollout_id", "rollout_data")),
    "custom_loss_function_path": Contract(
        "fn(args, batch, logits, sum_of_sample_mean)", "slime/backends/megatron_utils/loss.py:1335-1344",
        "loss, log = func(args, batch, logits, sum_of_sample_mean)", ("args", "batch", "logits", "sum_of_sample_mean")),
    "custom_advantage_function_path": Contract(
        "fn(args, rollout_data)", "slime/backends/megatron_utils/loss.py:759-760", "custom_adv_fn(args, rollout_data)",
        ("args", "rollout_data")),
    "custom_tis_function_path": Contract(
        "fn(args=, pg_loss=, train_log_probs=, rollout_log_probs=, loss_masks=, total_lengths=, response_lengths=)",
        "slime/backends/megatron_utils/loss.py:1064-1078", "tis_func(**tis_kwargs)",
        keywords=("args", "pg_loss", "train_log_probs", "rollout_log_probs", "loss_masks", "total_lengths",
                  "response_lengths")),
    "custom_pg_loss_reducer_function_path": Contract(
        "fn(total_lengths, response_lengths, loss_masks, calculate_per_token_loss)",
        "slime/backends/megatron_utils/loss.py:1096-1101", "custom_pg_loss_reducer_func(",
        ("total_lengths", "response_lengths", "loss_masks", "calculate_per_token_loss")),
    "custom_megatron_init_path": Contract(
        "fn(args)", "slime/backends/megatron_utils/initialize.py:103-104", "custom_init(args)", ("args",)),
    "custom_model_provider_path": Contract(
        "fn(pre_process=..., post_process=...[, vp_stage=...])",
        "slime/backends/megatron_utils/model_provider.py:102-108",
        "model = custom_model_provider(pre_process=pre_process, post_process=post_process)",
        keywords=("pre_process", "post_process"), optional=("vp_stage",)),
    "custom_megatron_before_log_prob_hook_path": Contract(
        "fn(args, model, store_prefix)", "slime/backends/megatron_utils/model.py:457-458",
        "custom_before_log_prob_hook(args, model, store_prefix)", ("args", "model", "store_prefix")),
    "custom_megatron_before_train_step_hook_path": Contract(
        "fn(args, rollout_id, step_id, model, optimizer, opt_param_scheduler)",
        "slime/backends/megatron_utils/model.py:560-561",
        "custom_before_train_step_hook(args, rollout_id, step_id, model, optimizer, opt_param_scheduler)",
        ("args", "rollout_id", "step_id", "model", "optimizer", "opt_param_scheduler")),
    "custom_update_weight_post_write_path": Contract(
        "fn(args, version_dir, rollout_engines)",
        "slime/backends/megatron_utils/update_weight/update_weight_from_disk.py:90",
        "self._post_write_hook(self.args, str(version_dir), list(self.rollout_engines))",
        ("args", "version_dir", "rollout_engines")),
}
# With --group-rm the reward comes once per group (sglang_rollout.py:332 `batched_async_rm(args, group)`).
GROUP_RM = Contract(
    "await fn(args, samples)", "slime/rollout/rm_hub/__init__.py:104-107",
    "return await rm_function(args, samples, **kwargs)", ("args", "samples"), mode="async",
    shape=("samples", "sample"))
# slime's own plugin-contract tests (tests/plugin_contracts/) name the parameters: the reward's second one is
# `sample` (one sample) or `samples` (a group, with --group-rm)
SHAPE_SOURCE = "slime/tests/plugin_contracts/test_plugin_path_loading_contracts.py:358-373"


def contract_for(dest: str, group_rm: bool) -> Contract | None:
    if dest == "custom_rm_path" and group_rm:
        return GROUP_RM
    return CONTRACTS.get(dest)


# ----------------------------------------------------------------------------------------------
# the check (run in the child, on the imported object)
# ----------------------------------------------------------------------------------------------
def contract_problems(fn: object, c: Contract) -> list[str]:
    """Why slime could not call `fn` the way `c` says ([] when it can, or when its signature cannot be read)."""
    import inspect

    if c.mode == "class" and not isinstance(fn, type):
        if not callable(fn):
            return [f"is a {type(fn).__name__}, not a class: slime instantiates it as {c.call} ({c.source})"]
    elif not callable(fn):
        return [f"is a {type(fn).__name__}, not a function: slime calls it as {c.call} ({c.source})"]
    target = inspect.unwrap(fn) if callable(fn) else fn  # type: ignore[arg-type]
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(target) or (
        not inspect.isfunction(fn) and not isinstance(fn, type)
        and inspect.iscoroutinefunction(type(fn).__call__))  # an instance with an async __call__
    out = []
    if c.mode == "async" and not is_async and not may_return_awaitable(fn):
        out.append(f"is a plain function, but slime awaits it: {c.call} ({c.source}); what it returns cannot be "
                   "awaited (TypeError: object ... can't be used in 'await' expression)")
    if c.mode in ("sync", "class") and is_async:
        out.append(f"is async, but slime calls it without awaiting: {c.call} ({c.source}); it would get a "
                   "coroutine, never the result")
    try:
        sig = inspect.signature(fn)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # a builtin or an extension: slime's call decides
        return out
    names = list(sig.parameters)
    kw = {k: None for k in c.keywords}
    kw.update({k: None for k in c.optional if k in sig.parameters or _takes_any_keyword(sig)})
    try:
        sig.bind(*[None] * len(c.positional), **kw)
    except TypeError as ex:
        out.append(f"takes ({', '.join(names)}), but slime calls it as {c.call} ({c.source}): {ex}")
    if c.shape is not None and len(names) > 1:
        want, other = c.shape
        if names[1] == other:
            out.append(f"names its second parameter {other!r}, but slime passes {_shape_words(want)} there: "
                       f"{c.call} ({c.source}; slime's contract test names it {want!r}, {SHAPE_SOURCE})")
    return out


# builtins whose result is never awaitable: `return float(x)` is as plain as `return 1.0`
_PLAIN_CALLS = frozenset({"float", "int", "bool", "str", "round", "len", "sum", "min", "max", "abs", "list", "dict",
                          "tuple", "set"})


def may_return_awaitable(fn: Any) -> bool:
    """Can this plain function return something slime may await? Only a function whose every `return` is a
    value that cannot be awaited (a literal, arithmetic, a comparison, a display, a plain builtin's result,
    or nothing) cannot; one that returns a call or a name (`return other_async(...)`) may, and is trusted."""
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return True  # no source to read (a builtin, generated code): slime's call decides
    func = tree.body[0] if tree.body else None
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    plain = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.JoinedStr, ast.List, ast.Tuple,
             ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)

    def returns(node: ast.AST):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue  # a nested function's returns are its own
            if isinstance(child, ast.Return):
                yield child.value
            yield from returns(child)

    for value in returns(func):
        if value is None or isinstance(value, plain):
            continue
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in _PLAIN_CALLS:
            continue
        return True
    return False


def _takes_any_keyword(sig) -> bool:
    import inspect

    return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())


def _shape_words(name: str) -> str:
    return "one group of samples (a list)" if name == "samples" else "one sample"


# ----------------------------------------------------------------------------------------------
# the child: import each plugin as load_function does, in this interpreter, and check it
# ----------------------------------------------------------------------------------------------
def describe(ex: BaseException) -> dict:
    """Type, first line and the innermost frame outside the import machinery of an exception."""
    import traceback

    frames = [f for f in traceback.extract_tb(ex.__traceback__)
              if "importlib" not in f.filename and f.filename != __file__ and not f.filename.startswith("<frozen")]
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    text = str(ex).strip().splitlines()
    return {"type": type(ex).__name__, "message": text[0] if text else "", "where": where,
            "name": getattr(ex, "name", None) if isinstance(ex, ImportError) else None}


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001  (a stand-in torch, a broken install: not ours to judge here)
        return False


def probe_one(dest: str, value: str, group_rm: bool) -> dict:
    """One plugin, imported as slime's load_function imports it (misc.py:45-47)."""
    import importlib

    module, _, attr = value.rpartition(".")
    out: dict = {"dest": dest, "value": value, "verdict": "ok", "problems": [], "file": None}
    try:
        mod = importlib.import_module(module)
    except BaseException as ex:  # noqa: BLE001  (SystemExit or KeyboardInterrupt at import are the module's too)
        info = describe(ex)
        missing = isinstance(ex, ModuleNotFoundError) and info["name"] and (
            module == info["name"] or module.startswith(info["name"] + "."))
        out.update(verdict="missing" if missing else "import_error", error=info)
        return out
    out["file"] = getattr(mod, "__file__", None)
    if _cuda_initialised():
        out.update(verdict="gpu", problems=["initialised CUDA while being imported"])
        return out
    try:
        fn = getattr(mod, attr)
    except AttributeError:
        out.update(verdict="no_attr")
        return out
    c = contract_for(dest, group_rm)
    problems = contract_problems(fn, c) if c is not None else ([] if callable(fn) else ["is not callable"])
    if problems:
        out.update(verdict="contract", problems=problems, signature=_signature(fn))
    return out


def _signature(fn: Any) -> str:
    import inspect

    try:
        return ("async " if inspect.iscoroutinefunction(fn) else "") + str(inspect.signature(fn))
    except (TypeError, ValueError):
        return ""


def _library_dirs() -> list[str]:
    """The interpreter's standard library and site-packages (fingerprinted by the caller as directories)."""
    import sysconfig

    paths = sysconfig.get_paths()
    return sorted({os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths})


def child(argv: list[str]) -> int:
    result_file = argv[1]
    request = json.load(sys.stdin)
    sys.path[0] = request["path0"]  # the trainer's: its script's directory, or its working directory (-m)
    before = set(sys.modules)
    out: dict = {"python": sys.executable, "version": sys.version.split()[0], "plugins": [], "prelude_error": None}
    prelude = request.get("prelude")
    if prelude:
        import importlib

        module, _, name = prelude.rpartition(".")
        try:
            getattr(importlib.import_module(module), name)()
        except BaseException as ex:  # noqa: BLE001
            out["prelude_error"] = describe(ex)
    if out["prelude_error"] is None:
        for dest, value in request["plugins"]:
            out["plugins"].append(probe_one(dest, value, bool(request.get("group_rm"))))
    libs = _library_dirs()
    files = set()
    for name in set(sys.modules) - before:
        f = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(f, str) and os.path.isfile(f):
            real = os.path.realpath(f)
            if not any(real.startswith(d + os.sep) for d in libs):
                files.add(real)
    out["files"] = sorted(files | {p["file"] for p in out["plugins"] if p.get("file")})
    out["library_dirs"] = libs
    with open(result_file, "w", encoding="utf-8") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(child(sys.argv))
