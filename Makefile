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
# Each setup step says one line ("setup: Delta jars (.venv) ... ok"); its whole output (pip's,
# Ivy's, Maven's) goes to $(SETUP_LOG), and a step that fails shows its last lines there.
SETUP_LOG ?= build/setup.log
STEP      := MEDALLION_SETUP_LOG=$(SETUP_LOG) deploy/setup-step.sh
# (config, bronze, silver, gold and the demo; their slow tests but the demo's are left to the
# newest pair: the suite stays short)
CORE_TESTS   := tests/test_config.py tests/test_bronze.py tests/test_silver.py tests/test_gold.py \
                tests/test_delta.py

.PHONY: setup demo test lint clean

setup: $(STAMP) $(OLDEST_STAMP)
	@# the tests' JVMs share an archive of the classes a driver loads (tests/jvm_classes.py)
	@$(STEP) "JVM class archive (.venv)" $(BIN)/python -m tests.jvm_classes
	@$(STEP) "JVM class archive ($(OLDEST_VENV))" $(OLDEST_BIN)/python -m tests.jvm_classes

$(STAMP): setup.cfg pyproject.toml deploy/yarn/pom.xml deploy/kafka/pom.xml
	@$(STEP) "virtualenv $(VENV)" $(PYTHON) -m venv $(VENV)
	@$(STEP) "pip (.venv)" $(BIN)/python -m pip install --quiet --upgrade pip
	@$(STEP) "Python packages (.venv)" $(BIN)/python -m pip install --quiet -e '.[local,dev]'
	@# resolve and cache Delta's jars from Maven Central
	@$(STEP) "Delta jars (.venv)" $(BIN)/python -m framework.session
	@# and the YARN + HDFS test cluster's, and the Kafka test broker's (Maven)
	@$(STEP) "YARN + HDFS test cluster jars" deploy/yarn/minicluster.sh resolve
	@$(STEP) "Kafka test broker jars" deploy/kafka/broker.sh resolve
	@# Debian's Chromium, for the browser test of 'medallion report' (as root, or already there)
	@$(STEP) "Chromium" sh -c 'command -v chromium >/dev/null 2>&1 \
	  || apt-get install -y -qq chromium >/dev/null \
	  || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
	  || echo "warning: chromium is not installed (apt-get install chromium): the browser test of medallion report will fail"'
	@touch $(STAMP)

# The package without the `local` extra's pins: the oldest pair instead, and the dev tools.
$(OLDEST_STAMP): setup.cfg pyproject.toml Makefile
	@$(STEP) "virtualenv $(OLDEST_VENV)" $(PYTHON) -m venv $(OLDEST_VENV)
	@$(STEP) "pip ($(OLDEST_VENV))" $(OLDEST_BIN)/python -m pip install --quiet --upgrade pip
	@$(STEP) "Python packages ($(OLDEST_VENV))" $(OLDEST_BIN)/python -m pip install --quiet -e '.[dev]' $(OLDEST_PAIR)
	@# that pair's Delta jars, from Maven Central
	@$(STEP) "Delta jars ($(OLDEST_VENV))" $(OLDEST_BIN)/python -m framework.session
	@touch $(OLDEST_STAMP)

demo: $(STAMP)   # the oldest pair's virtualenv is for the tests only
	@$(BIN)/medallion demo

test: setup
	$(BIN)/python -m pytest -q --durations=10 -n 2 --dist loadgroup --junitxml=build/tests.xml
	$(OLDEST_BIN)/python -m pytest -q --durations=5 -n 2 --dist loadgroup --junitxml=build/tests-oldest.xml -m "not slow or demo" \
	  $(CORE_TESTS) tests/test_readme.py

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(OLDEST_VENV) lakehouse build dist *.egg-info
