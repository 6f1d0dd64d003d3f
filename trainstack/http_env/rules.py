"""The dry run's checks of an env preset's ``meta.http_env`` (a validate.rules hook: http_env/feature.py).

Every key is typed (``settings.py``): unknown keys get a did-you-mean, wrong types and choices
are named with the file they came from. Beyond that: the generate function needs a tokenizer
(``tokenizer`` or ``hf_checkpoint``) and its settings file (``custom_config_path`` is trainstack's
to write), and a server trainstack starts on 127.0.0.1 cannot serve workers on other nodes.
"""
from __future__ import annotations

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.http_env.settings import CONFIG_KEY, parse_block
from trainstack.rules.validate import Ctx

PREFIX = f"env.meta.{CONFIG_KEY}."


def http_env_settings(ctx: Ctx) -> list[ConfigError]:
    node = (ctx.run.meta.get("env") or {}).get(CONFIG_KEY)
    if node is None:
        return []
    source_of = ctx.run.origin.source_of
    if not isinstance(node, dict):
        return [ConfigError(PREFIX.rstrip("."), "must be a mapping of settings (docs/http_env.md)", value=node,
                            source=source_of(PREFIX.rstrip(".")))]
    try:
        block = parse_block(node, PREFIX, source_of)
    except ConfigErrors as e:
        return e.errors
    out = []
    if block.serve is not None and block.settings.url is not None:
        out.append(ConfigError(f"{PREFIX}url", "is set together with serve: trainstack serves the env itself and "
                               "gives the generate function that server's URL", f"drop {PREFIX}url, or drop "
                               f"{PREFIX}serve to use the server at the URL", value=block.settings.url,
                               source=source_of(f"{PREFIX}url")))
    if block.settings.tokenizer is None and not ctx.is_set("hf_checkpoint"):
        out.append(ConfigError(f"{PREFIX}tokenizer", "no tokenizer: the generate function renders observations with "
                               "the model's chat template and tokenizes them", f"set model.hf_checkpoint (the model's "
                               f"Hugging Face dir) or {PREFIX}tokenizer", source=source_of(f"{PREFIX}tokenizer")))
    expected = ctx.run.args.get("custom_config_path")
    if ctx.run.source("custom_config_path").startswith(("conf/", "command line")) and expected:
        out.append(ctx.err("custom_config_path", f"trainstack writes the HTTP env settings ({PREFIX.rstrip('.')}) "
                           "into the run dir and passes that file as --custom-config-path; a second file cannot be "
                           "given", f"move your keys into {PREFIX.rstrip('.')} or drop {ctx.key('custom_config_path')}"))
    if block.serve is not None and block.serve.host in ("127.0.0.1", "localhost") and ctx.run.cluster.num_nodes > 1:
        out.append(ConfigError(f"{PREFIX}serve.host", f"a server on {block.serve.host} is unreachable from the other "
                               f"{ctx.run.cluster.num_nodes - 1} node(s), where slime's rollout workers run",
                               f"run the env server yourself and set {PREFIX}url=http://HOST:PORT (drop serve)",
                               value=block.serve.host, related={"cluster.num_nodes": ctx.run.cluster.num_nodes}))
    return out

