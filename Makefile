# Two entry points: `make demo` (set up, then run the main job end to end locally) and
# `make test` (set up, then run the tests). Setup is idempotent and cached in .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lint clean

setup: $(STAMP)

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

demo: setup
	$(BIN)/medallion demo

test: setup
	$(BIN)/python -m pytest -q --durations=10 -n 2 --dist loadgroup

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) lakehouse build dist *.egg-info
