"""Checkpoints to the Hugging Face Hub in the background, and resume from the Hub (docs/hub.md).

layout.py names every path on the Hub; fence.py holds the two checks the sync trusts (is a checkpoint
complete, does this process still hold the run); client.py is the only module that imports
huggingface_hub; push.py pushes one checkpoint; sync.py is the background worker beside the trainer;
restore.py finds and downloads the Hub's newest checkpoint; hooks.py is what the run lifecycle calls;
cli.py is `trainstack hub ls|pull`; feature.py registers them all at trainstack's hook points
(trainstack/hooks.py), so the core never imports this package.
"""
