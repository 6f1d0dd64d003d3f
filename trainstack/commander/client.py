"""A small HTTP client of the commander (stdlib only: it runs in workers on pods, in the launcher
and in `trainstack status/cancel/logs`). Errors carry the HTTP status and the server's reason."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class CommanderError(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(f"{status}: {detail}")
        self.status, self.detail = status, detail


class Unreachable(CommanderError):
    def __init__(self, detail: str):
        super().__init__(0, detail)


class CommanderClient:
    def __init__(self, url: str, token: str, timeout: float = 10.0):
        self.url = url.rstrip("/")
        self._token = token
        self.timeout = timeout

    def __repr__(self) -> str:  # never the token
        return f"CommanderClient({self.url!r})"

    def call(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {self._token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as ex:
            try:
                detail = json.loads(ex.read() or b"{}").get("detail", ex.reason)
            except ValueError:
                detail = ex.reason
            raise CommanderError(ex.code, str(detail)) from None
        except (urllib.error.URLError, OSError) as ex:
            raise Unreachable(f"{self.url}: {getattr(ex, 'reason', ex)}") from None

    def get(self, path: str, **kw: Any) -> Any:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.call("POST", path, body if body is not None else {}, **kw)
