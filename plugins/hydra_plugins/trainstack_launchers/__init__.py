"""`hydra/launcher=<launcher>` for every trainstack launcher (slurm, lium, and any other in the
`trainstack.launchers` entry-point group): one Hydra sweep plugin that checks every point, then
hands them to the launcher. Backends add no Hydra code. See trainstack/launch/base.py."""
