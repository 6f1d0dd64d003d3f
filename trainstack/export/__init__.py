"""`trainstack export RUN [--iter N] [--to DIR | --hub REPO]`: a checkpoint as a Hugging Face model directory
(docs/eval.md). On the CPU backend the tiny model's own writer (trainstack/tiny/hf_model.py); on slime, slime's
converter `tools/convert_torch_dist_to_hf.py`, its argv checked against the converter's own argparse. Every
export records its source run, iteration and slime commit (`trainstack_export.json`)."""
