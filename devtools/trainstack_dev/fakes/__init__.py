"""Local stand-ins for external services trainstack cannot reach in tests: they speak the real
clients' wire protocols (the real client talks to them; nothing is mocked)."""
