"""The W&B public API (``wandb.Api()``): runs matched by the ids trainstack set, or by group.

trainstack runs log with ``WANDB_RUN_ID`` = the run id (``metrics.wandb_run_id``), so a local
run directory is matched to its W&B run by id; ``--group G`` matches ``group == G``. History
comes from ``run.history(samples=N, pandas=False)`` (one GraphQL ``RunFullHistory`` query per
run). ``WANDB_BASE_URL`` / ``--base-url`` point the client at another server (the tests use a
local fake of the GraphQL endpoint, ``tests/fakes/wandb_api.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.metrics import Series
from trainstack.metrics.wandb_offline import rows_to_series

MAX_SAMPLES = 100_000


@dataclass
class ApiRun:
    id: str
    name: str
    group: str | None
    state: str
    config: dict[str, Any] = field(default_factory=dict)
    series: Series = field(default_factory=dict)


def fetch(project: str, entity: str | None = None, ids: list[str] | None = None, group: str | None = None,
          base_url: str | None = None, timeout: int = 30) -> list[ApiRun]:
    """Runs of ``entity/project`` whose id is in ``ids`` or whose group is ``group``, with history."""
    import wandb

    overrides: dict[str, Any] = {}
    if base_url:
        overrides["base_url"] = base_url
    try:
        api = wandb.Api(overrides=overrides, timeout=timeout)
        path = f"{entity}/{project}" if entity else project
        clauses: list[dict[str, Any]] = []
        if ids:
            clauses.append({"name": {"$in": list(ids)}})
        if group:
            clauses.append({"group": group})
        filters = clauses[0] if len(clauses) == 1 else ({"$or": clauses} if clauses else {})
        out = []
        for r in api.runs(path, filters=filters):
            rows = r.history(samples=MAX_SAMPLES, pandas=False)
            config = {k: v for k, v in dict(r.config).items() if not k.startswith("_")}
            out.append(ApiRun(id=r.id, name=r.name, group=r.group, state=r.state, config=config,
                              series=rows_to_series(list(rows))))
        return out
    except ConfigErrors:
        raise
    except Exception as ex:  # noqa: BLE001 - network / auth / unknown project: one clear message
        msg = str(ex).strip().splitlines()[0] if str(ex).strip() else type(ex).__name__
        raise ConfigErrors([ConfigError(
            "--source wandb", f"cannot read runs of {entity + '/' if entity else ''}{project} from the W&B API: {msg}",
            "check --project/--entity, WANDB_API_KEY and WANDB_BASE_URL, or use a local source "
            "(--source tensorboard|wandb-offline|jsonl)")]) from None
