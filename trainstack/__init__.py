"""trainstack: Hydra-composed, validated, resumable slime runs."""
__version__ = "0.1.0"
