"""Checkpoints to the Hugging Face Hub in the background, and resume from the Hub (docs/hub.md).

layout.py names every path on the Hub; the sync trusts two checks kept elsewhere (a complete
checkpoint: trainstack/storage/checkpoints.py; still holding the run: trainstack/fencing/lease.py and fence.py);
client.py is the only module that imports huggingface_hub; push.py pushes one checkpoint; sync.py is the background worker beside the trainer;
restore.py finds and downloads the Hub's newest checkpoint; hooks.py is what the run lifecycle calls;
cli.py is `trainstack hub ls|pull`; feature.py registers them all at trainstack's hook points
(trainstack/hooks.py), so the core never imports this package.
"""
