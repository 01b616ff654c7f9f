# Quick start on a fresh machine:  make demo   |   make test
#
# Both create ./.venv (with $(PYTHON), which must be >= 3.11) and install nnrecover into it in
# editable mode when needed. An existing .venv that already provides nnrecover from this checkout
# and every dependency named in pyproject.toml is used as is (nothing is downloaded).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test

.PHONY: demo test test-fast bench bench-moments install install-test clean experiments docs docs-figures

# Exit status 0 iff nnrecover (this checkout, editable) and the requirements of pyproject.toml
# (plus the optional groups given as arguments) are importable/installed. Versions are not compared.
define CHECK_ENV
import importlib.metadata as m, pathlib, re, sys, tomllib
cfg = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
reqs = list(cfg["dependencies"]) + [r for g in sys.argv[1:] for r in cfg["optional-dependencies"][g]]
import nnrecover
assert pathlib.Path(nnrecover.__file__).resolve().is_relative_to(pathlib.Path("src").resolve())
for r in reqs:
    m.version(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0])
endef
export CHECK_ENV

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "nnrecover needs Python >= 3.11; run e.g. 'make PYTHON=python3.12 $(MAKECMDGOALS)'"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	@$(PY) -c "$$CHECK_ENV" 2>/dev/null || $(PY) -m pip install --quiet -e .
	@touch $@

$(TSTAMP): pyproject.toml | $(PY)
	@$(PY) -c "$$CHECK_ENV" test 2>/dev/null || $(PY) -m pip install --quiet -e ".[test]"
	@touch $@ $(STAMP)

install: $(STAMP)
install-test: $(TSTAMP)

# the main job: a built-in teacher, every learner, a comparison table and nnrecover-demo/demo.png (< 2 min)
demo: $(STAMP)
	$(VENV)/bin/nnrecover demo

test: $(TSTAMP)
	@$(PY) -c "import importlib.metadata as m, platform; print('versions:', 'python', platform.python_version(), *(f'{n} {m.version(n)}' for n in ('numpy','scipy','scikit-learn','tensorly','dask','distributed','pandas','matplotlib','threadpoolctl','pytest','hypothesis')))"
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --timeout=900 --doctest-modules tests src/nnrecover

# the suite without the tests marked slow (> 60 s each); make test runs them all
test-fast: $(TSTAMP)
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --timeout=900 --doctest-modules -m "not slow" tests src/nnrecover

# the documentation site into docs/_build/html (warnings are errors)
docs: $(TSTAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "open docs/_build/html/index.html"

# the quick-run figures of every experiment, committed under docs/figures/ (the docs build runs nothing)
docs-figures: $(STAMP)
	@for name in $$($(PY) -c "import nnrecover.experiments as e; print(' '.join(r.name for r in e.available_experiments()))"); do \
	  echo "== $$name"; $(VENV)/bin/nnrecover experiment $$name --quick --seed 0 --out build/docs-figures/$$name || exit 1; \
	  cp build/docs-figures/$$name/figure.png docs/figures/$$name.png; done

# every learner against numpy passes at growing sizes (benchmarks/README.md, section bench_growth; < 15 min)
bench: $(STAMP)
	$(PY) benchmarks/bench_growth.py

# the moment engine against numpy passes (d up to 1000, an 8 GB memory map)
bench-moments: $(STAMP)
	$(PY) benchmarks/run.py

# every registered experiment, full size, into results/NAME/ (long)
experiments: $(STAMP)
	@for name in $$($(PY) -c "import nnrecover.experiments as e; print(' '.join(r.name for r in e.available_experiments()))"); do \
	  echo "== $$name"; $(VENV)/bin/nnrecover experiment $$name --seed 0 --out results/$$name || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache nnrecover-demo docs/_build docs/generated
