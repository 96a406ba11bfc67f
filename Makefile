# zarrlake: `make demo` and `make test` work on a fresh machine; each builds .venv first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Bytecode of the editable install's sources: pip compiles what it installs, but not an
# editable project's src/, and PYTHONDONTWRITEBYTECODE (set on these machines) stops Python
# writing it on import, so every new process would compile ~90 modules again (~0.4 s).
# compileall rewrites only the files changed since (it compares each source's mtime).
COMPILED := $(VENV)/.compiled
SOURCES := $(shell find src -name '*.py' 2>/dev/null)
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: venv demo test test-fast bench soak lint docs clean java

$(STAMP): pyproject.toml
	@interp=$$(PYTHON="$(PYTHON)" scripts/find-python.sh) || exit 1; \
	  echo "using $$interp"; \
	  [ -x $(PY) ] || "$$interp" -m venv $(VENV); \
	  $(PY) -m pip install --quiet --upgrade pip && \
	  $(PY) -m pip install --quiet -e '.[postgres,spark,ui,dev,docs,virtual]' && touch $(STAMP)

$(COMPILED): $(STAMP) $(SOURCES)
	@$(PY) -m compileall -q src >/dev/null && touch $@

venv: $(STAMP) $(COMPILED)

java:
	@scripts/check-java.sh

demo: $(STAMP) $(COMPILED) java
	$(VENV)/bin/zarrlake demo

# The suite on TEST_WORKERS processes (pytest-xdist); the tests that share the one Spark
# session run on one of them (tests/fixtures/spark.py). TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2
test: $(STAMP) $(COMPILED) java
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup -m "not soak" $(PYTEST_ARGS)

# Everything but the tests marked slow (measured with --durations: 5 s or more each).
test-fast: $(STAMP) $(COMPILED) java
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow and not soak" $(PYTEST_ARGS)

# Benchmarks run in their own venv: the peers (Icechunk, plain zarr) are installed only there.
BENCH_VENV := .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.installed
# py-spy for benchmarks/hotspots.py; pytest-benchmark for the micro-benchmarks
BENCH_PEERS := icechunk==2.3.0 zarr numpy py-spy 'dask[array]' 'pytest-benchmark>=5'
# S3PG: moto's S3 server (zarrlake.testing.servers starts it and PostgreSQL)
BENCH_SERVERS := 'moto[server]>=5.0'

$(BENCH_STAMP): pyproject.toml
	@interp=$$(PYTHON="$(PYTHON)" scripts/find-python.sh) || exit 1; \
	  echo "using $$interp for $(BENCH_VENV)"; \
	  [ -x $(BENCH_PY) ] || "$$interp" -m venv $(BENCH_VENV); \
	  $(BENCH_PY) -m pip install --quiet --upgrade pip && \
	  $(BENCH_PY) -m pip install --quiet -e '.[spark,postgres,virtual]' $(BENCH_PEERS) $(BENCH_SERVERS) && \
	  touch $(BENCH_STAMP)

# The cross-engine suite (benchmarks/run.py), then the single-engine micro-benchmarks.
$(BENCH_VENV)/.compiled: $(BENCH_STAMP) $(SOURCES)
	@$(BENCH_PY) -m compileall -q src >/dev/null && touch $@

bench: $(BENCH_STAMP) $(BENCH_VENV)/.compiled java
	PYSPARK_PYTHON=$(abspath $(BENCH_PY)) PYSPARK_DRIVER_PYTHON=$(abspath $(BENCH_PY)) \
	  $(BENCH_PY) -m benchmarks.run $(if $(QUICK),--quick,) $(BENCH_ARGS)
	$(BENCH_PY) -m pytest -p no:cacheprovider -q -W ignore::pytest.PytestConfigWarning \
	  benchmarks/micro $(if $(QUICK),--bench-quick,) --benchmark-json bench-results/micro.json

# The reliability suites at soak size (10,000 transactions and 120 SIGKILLs per metastore in
# the kill soak), every planted bug (the simulator's and the kill soak's), then the
# deterministic simulator for a million steps.
soak: $(STAMP) java
	ZARRLAKE_SOAK=1 $(PY) -m pytest -q -p no:cacheprovider tests/reliability tests/lifecycle/test_gc_soak.py tests/sim/test_planted.py
	$(PY) -m tests.simulator soak --steps 1000000 --jobs 2

# The documentation site (mkdocs.yml, docs/) into build/site; warnings are errors.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks docs/hooks.py
	$(VENV)/bin/ruff format --check src tests benchmarks docs/hooks.py
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
