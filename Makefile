# Two entry points: `make demo` (set up, then run the main job end to end locally) and
# `make test` (set up, then run the tests). Setup is idempotent and cached in .venv, and in
# .venv-spark40 for the oldest supported pair.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# The oldest Spark/Delta pair supported: Databricks runtime 17.3 LTS's (databricks.yml),
# Spark 4.0.0 with Delta 4.0. The core tests run on it too (the newest pair is the `local`
# extra's, in .venv).
OLDEST_PAIR  := pyspark==4.0.0 delta-spark==4.0.0
OLDEST_VENV  := .venv-spark40
OLDEST_BIN   := $(OLDEST_VENV)/bin
OLDEST_STAMP := $(OLDEST_VENV)/.installed
# (config, bronze, silver, gold and the demo; their slow tests but the demo's are left to the
# newest pair: the suite stays short)
CORE_TESTS   := tests/test_config.py tests/test_bronze.py tests/test_silver.py tests/test_gold.py \
                tests/test_delta.py

.PHONY: setup demo test lint clean

setup: $(STAMP) $(OLDEST_STAMP)
	@# the tests' JVMs share an archive of the classes a driver loads (tests/jvm_classes.py)
	$(BIN)/python -m tests.jvm_classes
	$(OLDEST_BIN)/python -m tests.jvm_classes

$(STAMP): setup.cfg pyproject.toml deploy/yarn/pom.xml deploy/kafka/pom.xml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[local,dev]'
	$(BIN)/python -m framework.session   # resolve and cache Delta's jars from Maven Central
	deploy/yarn/minicluster.sh resolve   # and the YARN + HDFS test cluster's (Maven)
	deploy/kafka/broker.sh resolve       # and the Kafka test broker's (Maven)
	@# Debian's Chromium, for the browser test of 'medallion report' (as root, or already there)
	@command -v chromium >/dev/null 2>&1 || apt-get install -y -qq chromium >/dev/null \
	  || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
	  || echo "warning: chromium is not installed (apt-get install chromium): the report's browser test will fail"
	touch $(STAMP)

# The package without the `local` extra's pins: the oldest pair instead, and the dev tools.
$(OLDEST_STAMP): setup.cfg pyproject.toml Makefile
	$(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_BIN)/python -m pip install --quiet --upgrade pip
	$(OLDEST_BIN)/python -m pip install --quiet -e '.[dev]' $(OLDEST_PAIR)
	$(OLDEST_BIN)/python -m framework.session   # that pair's Delta jars, from Maven Central
	touch $(OLDEST_STAMP)

demo: $(STAMP)   # the oldest pair's virtualenv is for the tests only
	$(BIN)/medallion demo

test: setup
	$(BIN)/python -m pytest -q --durations=10 -n 2 --dist loadgroup --junitxml=build/tests.xml
	$(OLDEST_BIN)/python -m pytest -q --durations=5 -n 2 --dist loadgroup --junitxml=build/tests-oldest.xml -m "not slow or demo" \
	  $(CORE_TESTS) tests/test_readme.py

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(OLDEST_VENV) lakehouse build dist *.egg-info
