# Two commands on a fresh machine: `make run` (the CPU smoke run) and `make test`.
# Each creates the virtualenv and installs what it needs first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test test-fast lint pyc bench bench-slurm bench-lium golden install slime-source

# SLIME_BUNDLE: a git bundle of slime at the pinned commit, to fill slime/ on a machine that cannot reach
# GitHub (`make install SLIME_BUNDLE=/path/slime-624b824a.bundle`; docs/install.md)
SLIME_BUNDLE ?=

$(STAMP): pyproject.toml
	@echo "make install: creating $(VENV) with trainstack (editable) and every extra: [all,test,lint] (a few minutes the first time)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# pip byte-compiles ~20k files one at a time (~50 s on 2 cores); compileall does it on every core
	$(PY) -m pip install --no-compile -e '.[dev]'
	@echo "make install: byte-compiling $(VENV) on every core"
	$(PY) -m compileall -q -j 0 $(VENV)/lib > /dev/null || true
	rm -f $(VENV)/.installed-*
	touch $(STAMP)
	@echo "make install: done; \`source $(VENV)/bin/activate\` puts python and trainstack on PATH"

# slime's source (the slime/ submodule) when a clone was made without --recursive
slime-source:
	@scripts/fill-slime.sh "$(SLIME_BUNDLE)"

install: slime-source $(STAMP)

# ARGS: extra overrides, e.g. `make run ARGS="env.num_rollout=50"`
run: slime-source $(STAMP) pyc
	$(PY) run.py $(ARGS)

# Three workers (pytest-xdist) on CI's 2 cores: much of the suite waits (lease TTLs, the SLURM scheduler,
# servers and pods starting), and a third worker runs while the others wait. Tests that share the SLURM
# cluster, Ray, the fake Lium or the docs walk's directory run on one worker in order (--dist loadgroup,
# groups in tests/conftest.py).
XDIST ?= -n 3 --dist loadgroup

# ruff, then every test. mypy (a minute of one core) runs among the tests: the README's `make lint` is one of
# the documented commands tests/test_docs_examples.py runs, so it shares the workers instead of going first
test: $(STAMP) pyc
	$(VENV)/bin/ruff check
	$(PY) -m pytest -q --durations=60 $(XDIST)

# The project's own modules compiled once: where PYTHONDONTWRITEBYTECODE is set (Debian/Docker images
# often set it) every process would otherwise compile each module it imports, and the tests start thousands
pyc: $(STAMP)
	@$(PY) -m compileall -q -j 0 run.py trainstack plugins devtools scripts slime/slime > /dev/null || true

# ruff (lint) and mypy over trainstack/ and plugins/ (settings in pyproject.toml); `make test` runs it as a test.
lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy

test-fast: $(STAMP) pyc
	$(PY) -m pytest -q -m "not slow" $(XDIST)

golden: $(STAMP)
	$(PY) -m trainstack.render.golden --update

bench: $(STAMP)
	$(PY) benchmarks/dry_run_latency.py
	$(PY) benchmarks/checkpoint_lookup.py
	$(PY) benchmarks/tiny_learning.py
	$(PY) benchmarks/compare_read.py
	$(PY) benchmarks/compare_status_runs.py
	$(PY) benchmarks/agentic_learning.py
	$(PY) benchmarks/hub_sync.py

bench-slurm: $(STAMP)
	$(PY) benchmarks/slurm_submit.py

# The Lium commander (latency with 200 runs) and pod-loss recovery on the fake Lium (root: pods are namespaces).
bench-lium: $(STAMP)
	$(PY) benchmarks/commander_latency.py
	$(PY) benchmarks/lium_recovery.py

# The slime parse oracle (docs/slime_oracle.md): the corpus, then every dest of slime's table (per_dest.py); needs slime's real parser, built once with
# shared/tools/slime-parse/setup.sh into $(SLIME_PARSE_HOME). CI only checks the recorded file.
SLIME_PARSE_HOME ?= $(CURDIR)/.cache/slime-parse
SLIME_PARSE_TOOL ?= $(CURDIR)/../shared/tools/slime-parse/slime_real_parse.py
.PHONY: oracle
oracle: $(STAMP)
	mkdir -p .cache/oracle
	$(PY) scripts/oracle/corpus.py render .cache/oracle/rendered.json
	SLIME_PARSE_HOME=$(SLIME_PARSE_HOME) SLIME_PARSE_TOOL=$(SLIME_PARSE_TOOL) \
	  $(SLIME_PARSE_HOME)/venv/bin/python scripts/oracle/real_parse.py .cache/oracle/rendered.json .cache/oracle/verdicts.json --verify 3
	$(PY) scripts/oracle/corpus.py record .cache/oracle/rendered.json .cache/oracle/verdicts.json
	SLIME_PARSE_HOME=$(SLIME_PARSE_HOME) SLIME_PARSE_TOOL=$(SLIME_PARSE_TOOL) \
	  $(PY) scripts/oracle/per_dest.py record
