"""Stand-in for liveweb-arena's task_registry.py at 350b4ff: ``parse_task_id``'s variation seed
(the real one also maps the task id to its template combination)."""
TASK_IDS_PER_COMBO = 10000


def parse_task_id(task_id: int) -> dict:
    if task_id < 1:
        raise ValueError("task_id must be >= 1")
    return {"task_id": task_id, "variation_seed": (task_id - 1) % TASK_IDS_PER_COMBO}
