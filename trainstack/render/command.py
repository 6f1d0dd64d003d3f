"""ResolvedRun -> SlimeCommand: slime's exact argv, grouped, plus the runtime env.

Rendering is by dest with argparse's semantics (store_true/store_false/--[no-]x/nargs/append/
json), in the argument table's order within each group so output is deterministic whatever
order the YAML files use. Full flag names only (SGLang would accept abbreviations).
"""
from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from trainstack.upstream import argtable as at
from trainstack import secrets
from trainstack.upstream import slime_root
from trainstack.config.backends import BACKENDS
from trainstack.config.resolve import PROJECT_ROOT, ResolvedRun
from trainstack.config.run_ids import wandb_run_id
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's _negative_number_matcher
RAY_ADDRESS = "http://127.0.0.1:8265"


@dataclass
class SlimeCommand:
    """The process to start: entrypoint + argv, its environment and working directory."""

    entrypoint: list[str]  # e.g. ["python3", "/abs/slime/train.py"]
    groups: dict[str, list[str]]  # megatron / sglang / slime -> argv tokens
    env: dict[str, str]  # runtime env for the trainer (Ray runtime_env env_vars)
    cwd: str
    backend: str
    run_id: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def argv(self) -> list[str]:
        return [tok for g in at.GROUPS for tok in self.groups.get(g, [])]

    def full_argv(self) -> list[str]:
        return [*self.entrypoint, *self.argv]

    def redacted_env(self) -> dict[str, str]:
        """For display: secrets shown as <redacted>."""
        return secrets.redacted_env(self.env)

    def public_env(self) -> dict[str, str]:
        """For runnable commands: secrets left out, so they come from the caller's environment
        (a `KEY=<redacted>` there would override the real one)."""
        return secrets.public_env(self.env)

    def ray_submit_argv(self, address: str = RAY_ADDRESS) -> list[str]:
        runtime_env = {"env_vars": self.public_env()}
        return ["ray", "job", "submit", f"--address={address}",
                f"--runtime-env-json={json.dumps(runtime_env, sort_keys=True)}", "--", *self.full_argv()]

    def shell_line(self) -> str:
        """Copy-pastable command (no secrets): a Ray job for slime, a plain process for tiny."""
        if self.backend == "tiny":
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.public_env().items()))
            return f"cd {shlex.quote(self.cwd)} && env {env} " + shlex.join(self.full_argv())
        return shlex.join(self.ray_submit_argv())

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["env"] = self.redacted_env()
        d["argv"] = self.argv
        d["ray_submit"] = self.ray_submit_argv() if self.backend == "slime" else None
        return d


def format_value(v: Any) -> str:
    """One argv token. A negative number must match argparse's negative-number pattern
    (`-5`, `-0.00001`): `-1e-05` would be read as an option and the flag would get no value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        text = repr(v)
        if v < 0 and ("e" in text or "E" in text):
            from decimal import Decimal

            text = format(Decimal(text), "f")
        return text
    return str(v)


def render_dest(spec: at.ArgSpec, value: Any) -> list[str]:
    """Tokens for one dest; [] when the value means 'leave slime's default'."""
    if value is None:
        return []
    if spec.is_switch:
        # Whichever of the dest's actions sets this value (a dest may have a store_true and a
        # store_false flag); nothing when no flag can and the value is already slime's default.
        flag = spec.true_flag if value else spec.false_flag
        return [flag] if flag else []
    if spec.value_kind == at.JSON:
        return [spec.flag, value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))]
    if spec.kind == at.APPEND:
        out: list[str] = []
        for v in value if isinstance(value, list) else [value]:
            out += [spec.flag, *map(format_value, v if isinstance(v, list) else [v])]
        return out
    if isinstance(value, list):
        return [spec.flag, *map(format_value, value)]
    token = format_value(value)
    if token.startswith("-") and not _NEGATIVE_NUMBER.match(token):
        return [f"{spec.flag}={token}"]  # argparse would take a separate '-x' token for an option
    return [spec.flag, token]


def flag_spans(tokens: list[str]) -> list[tuple[str, list[str]]]:
    """Rendered argv -> [(flag, its value tokens)], splitting at tokens that are slime flags."""
    flags = at.load_table().flag_to_dest
    is_flag = lambda t: t.startswith("--") and t.split("=", 1)[0] in flags  # noqa: E731
    spans, i = [], 0
    while i < len(tokens):
        j = i + 1
        while j < len(tokens) and not is_flag(tokens[j]):
            j += 1
        flag, eq, inline = tokens[i].partition("=")
        if eq and flag in flags:  # `--flag=-value`
            spans.append((flag, [inline, *tokens[i + 1:j]]))
        else:
            spans.append((tokens[i], tokens[i + 1:j]))
        i = j
    return spans


def render_args(args: dict[str, Any]) -> dict[str, list[str]]:
    table = at.load_table()
    groups: dict[str, list[str]] = {g: [] for g in at.GROUPS}
    for dest in table.dests():  # table order: deterministic, independent of YAML order
        if dest in args:
            spec = table[dest]
            groups[spec.group] += render_dest(spec, args[dest])
    return groups


def runtime_env(run: ResolvedRun) -> dict[str, str]:
    """Env for the trainer processes (upstream scripts' runtime-env-json, plus trainstack's own)."""
    pythonpath = [str(PROJECT_ROOT)]  # trainstack (a checkout, or site-packages holding trainstack_plugins)
    if (PROJECT_ROOT / "plugins" / "trainstack_plugins").is_dir():  # a checkout: trainstack_plugins by dotted path
        pythonpath.append(str(PROJECT_ROOT / "plugins"))
    env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
    if run.cluster.backend == "slime":
        if run.slime.megatron_root:
            pythonpath.insert(0, run.slime.megatron_root)
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
        if run.cluster.has_nvlink is not None and "NCCL_ALGO" not in run.runtime_env.env_vars:
            env["NCCL_NVLS_ENABLE"] = "1" if run.cluster.has_nvlink else "0"
    else:  # a trainstack trainer imports slime's code from slime.root (trainstack/upstream/slime_root.py)
        env[slime_root.ENV] = str(run.slime.root)  # resolved: never None (trainstack/config/resolve.py)
    pythonpath += run.runtime_env.pythonpath
    env["PYTHONPATH"] = ":".join(dict.fromkeys(pythonpath))
    if run.args.get("use_tensorboard"):
        env["TENSORBOARD_DIR"] = f"{run.run_dir}/tensorboard"
    if run.args.get("use_wandb"):  # one W&B run per run_id, continued across restarts
        env["WANDB_RUN_ID"] = wandb_run_id(run.run_id)
        env["WANDB_RESUME"] = "allow"
    for k, v in run.runtime_env.env_vars.items():  # null removes the variable (trainstack's default too)
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def render(run: ResolvedRun) -> SlimeCommand:
    backend = BACKENDS[run.cluster.backend]
    if backend.module:
        entry = [sys.executable, "-m", backend.module]
        cwd = str(PROJECT_ROOT)
    else:
        cwd = str(run.slime.root)  # resolved: never None (trainstack/config/resolve.py)
        entry = ["python3", f"{cwd.rstrip('/')}/{run.entrypoint}"]
    return SlimeCommand(entrypoint=entry, groups=render_args(run.args), env=runtime_env(run), cwd=cwd,
                        backend=run.cluster.backend, run_id=run.run_id,
                        meta={"slime_commit": at.load_table().slime_commit, "name": run.name})
