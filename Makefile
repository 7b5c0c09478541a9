# One entry point for everything: each target bootstraps .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export AWS_ACCOUNT_ID_ENDPOINT_MODE := disabled

.PHONY: venv test lint typecheck unit run demo clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check functions tests infra
	$(BIN)/ruff format --check functions tests infra

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest tests/unit -q

test: lint typecheck
	$(BIN)/pytest -q

run: $(STAMP)
	$(BIN)/jobsched local --demo

demo: run

clean:
	rm -rf $(VENV) cdk.out .pytest_cache .mypy_cache .ruff_cache
