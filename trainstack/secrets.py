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


_PLACEHOLDERS = ("$(", "${", "<")  # a shell substitution, <redacted>, <token>: no value to hide
_EMPTY = {"", "null", "None", "...", "''", '""'}
_NAME_SEP = re.compile(r"([A-Za-z_+~][\w.+~-]*)(\s*[:=]\s*)")
_CLOSE = {"[": "]", "{": "}", "(": ")"}


def _value_end(text: str, i: int) -> int:
    """End of the value starting at text[i]: a balanced group, a quoted string or a bare token."""
    if i >= len(text):
        return i
    c = text[i]
    if c in _CLOSE:
        depth, j = 0, i
        while j < len(text):
            if text[j] in _CLOSE:
                depth += 1
            elif text[j] in _CLOSE.values():
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return len(text)
    if c in "\"'":
        j = text.find(c, i + 1)
        return len(text) if j < 0 else j + 1
    m = re.compile(r"[^,}\])\s]*").match(text, i)
    return m.end() if m else i


def redact_text(text: str) -> str:
    """Any `name=value` / `name: value` in free text (an override, a structured value, an error
    message) with the value of a secret-named name hidden, however deep it sits."""
    out, pos = [], 0
    for m in _NAME_SEP.finditer(text):
        if m.start() < pos:
            continue
        leaf = m.group(1).lstrip("+~").rsplit(".", 1)[-1]
        end = _value_end(text, m.end())
        if is_secret_name(leaf) and not text.startswith(_PLACEHOLDERS, m.end()) and text[m.end():end] not in _EMPTY:
            out.append(text[pos:m.end()] + REDACTED)
            pos = end
    out.append(text[pos:])
    return "".join(out)


def redact_override(text: str) -> str:
    """`key=value` as the user typed it, with every secret value in it hidden."""
    key, eq, _ = text.partition("=")
    if eq and is_secret_name(key.lstrip("+~").rsplit(".", 1)[-1]):
        return f"{key}={REDACTED}"
    return redact_text(text)


def env_fix(path: str) -> str:
    """The fix for a secret found in a config or on the command line: the environment."""
    leaf = path.rsplit(".", 1)[-1].split("[")[0].lstrip("+~")
    env_name = "WANDB_API_KEY" if leaf.startswith("wandb") else leaf.upper()
    return (f"export {env_name}=... in the launching shell instead; trainstack forwards WANDB_API_KEY, HF_TOKEN "
            "and the like to the trainer from the environment (never through files or the command line)")


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
