"""`hydra/launcher=slurm`: trainstack's Hydra launcher on top of hydra-submitit-launcher.

Each sweep point is one SLURM job sized from the point's composed `cluster`, named after its
run_id with `--dependency=singleton`; `wait=false` (default) submits, writes
`<sweep_dir>/sweep.json` and returns at once. See docs/slurm.md.
"""
