"""slime plugin: a custom generate function that drives multi-turn episodes against an HTTP
environment (``trainstack_plugins.http_env.generate.generate``; protocol and settings in docs/http_env.md)."""
