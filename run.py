#!/usr/bin/env python3
"""trainstack: compose conf/ with Hydra, validate, render slime's exact argv, launch.

    python run.py                                   # CPU smoke run (tiny trainer)
    python run.py experiment=qwen3-4B-grpo-dapo dry_run=true
    python run.py -m algo.lr=1e-6,2e-6 dry_run=true
"""
import hydra
from omegaconf import DictConfig

from trainstack.app import prepare_argv, run_app


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> object:
    return run_app(cfg)


if __name__ == "__main__":
    prepare_argv()
    main()
