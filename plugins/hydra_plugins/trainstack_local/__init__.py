"""Hydra plugins: a basic sweeper and in-process launcher that compose each sweep point from a
cached composition (trainstack.config.sweep_cache), so a 256-point dry-run sweep takes seconds, not minutes."""
