"""The resolved run as slime's exact argv and env (command), and the one call the app, CLI and tests make:
compose, resolve, validate, render (pipeline). May import: rules/, config/ and below.
"""
