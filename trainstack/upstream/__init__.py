"""slime as its users have it: which slime a checkout is (by content), where it is (slime_root) and at which
commit (slime_version), its argument table (argtable), its plugin contract (plugin_contract, also run as a
script in the trainer's interpreter), and slime's own parser run on CPU against stand-ins for Megatron and
SGLang (docs/slime_versions.md); and what regenerates slime-derived data from a checkout (sync_slime, with
model_meta: the presets' model sizes). May import: the top-level basics only.
"""
