"""`trainstack import run-X.sh`: a slime launch script read (never run) into an experiment file that
renders the script's argv, with the closest presets and only the deltas (docs/import.md).

bash.py parses the bash subset launch scripts use, shell.py evaluates it without running anything,
flags.py reads the launch's argv as slime's parser would, plan.py picks presets and writes the
deltas, proof.py renders the written experiment and compares it with the script's argv.
"""
