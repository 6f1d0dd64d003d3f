"""Every redaction in one place: which names hold credentials, and how a value, a tree, an env or
an argv is shown without them. Secrets come from the environment at run time and are never
written to a run dir, a log or a printed command.

Two nets, both linear in the text: by name (`wandb_key=...`, `"HF_TOKEN": ...`) and by value (the
value of every secret-named environment variable, a URL's `user:password@`, an Authorization
header, a Hugging Face token), so a secret typed under an innocent key is hidden too."""
from __future__ import annotations

import json
import os
import re
import sys
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Iterable, Iterator, Mapping

REDACTED = "<redacted>"

# slime's wandb_key, SGLang/router API keys and passwords, and the usual environment variables
# (WANDB_API_KEY, HF_TOKEN, ...).
_SECRET_WORDS = ("api_key", "api_keys", "password", "secret", "passwd")
_SECRET_EXACT = frozenset({"wandb_key", "hf_token", "huggingface_token", "token", "key"})
# A lease token is the fence's identity, stored in lease.json beside the run: not a credential.
_NOT_SECRET_SUFFIXES = ("_pad_token", "_eod_token", "_prefix_token", "_middle_token", "_suffix_token", "bos_token",
                        "first_token", "per_token", "lease_token")
# Forwarded from the launching shell to the trainer when set there; never rendered or stored.
FORWARDED_SECRETS = ("WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
# The only variables of the launcher's environment a remote job's runtime env carries (Ray logs its
# runtime env world-readable and puts it on every worker's command line): trainstack's own per-run
# facts and the fence, W&B's mode, the tiny trainer's test knobs. Never a secret (those travel in a
# mode-0600 file) and never the commander's token.
RUNTIME_ENV_ALLOWED = ("TRAINSTACK_METRICS_FILE", "TRAINSTACK_RUN_ID", "TRAINSTACK_LEASE_FILE",
                       "TRAINSTACK_LEASE_TOKEN", "TRAINSTACK_LEASE_EPOCH", "TRAINSTACK_FENCE_MARGIN_S",
                       "TRAINSTACK_TINY_SLOW_SAVE", "TRAINSTACK_TINY_THREADS", "WANDB_MODE")
# Shorter values are too likely to occur by chance ("true", a port) to be hidden everywhere.
MIN_SECRET_LEN = 6


@lru_cache(maxsize=8192)  # asked for every env var on every scrub: a pure function of the name
def is_secret_name(name: str) -> bool:
    n = name.lower()
    return n in _SECRET_EXACT or n.endswith(("_token", "_api_key")) and not n.endswith(_NOT_SECRET_SUFFIXES) \
        or any(w in n for w in _SECRET_WORDS)


def runtime_env_vars(env: Mapping[str, str]) -> dict[str, str]:
    """What of `env` a remote job's runtime env may carry: the allow-list, nothing else."""
    return {k: env[k] for k in RUNTIME_ENV_ALLOWED if k in env}


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


# --- where a secret hides in a value ---------------------------------------------------------
# The lookbehind: one attempt per scheme-like word (linear time).
_URL_CREDENTIALS = re.compile(r"(?i)(?<![a-z0-9+.\-])([a-z][a-z0-9+.\-]*://)[^/\s:@'\"]+:[^/\s@'\"]*@")


_ENV_SECRETS: tuple[dict, dict[str, str]] | None = None  # (os.environ's raw data when computed, result)


def secret_env_values(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """value -> name of every secret-named environment variable long enough to look for.

    For ``os.environ`` the answer is kept until the environment changes (compared on its raw byte
    data, a C-level dict comparison): a sweep asks once per config value, thousands of times."""
    global _ENV_SECRETS
    if env is None:
        raw = getattr(os.environ, "_data", None)
        if isinstance(raw, dict) and _ENV_SECRETS is not None and _ENV_SECRETS[0] == raw:
            return _ENV_SECRETS[1]
        found = _secret_values(os.environ)
        if isinstance(raw, dict):
            _ENV_SECRETS = (dict(raw), found)
        return found
    return _secret_values(env)


def _secret_values(env: Mapping[str, str]) -> dict[str, str]:
    return {v: k for k, v in env.items() if v and len(v) >= MIN_SECRET_LEN and is_secret_name(k)}


def secret_in_value(value: Any, env: Mapping[str, str] | None = None) -> str:
    """Why `value` (a config value of a non-secret key) holds a credential ("" when it does not): the
    value of a secret environment variable, a URL with user:password@, or a JSON string with a
    secret-named key in it."""
    if isinstance(value, str):
        known = secret_env_values(env)
        hit = next((name for v, name in known.items() if v in value), None)
        if hit:
            return f"it holds the value of ${hit}"
        if _URL_CREDENTIALS.search(value):
            return "it is a URL with credentials in it (user:password@)"
        if value.lstrip()[:1] in ("{", "["):
            try:
                parsed = json.loads(value)
            except ValueError:
                return ""
            return secret_in_value(parsed, env) or ("it is a JSON string with a secret-named key in it"
                                                    if _secret_keys(parsed) else "")
    elif isinstance(value, dict):
        return next((why for v in value.values() if (why := secret_in_value(v, env))), "")
    elif isinstance(value, list):
        return next((why for v in value if (why := secret_in_value(v, env))), "")
    return ""


def _secret_keys(node: Any) -> bool:
    if isinstance(node, dict):
        return any(is_secret_name(str(k)) and v not in (None, "", [], {}) and not isinstance(v, bool)
                   or _secret_keys(v) for k, v in node.items())
    if isinstance(node, list):
        return any(_secret_keys(v) for v in node)
    return False


# --- by name: `name=value` / `name: value` / `"name": value` in free text -----------------------
_PLACEHOLDERS = ("$(", "${", "<")  # a shell substitution, <redacted>, <token>: no value to hide
# No value to hide either: empty, or a hint's placeholder (`write key=value`).
_EMPTY = {"", "null", "None", "...", "''", '""', "value", "VALUE"}
# The lookbehind keeps a name from starting inside a word: one attempt per word, so linear time.
_NAME_SEP = re.compile(r"(?<![\w.+~\\-])(?:\\?[\"'])?([A-Za-z_+~][\w.+~-]*)(?:\\?[\"'])?(\s*[:=]\s*)")
_OPEN, _CLOSE_CHARS = "[{(", "]})"
_DELIMS = re.compile(r"[,}\])\s]")


class _Scanner:
    """Value ends in `text`, each found in amortised O(1): brackets matched in one pass, and the
    last token and quote searches remembered (matches come in increasing order)."""

    def __init__(self, text: str):
        self.text = text
        self.close: dict[int, int] = {}
        stack: list[int] = []
        for j, c in enumerate(text):
            if c in _OPEN:
                stack.append(j)
            elif c in _CLOSE_CHARS and stack:
                self.close[stack.pop()] = j + 1
        self.token = (-1, -1)
        self.quote: dict[str, tuple[int, int]] = {}

    def _find(self, quote: str, start: int) -> int:
        last_start, found = self.quote.get(quote, (len(self.text) + 1, -1))
        if last_start <= start and (found == -1 or found >= start):
            return found
        found = self.text.find(quote, start)
        self.quote[quote] = (start, found)
        return found

    def value_end(self, i: int) -> int:
        text = self.text
        if i >= len(text):
            return i
        c = text[i]
        if c in _OPEN:
            return self.close.get(i, len(text))
        if c == "\\" and text[i + 1:i + 2] in ("\"", "'"):
            q = text[i:i + 2]
            j = self._find(q, i + 2)
            return len(text) if j < 0 else j + 2
        if c in "\"'":
            j = self._find(c, i + 1)
            return len(text) if j < 0 else j + 1
        s, e = self.token
        if not s <= i <= e:
            m = _DELIMS.search(text, i)
            e = m.start() if m else len(text)
            self.token = (i, e)
        return e


def redact_names(text: str) -> str:
    """Any `name=value` / `name: value` in free text (an override, a structured value, an error
    message) with the value of a secret-named name hidden, however deep it sits."""
    out, pos = [], 0
    scan: _Scanner | None = None
    for m in _NAME_SEP.finditer(text):
        if m.start() < pos:
            continue
        leaf = m.group(1).lstrip("+~").rsplit(".", 1)[-1]
        if not is_secret_name(leaf) or text.startswith(_PLACEHOLDERS, m.end()) or not _assigns(text, m):
            continue
        scan = scan or _Scanner(text)
        end = scan.value_end(m.end())
        if text[m.end():end] not in _EMPTY:
            out.append(text[pos:m.end()] + REDACTED)
            pos = end
    out.append(text[pos:])
    return "".join(out)


def _assigns(text: str, m: re.Match[str]) -> bool:
    """Is this `name<sep>` an assignment (a value follows) rather than prose or a path? `name=...` is;
    `name: ...` only when the name is quoted (JSON), starts its line (YAML) or follows `{`, `[` or `,`
    (a flow mapping): "unknown key: foo" and
    "/etc/passwd: not a sweep directory" name no secret. A name inside a path never does."""
    if m.start() > 0 and text[m.start() - 1] in "/\\":
        return False
    if "=" in m.group(2):
        return True
    if text[m.start()] in "\"'\\":
        return True
    i = m.start() - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    return i < 0 or text[i] in "\n{[,-"  # a line's first key (YAML), or a key of a flow mapping {K: v, K: v}


def redact_text(text: str) -> str:
    """Free text with every secret hidden: by name (redact_names), then by value (scrub)."""
    return scrub(redact_names(text))


def redact_override(text: str) -> str:
    """`key=value` as the user typed it, with every secret value in it hidden."""
    key, eq, _ = text.partition("=")
    if eq and is_secret_name(key.lstrip("+~").rsplit(".", 1)[-1]):
        return f"{key}={REDACTED}"
    return redact_text(text)


def env_fix(path: str) -> str:
    """The fix for a secret found in a config or on the command line: the environment."""
    leaf = path.rsplit(".", 1)[-1].split("[")[0].lstrip("+~")
    if not is_secret_name(leaf) and not leaf.startswith("wandb"):
        return (f"remove the credential from {path}: trainstack forwards WANDB_API_KEY, HF_TOKEN and the like to the "
                "trainer from the launching shell's environment (never through files or the command line); a URL "
                "takes no user:password@ (log in with the tool's own variable, e.g. WANDB_API_KEY)")
    env_name = "WANDB_API_KEY" if leaf.startswith("wandb") else leaf.upper()
    return (f"export {env_name}=... in the launching shell instead; trainstack forwards WANDB_API_KEY, HF_TOKEN "
            "and the like to the trainer from the environment (never through files or the command line)")


# --- by value ----------------------------------------------------------------------------------
# Credentials recognisable by their shape: an Authorization header, a Hugging Face user token.
_SECRET_SHAPES = (re.compile(r"(?i)(bearer\s+)[^\s'\",;]+"), re.compile(r"\bhf_[A-Za-z0-9]{16,}\b"))


@lru_cache(maxsize=32)
def _alternation(values: tuple[str, ...]) -> re.Pattern[str] | None:
    """One pattern for all known values, longest first (a value inside another is hidden whole)."""
    return re.compile("|".join(map(re.escape, values))) if values else None


def scrub(text: str, extra: Iterable[str] = (), env: Mapping[str, str] | None = None) -> str:
    """Free text (an error message, a client library's message, a log line) with every credential
    removed in one pass each: the values of the environment's secret-named variables, `extra` known
    values, a URL's user:password@, bearer headers and Hugging Face tokens."""
    values = set(secret_env_values(env)) | {v for v in extra if v and len(v) >= 4}
    pattern = _alternation(tuple(sorted(values, key=lambda v: (-len(v), v))))
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _SECRET_SHAPES[0].sub(lambda m: m.group(1) + REDACTED, text)
    return _SECRET_SHAPES[1].sub(REDACTED, text)


# --- every line trainstack prints --------------------------------------------------------------
class ScrubbingStream:
    """A text stream that hides credentials (scrub) in everything written through it: what a command
    echoes back (an argument, a repo id, a client library's error) cannot print a secret's value."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(scrub(text) if text else text)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, buffer, ...
        return getattr(self._stream, name)


@contextmanager
def scrubbed_output() -> Iterator[None]:
    """sys.stdout and sys.stderr scrubbed while a command runs (restored after, SystemExit included)."""
    old = sys.stdout, sys.stderr
    if isinstance(old[0], ScrubbingStream):  # nested (trainstack run inside trainstack): once is enough
        yield
        return
    sys.stdout, sys.stderr = ScrubbingStream(old[0]), ScrubbingStream(old[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = old
