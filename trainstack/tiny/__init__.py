"""The tiny CPU backend: a drop-in stand-in for ``slime/train.py``.

Same argv (parsed from slime's argument table), same plugin signatures, same checkpoint
layout and metric names, real (tiny) learning on CPU. Swapping the entrypoint
(``python -m trainstack.tiny.train`` instead of ``python3 train.py``) is the only difference
between a laptop run and a GPU run.

Importing this package is cheap: torch, wandb and tensorboard are imported only by the
trainer modules that need them.
"""
