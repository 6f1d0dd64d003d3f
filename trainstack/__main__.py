"""`python -m trainstack ...` = the `trainstack` command (what SLURM jobs and pods call)."""
import sys

from trainstack.cli.main import main

sys.exit(main())
