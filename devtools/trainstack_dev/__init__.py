"""Developer and test support for trainstack, kept out of the wheel: local fakes of the services
trainstack talks to (``fakes``: Hugging Face Hub, Lium) and the slime parse oracle's judge
(``oracle``). Importable from a checkout with ``devtools/`` on ``PYTHONPATH`` (tests/conftest.py,
scripts/hub-local.sh, scripts/lium-local.sh do that)."""
