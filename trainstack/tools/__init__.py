"""Maintenance tools (regenerating slime-derived data); not imported at run time."""
