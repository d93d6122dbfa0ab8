# Two commands do all the set-up on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed

.PHONY: test test-fast demo bench setup clean docs docs-serve

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: the CPU wheel here, instead of the newest CUDA build from PyPI
	$(PY) -m pip install --quiet torch==$(TORCH_VERSION)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The suite on TEST_WORKERS processes (pytest-xdist), a test module whole on one of them (its
# module fixtures start once, its tests run in order), the long modules handed out first
# (tests/conftest.py's queue_rank; xdist's own reorder, by test count, is off); each worker has
# its own session fixtures, the Ray cluster among them. 2 for the 2-core CI box; 0 is one
# process (CONTRIBUTING.md).
TEST_WORKERS ?= 2

test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

# The developer's loop: every test that starts neither Ray nor processes of its own (the tiers:
# tests/conftest.py), under a minute on 2 cores. CI runs `make test`, all of them.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not ray and not subprocess and not slow and not gpu"

# The documentation site (docs/, mkdocs.yml) in strict mode: a broken link, a missing reference or
# any warning fails the build. The result is site/index.html.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --strict

demo: $(STAMP)
	$(VENV)/bin/hybridload demo

bench: $(STAMP)
	$(PY) benchmarks/bench_kernels.py
	$(PY) benchmarks/bench_loader_overhead.py

clean:
	rm -rf $(VENV) build site *.egg-info
