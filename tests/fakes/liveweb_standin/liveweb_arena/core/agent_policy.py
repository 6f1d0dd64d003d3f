"""Stand-in: the text-action protocol of liveweb-arena <= 350b4ff (its presence marks the version)."""
import json
from dataclasses import dataclass, field


@dataclass
class BrowserAction:
    action_type: str
    params: dict = field(default_factory=dict)


class AgentPolicy:
    def parse_response(self, raw: str):
        start, end = raw.find("{"), raw.rfind("}")
        try:
            data = json.loads(raw[start:end + 1])
            action = data["action"]
            return BrowserAction(action["type"], action.get("params") or {})
        except (ValueError, KeyError, TypeError):
            return None
