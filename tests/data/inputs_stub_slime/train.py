"""Stand-in for slime's train.py (no GPU): record the argv and which input paths exist, then stop."""
import json
import os
import sys

argv = sys.argv[1:]


def value(flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


paths = {f: value(f) for f in ("--hf-checkpoint", "--ref-load", "--prompt-data")}
found = {f: bool(p) and os.path.exists(p) for f, p in paths.items()}
run_dir = os.path.dirname(os.environ["TRAINSTACK_METRICS_FILE"])
with open(os.path.join(run_dir, "stub_trainer_started.json"), "w") as f:
    json.dump({"argv": argv, "paths": paths, "exists": found, "cwd": os.getcwd(),
               "ref_load_tracker": open(os.path.join(paths["--ref-load"], "latest_checkpointed_iteration.txt")).read()
               if found["--ref-load"] else None}, f)
print("stub slime train.py: started with every input present" if all(found.values()) else f"missing: {found}")
sys.exit(1)  # the trainer itself needs GPUs: stop at its start (not 3: exec's "run busy")
