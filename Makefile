# Two commands for a new user: `make demo` and `make test`. Each sets up .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test check test-reliability demo bench compiled audit lock clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# Test processes (pytest-xdist), each with its own broker. The end-to-end and reliability
# tests mostly wait on sockets and timers, so more processes than the 2 cores measured
# (docs/development.md). --dist loadgroup: a module whose tests share workers is one group.
TEST_PROCESSES ?= 4
XDIST = -n $(TEST_PROCESSES) --dist loadgroup

test: $(STAMP)
	$(PY) -m pytest -q $(XDIST)

# The fast part of the suite, for development: the engine, the offline tools and the
# stream layer's unit tests, without a broker, a worker process or the tests marked slow (a minute).
check: $(STAMP)
	RATINGS_TESTS_NO_BROKER=1 $(PY) -m pytest -q -n 2 -m "not broker and not slow" tests/engine tests/offline tests/stream tests/test_*.py

# Only the tests that kill, rebalance and stall workers mid-stream (also part of `make test`).
test-reliability: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m reliability

demo: $(STAMP)
	$(VENV)/bin/ratings demo

bench: $(STAMP)
	$(PY) -m bench

# The per-match path compiled by mypyc into build/compiled (needs a C compiler); run
# anything with PYTHONPATH=build/compiled to use it. Without it, plain Python.
compiled: $(STAMP)
	$(PY) deploy/compile.py build/compiled

# Known vulnerabilities in the pinned dependencies (needs the internet: not part of make test).
audit: $(STAMP)
	$(PY) -m pip install --quiet pip-audit
	$(VENV)/bin/pip-audit -r constraints.txt

# Re-pin constraints.txt from a fresh resolve (run when dependencies change).
lock:
	rm -rf .lockvenv && $(PYTHON) -m venv .lockvenv
	.lockvenv/bin/pip install --quiet -e '.[dev]'
	.lockvenv/bin/pip freeze --exclude-editable | grep -v '^-e' > constraints.txt
	rm -rf .lockvenv

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
