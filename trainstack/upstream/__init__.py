"""slime as its users have it: which slime a checkout is (by content), where it is (slime_root) and at which
commit (slime_version), its argument table (argtable), its plugin contract (plugin_contract, also run as a
script in the trainer's interpreter), and slime's own parser run on CPU against stand-ins for Megatron and
SGLang (docs/slime_versions.md). May import: the top-level basics and trainstack/tools (the table builder).
"""
