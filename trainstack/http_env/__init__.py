"""HTTP environments for agentic multi-turn RL (docs/http_env.md).

An environment (a browser, a tool, a text world) runs as an HTTP service; slime's custom generate
function ``trainstack_plugins.http_env.generate.generate`` drives multi-turn episodes against it. This package
holds the trainstack side: the typed settings (``settings``), the protocol (``protocol``), the
reference server (``server``, ``trainstack env serve NAME``), its environments (``chain_sum``, the
built-in task; ``liveweb``, the LiveWeb-Arena bridge) and the sidecar that starts a server for a run
(``sidecar``); ``feature`` registers it at trainstack's hook points. Importing it is cheap: FastAPI, uvicorn and the rest load inside the functions that
use them.
"""
