"""A run brings its own inputs: model weights, datasets and the torch_dist conversion (docs/inputs.md).

Model presets name their Hugging Face repo and revision (`model.meta.hf_repo`, `model.meta.revision`),
env presets their dataset repos (`env.meta.data`). `trainstack prepare` and every launch (the
lifecycle's `lifecycle.prepare_inputs` hook, on the host that executes the trainer) download them,
transform datasets into slime's keys, convert the weights with slime's own converter, and cache all
of it content-addressed under `paths.models_root` / `paths.data_root`.
"""
