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

.PHONY: demo test test-fast test-kernels bench bench-moments install install-test clean experiments docs docs-figures

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

SUITE := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --timeout=900 --doctest-modules

test: $(TSTAMP)
	@$(PY) -c "import importlib.metadata as m, platform; print('versions:', 'python', platform.python_version(), *(f'{n} {m.version(n)}' for n in ('numpy','scipy','scikit-learn','tensorly','dask','distributed','pandas','matplotlib','threadpoolctl','pytest','hypothesis')))"
	$(SUITE) tests src/nnrecover

# the suite once per OpenBLAS kernel family this CPU executes (results must not depend on a kernel's
# last bits): Prescott (SSE3), Sandybridge (AVX), Haswell (AVX2) and SkylakeX (AVX-512F), read from
# /proc/cpuinfo; on a CPU without these flags (not x86) the suite runs once with its own kernels.
# SKIP_KERNEL=<name> leaves out the one `make test` already ran under (.ci/run passes it)
test-kernels: $(TSTAMP)
	@flags=" $$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "; types=""; \
	for pair in pni:Prescott avx:Sandybridge avx2:Haswell avx512f:SkylakeX; do \
	  case "$$flags" in *" $${pair%%:*} "*) types="$$types $${pair##*:}";; esac; done; \
	[ -n "$$types" ] || types="default"; echo "OpenBLAS core types to run:$$types"; \
	ran=""; for t in $$types; do \
	  if [ "$$t" = "$(SKIP_KERNEL)" ]; then echo "== $$t: skipped (SKIP_KERNEL: the suite already ran under it)"; continue; fi; \
	  if [ "$$t" = default ]; then unset OPENBLAS_CORETYPE; else export OPENBLAS_CORETYPE=$$t; fi; \
	  echo "== OPENBLAS_CORETYPE=$${OPENBLAS_CORETYPE:-<unset>}: OpenBLAS runs $$($(PY) -c "import numpy, threadpoolctl; print(sorted({i.get('architecture') for i in threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas'}))")"; \
	  $(SUITE) tests src/nnrecover || { echo "FAILED under OPENBLAS_CORETYPE=$$t"; exit 1; }; \
	  ran="$$ran $$t"; \
	done; echo "test-kernels: the suite passed under$$ran"

# the suite without the tests marked slow (> 60 s each); make test runs them all
test-fast: $(TSTAMP)
	$(SUITE) -m "not slow" tests src/nnrecover

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
