"""Every redaction in one place: which names hold credentials, and how a value, a tree, an env or
an argv is shown without them. Secrets come from the environment at run time and are never
written to a run dir, a log or a printed command."""
from __future__ import annotations

import os
import re
from typing import Any, Iterable, Mapping

REDACTED = "<redacted>"

# slime's wandb_key, SGLang/router API keys and passwords, and the usual environment variables
# (WANDB_API_KEY, HF_TOKEN, ...).
_SECRET_WORDS = ("api_key", "api_keys", "password", "secret", "passwd")
_SECRET_EXACT = frozenset({"wandb_key", "hf_token", "huggingface_token", "token", "key"})
_NOT_SECRET_SUFFIXES = ("_pad_token", "_eod_token", "_prefix_token", "_middle_token", "_suffix_token", "bos_token",
                        "first_token", "per_token")
# Forwarded from the launching shell to the trainer when set there; never rendered or stored.
FORWARDED_SECRETS = ("WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def is_secret_name(name: str) -> bool:
    n = name.lower()
    return n in _SECRET_EXACT or n.endswith(("_token", "_api_key")) and not n.endswith(_NOT_SECRET_SUFFIXES) \
        or any(w in n for w in _SECRET_WORDS)


def redact(tree: Any) -> Any:
    """A config tree / args map with the values of secret-named keys replaced."""
    if isinstance(tree, dict):
        return {k: (REDACTED if is_secret_name(str(k)) and v not in (None, "", {}) and not isinstance(v, (dict, bool))
                    else redact(v)) for k, v in tree.items()}
    if isinstance(tree, list):
        return [redact(v) for v in tree]
    return tree


def redacted_env(env: dict[str, str]) -> dict[str, str]:
    """For display: secrets shown as <redacted>."""
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


def public_env(env: dict[str, str]) -> dict[str, str]:
    """For stored and runnable commands: secrets left out, so they come from the caller's environment
    (a `KEY=<redacted>` there would override the real one)."""
    return {k: v for k, v in env.items() if not is_secret_name(k)}


def redact_override(text: str) -> str:
    """`key=value` as the user typed it, with a secret value hidden."""
    key, eq, _ = text.partition("=")
    return f"{key}=<redacted>" if eq and is_secret_name(key.lstrip("+~").rsplit(".", 1)[-1]) else text


# Credentials recognisable by their shape: an Authorization header, a Hugging Face user token.
_SECRET_SHAPES = (re.compile(r"(?i)(bearer\s+)[^\s'\",;]+"), re.compile(r"\bhf_[A-Za-z0-9]{16,}\b"))


def scrub(text: str, extra: Iterable[str] = (), env: Mapping[str, str] | None = None) -> str:
    """Free text (an error message from a client library, a log line) with every credential removed:
    the values of the environment's secret-named variables, `extra` known values, bearer headers and
    Hugging Face tokens."""
    env = os.environ if env is None else env
    values = {v for k, v in env.items() if v and is_secret_name(k)} | {v for v in extra if v}
    for v in sorted(values, key=len, reverse=True):
        if len(v) >= 4:
            text = text.replace(v, REDACTED)
    text = _SECRET_SHAPES[0].sub(lambda m: m.group(1) + REDACTED, text)
    return _SECRET_SHAPES[1].sub(REDACTED, text)
