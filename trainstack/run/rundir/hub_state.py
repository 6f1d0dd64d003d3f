"""What a run's Hub copy is missing, for its status line: `finished, hub: 0/2 pushed, 401`.

status.json's `hub` block and the `hub_push` / `hub_push_failed` / `hub_skip` events say it (written by
the Hub feature's sync, docs/hub.md); this reads them without importing the feature. A run whose every
push failed must not read as a plain `finished`: its Hub copy, which a lost disk would resume from, is
behind.
"""
from __future__ import annotations

import re
from typing import Any

_HTTP = re.compile(r"\b([45]\d\d)\b")


def hub_note(status: dict[str, Any], events: list[dict[str, Any]]) -> str | None:
    """`hub: P/N pushed, <error>` when checkpoints newer than the last pushed one failed to push; None
    when the Hub has all it was asked for (or the run does not sync to the Hub)."""
    hub = status.get("hub")
    if not isinstance(hub, dict):
        return None

    def iterations(kind: str) -> set[int]:
        return {e["iteration"] for e in events if e.get("event") == kind and isinstance(e.get("iteration"), int)}

    pushed, failed, skipped = iterations("hub_push"), iterations("hub_push_failed"), iterations("hub_skip")
    newest = max(pushed, default=-1)
    missing = {i for i in failed - pushed - skipped if i > newest}
    if not missing:
        return None
    error = str(hub.get("last_error") or next((e.get("error") for e in reversed(events)
                                               if e.get("event") == "hub_push_failed" and e.get("error")), "") or "")
    code = _HTTP.search(error)
    why = code.group(1) if code else error.splitlines()[0][:60] if error else ""
    return f"hub: {len(pushed)}/{len(pushed) + len(missing)} pushed" + (f", {why}" if why else "")
