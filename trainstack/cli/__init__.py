"""The commands: `trainstack ...` (main), the Hydra task behind run.py that builds a run and dry-runs or launches
it (app), the grouped help, tab completion and `--version`. The top floor of the core: may import any core
folder; features are reached by name (commander serve) or join through hooks.
"""
