"""`hydra/launcher=lium`: every sweep point composed and validated, then registered with the Lium
commander (which rents and keeps a pod per run); returns at once with `<sweep_dir>/sweep.json`.
See docs/lium.md.
"""
