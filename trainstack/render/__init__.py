"""The resolved run as slime's exact argv and env (command), the one call the app, CLI and tests make: compose,
resolve, validate, render (pipeline), and every experiment's rendered command kept as golden files (golden,
`python -m trainstack.render.golden`). May import: rules/, metrics/, config/ and below.
"""
