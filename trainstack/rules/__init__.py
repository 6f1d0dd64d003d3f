"""Every validation rule and its registry: the cross-field rules (validate), the rulebook, slime/Megatron/SGLang
ports (upstream_rules, megatron_rules, runtime_rules), range and switch rules, dest domains, context length,
plugin paths. May import: config/ and what config may.
"""
