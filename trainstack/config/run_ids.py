"""Ids a run is known by outside its run dir, derived from its run id in one place: W&B's run id.

A leaf: it imports nothing of trainstack, so the renderer (WANDB_RUN_ID), the eval planner and the
metric readers (which look a run up in W&B) share it without reaching into each other.
"""
from __future__ import annotations

import hashlib


def wandb_run_id(run_id: str) -> str:
    """W&B run ids: at most 64 characters, none of / \\ # ? % :."""
    if len(run_id) <= 64:
        return run_id
    return run_id[:55] + "-" + hashlib.sha1(run_id.encode()).hexdigest()[:8]
