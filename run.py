#!/usr/bin/env python3
"""trainstack: compose conf/ with Hydra, validate, render slime's exact argv, launch.

    python run.py                                   # CPU smoke run (tiny trainer)
    python run.py experiment=qwen3-4B-grpo-dapo dry_run=true
    python run.py -m algo.lr=1e-6,2e-6 dry_run=true

Installed with pip, `trainstack run ...` is the same command.
"""
from trainstack.cli.app import main

if __name__ == "__main__":
    from trainstack.terminal.pipes import run_script

    run_script(main)  # its exit code; no interpreter teardown after the work is done (terminal/pipes.py)
