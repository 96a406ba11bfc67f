# zarrlake: `make demo` and `make test` work on a fresh machine; each builds .venv first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: venv demo test bench soak lint clean java

$(STAMP): pyproject.toml
	@interp=$$(PYTHON="$(PYTHON)" scripts/find-python.sh) || exit 1; \
	  echo "using $$interp"; \
	  [ -x $(PY) ] || "$$interp" -m venv $(VENV); \
	  $(PY) -m pip install --quiet --upgrade pip && \
	  $(PY) -m pip install --quiet -e '.[postgres,spark,ui,dev,virtual]' && touch $(STAMP)

venv: $(STAMP)

java:
	@scripts/check-java.sh

demo: $(STAMP) java
	$(VENV)/bin/zarrlake demo

test: $(STAMP) java
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# Benchmarks run in their own venv: the peers (Icechunk, plain zarr) are installed only there.
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.installed
BENCH_PEERS := icechunk==2.3.0 zarr numpy pyinstrument 'dask[array]'
# S3PG (issue 15): moto's S3 server, and pytest for tests/fixtures' server launchers
BENCH_SERVERS := 'moto[server]>=5.0' 'pytest>=8'

$(BENCH_STAMP): pyproject.toml
	@interp=$$(PYTHON="$(PYTHON)" scripts/find-python.sh) || exit 1; \
	  echo "using $$interp for $(BENCH_VENV)"; \
	  [ -x $(BENCH_PY) ] || "$$interp" -m venv $(BENCH_VENV); \
	  $(BENCH_PY) -m pip install --quiet --upgrade pip && \
	  $(BENCH_PY) -m pip install --quiet -e '.[spark,postgres,virtual]' $(BENCH_PEERS) $(BENCH_SERVERS) && \
	  touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) java
	PYSPARK_PYTHON=$(abspath $(BENCH_PY)) PYSPARK_DRIVER_PYTHON=$(abspath $(BENCH_PY)) \
	  $(BENCH_PY) benchmarks/run.py $(if $(QUICK),--quick,) $(BENCH_ARGS)

soak: $(STAMP) java
	ZARRLAKE_SOAK=1 $(PY) -m pytest -q -p no:cacheprovider tests/reliability tests/lifecycle/test_gc_soak.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
