"""Launchers: put a stored run spec where its cluster says (interface: base.py; names: registry.py)."""
