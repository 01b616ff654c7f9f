# Quick start on a fresh machine:  make demo   |   make test
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test

.PHONY: demo test bench install install-test clean experiments

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(TSTAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@ $(STAMP)

install: $(STAMP)
install-test: $(TSTAMP)

demo: $(STAMP)
	$(VENV)/bin/nnrecover demo

test: $(TSTAMP)
	$(PY) -m pytest -q -n 2 --timeout=900 tests

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
