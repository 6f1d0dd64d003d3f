"""The Lium commander: per-run leases, a reconciler that keeps each run on a live pod, and an
HTTP API for workers and operators (`trainstack commander serve`). Docs: docs/lium.md.

store.py (SQLite WAL state), reconciler.py (pods follow the runs), provider.py (the Lium SDK),
api.py (FastAPI), client.py (what workers, the launcher and the CLI call), server.py (serve).
"""
