"""Launchers: put a stored run spec where its cluster says. The interface (base.py: `Launcher`, and `Row`, a run
as status shows it), the trainer's local process (process.py), and one module (or a few) per backend: local,
ray_job, slurm, lium (with its commander client and the pod's worker, lium_worker.py). Launchers are found by
name through trainstack/registry.py. May import: preflight/, run/ and everything below, and the commander's
client; never reports/, sweep/, cli/ or a feature.
"""
