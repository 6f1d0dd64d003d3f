"""Every path trainstack writes on the Hub, and nothing else. One folder per run in the repo:

    <run_id>/iter_XXXXXXX/...                          a checkpoint, as slime wrote it under --save
    <run_id>/rollout/global_dataset_state_dict_N.pt    its data cursor
    <run_id>/hf/iter_XXXXXXX/...                       the --save-hf export of that save (a loadable model)
    <run_id>/rollout_data/...                          rollout trajectories (hub.push_rollouts)
    <run_id>/manifests/iter_XXXXXXX.json               what a pushed checkpoint is: files, sizes, the commit
    <run_id>/spec.json                                 the run as submitted (no secrets)
    <run_id>/latest.json                               the pointer: the newest pushed checkpoint's manifest,
                                                       committed after its files (the Hub-side tracker)
"""
from __future__ import annotations

import re

from trainstack.storage import layout as rundir_layout
from trainstack.storage.layout import iter_name

POINTER = "latest.json"
MANIFESTS = "manifests"
HF = "hf"
ROLLOUT_DATA = rundir_layout.ROLLOUT_DATA
SPEC = rundir_layout.SPEC
DATA_CURSOR_DIR = "rollout"  # slime's {save}/rollout/global_dataset_state_dict_{N}.pt
ITER_RE = re.compile(r"^iter_(\d{7})$")
MANIFEST_RE = re.compile(r"^iter_(\d{7})\.json$")


def data_cursor(iteration: int) -> str:
    """The data cursor of a save, relative to --save (slime's name)."""
    return f"{DATA_CURSOR_DIR}/global_dataset_state_dict_{iteration}.pt"


def in_run(run_id: str, *parts: str) -> str:
    return "/".join((run_id, *parts))


def pointer(run_id: str) -> str:
    return in_run(run_id, POINTER)


def manifest(run_id: str, iteration: int) -> str:
    return in_run(run_id, MANIFESTS, f"{iter_name(iteration)}.json")


def hf_export(run_id: str, iteration: int) -> str:
    return in_run(run_id, HF, iter_name(iteration))
