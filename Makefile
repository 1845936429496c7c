# Two commands for a new user: `make demo` and `make test`. Each sets up .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test test-reliability demo bench lock clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

# Only the tests that kill, rebalance and stall workers mid-stream (also part of `make test`).
test-reliability: $(STAMP)
	$(PY) -m pytest -q -m reliability

demo: $(STAMP)
	$(VENV)/bin/ratings demo

bench: $(STAMP)
	$(PY) -m bench

# Re-pin constraints.txt from a fresh resolve (run when dependencies change).
lock:
	rm -rf .lockvenv && $(PYTHON) -m venv .lockvenv
	.lockvenv/bin/pip install --quiet -e '.[dev]'
	.lockvenv/bin/pip freeze --exclude-editable | grep -v '^-e' > constraints.txt
	rm -rf .lockvenv

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
