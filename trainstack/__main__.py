"""`python -m trainstack ...` = the `trainstack` command (what SLURM jobs and pods call)."""
from trainstack.cli.main import script

script()
