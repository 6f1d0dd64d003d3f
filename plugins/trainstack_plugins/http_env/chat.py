"""The model's tokenizer and chat template, loaded from its Hugging Face directory. No fallback.

A model directory (slime's ``--hf-checkpoint``) holds ``tokenizer.json`` and a chat template
(``chat_template.jinja``, or ``chat_template`` in ``tokenizer_config.json``). Token ids come from
the ``tokenizers`` library, the same backend ``transformers``' fast tokenizers (slime's) run, so
ids are identical; the template is rendered with Jinja the way ``apply_chat_template`` does
(sandboxed, ``trim_blocks``/``lstrip_blocks``, ``raise_exception``, ``tojson``, ``strftime_now``,
the ``generation`` tag, special tokens as variables). A directory without these files is an
error naming the file, never a silent character tokenizer.
"""
from __future__ import annotations

import json
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
# Stand-in message contents for turn_tail: plain words no template rewrites (no whitespace to trim,
# no think tags to split on).
USER_MARKER = "TrainstackStandInUserMessage"
ASSISTANT_MARKER = "TrainstackStandInAssistantMessage"
_SPECIALS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class ChatTokenizerError(ValueError):
    """The tokenizer directory cannot give token ids or a chat template (a configuration error)."""


def _content(token: Any) -> Any:
    return token.get("content") if isinstance(token, dict) else token


def _compile(source: str):
    import datetime

    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(Extension):
        """``{% generation %}...{% endgeneration %}`` (assistant-mask markers): renders its body."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(source)


class ChatTokenizer:
    """``encode`` / ``decode`` token ids and ``render`` a conversation with the model's chat template."""

    def __init__(self, path: str | Path):
        d = Path(path)
        self.path = str(d)
        tok_file = d / TOKENIZER_FILE
        if not tok_file.is_file():
            raise ChatTokenizerError(f"{tok_file} does not exist: the tokenizer directory (--hf-checkpoint, or "
                                     "http_env.tokenizer) must hold the model's tokenizer.json")
        from tokenizers import Tokenizer

        try:
            self.tokenizer = Tokenizer.from_file(str(tok_file))
        except Exception as e:  # noqa: BLE001 - the library raises its own exception type
            raise ChatTokenizerError(f"{tok_file} cannot be loaded: {e}") from None
        config: dict = {}
        if (d / CONFIG_FILE).is_file():
            try:
                config = json.loads((d / CONFIG_FILE).read_text(encoding="utf-8"))
            except ValueError as e:
                raise ChatTokenizerError(f"{d / CONFIG_FILE} is not JSON: {e}") from None
        template: Any = None
        if (d / TEMPLATE_FILE).is_file():
            template = (d / TEMPLATE_FILE).read_text(encoding="utf-8")
        else:
            template = config.get("chat_template")
            if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
                template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        if not template:
            raise ChatTokenizerError(f"{d} has no chat template ({TEMPLATE_FILE}, or chat_template in {CONFIG_FILE}): "
                                     "observations must be rendered with the model's template")
        try:
            self.template = _compile(template)
        except Exception as e:  # noqa: BLE001 - jinja's TemplateSyntaxError and friends
            raise ChatTokenizerError(f"{d}: the chat template does not compile: {e}") from None
        self.special_tokens = {k: _content(config.get(k)) for k in _SPECIALS if config.get(k) is not None}
        self._lock = threading.Lock()  # tokenizers objects are shared between threads (slime's workers)

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` as it stands (special-token strings in it become their ids; nothing added)."""
        with self._lock:
            return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens included (what the model actually produced)."""
        with self._lock:
            return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def render(self, messages: list[dict], add_generation_prompt: bool, **template_kwargs: Any) -> str:
        """``apply_chat_template(messages, tokenize=False, ...)``; ``template_kwargs`` as there (e.g.
        ``enable_thinking=False``)."""
        return self.template.render(**{**self.special_tokens, **template_kwargs}, messages=messages,
                                    add_generation_prompt=add_generation_prompt, tools=None, documents=None)

    def turn_tail(self, observation: dict, system: Optional[dict] = None, **template_kwargs: Any) -> str:
        """The text the template writes after an assistant message's content when ``observation``
        follows it: what closes the assistant turn, the observation's turn, and the generation prompt.

        Rendered on a fixed stand-in conversation (``system``, a user and an assistant message holding
        markers), never on the episode's real history: templates rewrite earlier turns when a message is
        added (Qwen3 drops an earlier answer's ``<think>`` block, GLM-4.5 its reasoning), so "render the
        conversation with the observation minus the one without" does not give the observation's text.
        """
        msgs = ([system] if system else []) + [{"role": "user", "content": USER_MARKER},
                                               {"role": "assistant", "content": ASSISTANT_MARKER}, observation]
        text = self.render(msgs, add_generation_prompt=True, **template_kwargs)
        at = text.rfind(ASSISTANT_MARKER)
        if at < 0 or text.count(ASSISTANT_MARKER) != 1:
            raise ChatTokenizerError(f"{self.path}: the chat template does not render an assistant message's content "
                                     "as it is, so the text it adds after the model's turn cannot be found")
        tail = text[at + len(ASSISTANT_MARKER):]
        content = str(observation.get("content") or "").strip()
        if content and content not in tail:
            raise ChatTokenizerError(f"{self.path}: the chat template does not render the observation after the "
                                     f"assistant's turn (with role {observation.get('role')!r})")
        return tail


@lru_cache(maxsize=8)
def load(path: str) -> ChatTokenizer:
    """One ChatTokenizer per directory per process."""
    return ChatTokenizer(path)
