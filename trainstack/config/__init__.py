"""From Hydra's composed config to one typed, absolute run: the typed settings (schema, meta_schema,
setting_domains, backends), resolve, override checks, Hydra's entry/dirs/errors and help page, sweep-point
composition (sweep_cache) and a sweep's objective, input identity, user defaults, W&B naming and run ids.
May import: the top-level basics (the launcher registry included), terminal/, storage/, fencing/, upstream/.
"""
