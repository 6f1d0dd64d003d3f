"""trainstack's slime plugins: modules slime's workers import by dotted path (a name that is ours,
so the wheel installs no generic top-level ``plugins`` package). ``http_env``: the custom generate
function for HTTP environments (docs/http_env.md)."""
