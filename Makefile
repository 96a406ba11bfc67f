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
	  $(PY) -m pip install --quiet -e '.[postgres,spark,dev]' && touch $(STAMP)

venv: $(STAMP)

java:
	@scripts/check-java.sh

demo: $(STAMP) java
	$(VENV)/bin/zarrlake demo

test: $(STAMP) java
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

bench: $(STAMP) java
	$(PY) benchmarks/run.py $(if $(QUICK),--quick,)

soak: $(STAMP) java
	ZARRLAKE_SOAK=1 $(PY) -m pytest -q -p no:cacheprovider -m "soak or not soak" tests/reliability

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
