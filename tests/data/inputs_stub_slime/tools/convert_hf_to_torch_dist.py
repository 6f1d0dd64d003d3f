"""Stand-in for slime's tools/convert_hf_to_torch_dist.py (no GPU): same argv, rank 0 writes the layout."""
import json
import os
import sys

argv = sys.argv[1:]
hf, save = argv[argv.index("--hf-checkpoint") + 1], argv[argv.index("--save") + 1]
assert os.path.isfile(os.path.join(hf, "config.json")), f"no HF checkpoint at {hf}"
if os.environ.get("RANK", "0") == "0":
    os.makedirs(os.path.join(save, "release"), exist_ok=True)
    with open(os.path.join(save, "release", "argv.json"), "w") as f:
        json.dump({"argv": argv, "world_size": os.environ.get("WORLD_SIZE")}, f)
    with open(os.path.join(save, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("release")
