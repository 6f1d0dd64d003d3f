"""slime as its users have it: which slime a checkout is (by content), its argument table, and slime's
own parser run on CPU against stand-ins for Megatron and SGLang (docs/slime_versions.md)."""
