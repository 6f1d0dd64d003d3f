"""Stand-in for liveweb_arena.utils.llm_client.LLMClient (same constructor; no network)."""


class LLMClient:
    instances = []

    def __init__(self, base_url: str, api_key: str, default_timeout: int = None):
        self.base_url, self.api_key, self.calls = base_url, api_key, 0
        LLMClient.instances.append(self)
