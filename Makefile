# One entry point for everything: each target bootstraps .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCAL_STAMP := $(VENV)/.installed-local
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export AWS_ACCOUNT_ID_ENDPOINT_MODE := disabled

.PHONY: venv test test311 checks lint typecheck docs-check docs unit test313 run demo clean browser

# The runtime dependencies at the versions the layer ships (layers/requirements.txt, extras
# left out: pip refuses them in a constraint), so the tests run what Lambda runs, whatever
# newer release the registry holds.
CONSTRAINTS := $(VENV)/layer-constraints.txt

# Everything: the runtime, local mode and the dev tools (tests, linters, CDK, benchmarks).
# It also upgrades a venv that `make run` made with local mode alone.
$(STAMP): pyproject.toml layers/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	sed 's/\[[^]]*\]//' layers/requirements.txt > $(CONSTRAINTS)
	$(BIN)/pip install --quiet -e '.[dev]' -c $(CONSTRAINTS)
	touch $(LOCAL_STAMP) $(STAMP)

# Only what local mode needs (the runtime dependencies and the `local` extra): a first
# `make run` starts in well under a minute instead of installing every dev tool.
$(LOCAL_STAMP): pyproject.toml layers/requirements.txt
	$(PYTHON) -m venv $(VENV)
	sed 's/\[[^]]*\]//' layers/requirements.txt > $(CONSTRAINTS)
	$(BIN)/pip install --quiet -e '.[local]' -c $(CONSTRAINTS)
	touch $(LOCAL_STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check functions chaos bench tests infra docs/hooks examples
	$(BIN)/ruff format --check functions chaos bench tests infra docs/hooks examples

typecheck: $(STAMP)
	$(BIN)/mypy

# The docs site (mkdocs.yml, docs/): its reference pages are generated from the code at build
# time (docs/hooks/generated.py), so a strict build fails on a broken link or a generator
# that no longer matches the code. `make docs` serves it on http://127.0.0.1:8000.
export NO_MKDOCS_2_WARNING := 1
docs-check: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

docs: $(STAMP)
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

unit: $(STAMP)
	$(BIN)/pytest tests/unit -q

# The functions run Python 3.13 (infra.names.PYTHON_VERSION); .venv (3.11 or whatever
# PYTHON is) runs every suite, .venv313 runs the unit and integration suites again on 3.13.
VENV313 := .venv313
STAMP313 := $(VENV313)/.installed
SKIP_PY313 ?=

$(STAMP313): layers/requirements.txt tests/requirements-py313.txt .ci/python313.sh
	sh .ci/python313.sh $(VENV313)
	touch $(STAMP313)

# TEST313_SUITES: what `make test` runs on 3.13 (the chaos suite too: it balances the lanes).
TEST313_SUITES ?= tests/unit tests/integration tests/contract

test313: $(if $(SKIP_PY313),,$(STAMP313))
ifeq ($(SKIP_PY313),)
	PYTHONPATH=$(CURDIR)/functions:$(CURDIR) $(VENV313)/bin/python -m pytest $(TEST313_SUITES) -q
else
	@echo "SKIP_PY313 set: the unit and integration suites did NOT run on Python 3.13"
endif

# The two interpreters' suites run side by side (each pytest uses one core); output is
# printed per suite when it ends. Set-up runs side by side too: the dev venv with lint and
# type-check, and the 3.13 venv. The chaos suite (about 2.5 min) runs in the 3.13 lane, on
# the interpreter the functions run, so both lanes take about as long; with SKIP_PY313 it
# stays in the first.
CHAOS_ELSEWHERE := $(if $(SKIP_PY313),,--ignore=tests/chaos)

test:
	$(MAKE) --no-print-directory -j2 --output-sync=target checks $(if $(SKIP_PY313),,$(STAMP313))
	$(MAKE) --no-print-directory -j2 --output-sync=target test311 test313 \
	  TEST311_ARGS="$(CHAOS_ELSEWHERE)" TEST313_SUITES="tests/unit tests/integration tests/contract $(if $(SKIP_PY313),,tests/chaos)"

checks: lint typecheck docs-check package

# The distribution a user installs (`pip install jobsched[client]`, `[sigv4]`, `[worker]`,
# `[server]`, `[cdk]`, `[local]`): the sdist and the wheel as PyPI would get them, metadata checked.
# Set-up tree and output stay under .venv, so the build leaves nothing in the checkout.
PACKAGE_DIR := $(VENV)/dist
.PHONY: package
package: $(STAMP)
	rm -rf $(PACKAGE_DIR) build
	$(BIN)/python -m build --quiet --outdir $(PACKAGE_DIR) .
	rm -rf build
	$(BIN)/twine check --strict $(PACKAGE_DIR)/*

test311: $(STAMP) browser
	$(BIN)/pytest -q $(TEST311_ARGS)

# The browser suite (tests/browser) drives Debian's chromium through chromium-driver (selenium
# comes with the dev extra). Installed here when missing; without them those tests fail.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  echo "installing chromium and chromium-driver for the browser tests (apt-get)"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver \
	  || { $(SUDO) apt-get update -q && \
	       $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; }; \
	fi

# make run [PORT=8080] [MOTO_PORT=5055] [CONFIG=local.json] [VERBOSE=1]
# A venv that already has the dev tools is kept current as such; otherwise local mode alone.
run: $(if $(wildcard $(STAMP)),$(STAMP),$(LOCAL_STAMP))
	$(BIN)/jobsched local --demo $(if $(PORT),--port $(PORT)) $(if $(MOTO_PORT),--moto-port $(MOTO_PORT)) $(if $(CONFIG),--config $(CONFIG)) $(if $(VERBOSE),--verbose)

demo: run

clean:
	rm -rf $(VENV) $(VENV313) .venv-peers site cdk.out .pytest_cache .mypy_cache .ruff_cache

# --- the end-to-end suite against a deployed stack (docs/operate/deploy.md: Prove the deployment) ---
# JOBSCHED_E2E_ENDPOINT is the stack's ApiUrl; AWS credentials come from the standard chain.
# Without either it prints why and exits 0: the check is opt-in.
.PHONY: e2e-aws

e2e-aws: $(STAMP)
	JOBSCHED_E2E_TARGET=aws $(BIN)/pytest tests/e2e -q -rs --timeout=900

# --- infrastructure (CDK): see docs/operate/ ---
# The CDK CLI is pinned in package.json and installed into ./node_modules.
CDK := node_modules/.bin/cdk
CDK_OUT ?= cdk.out
# cdk.json runs `python -m infra.app`: the venv's python must come first on PATH.
INFRA_ENV := PATH="$(CURDIR)/$(BIN):$$PATH"

.PHONY: infra-tools layer synth nag lint-infra preflight deploy release-tables adopt-tables
# The check-only synths below subscribe no one to the alarms, and say so rather than warn
# (a deploy should: alarmEmail).
CHECK_ONLY := -c alarmsWithoutSubscriber=true

# The deploy preflight (docs/operate/preflight.md): run with the deployer's credentials before the
# first deploy, and before every deploy that changes shardCount or concurrency.
# PREFLIGHT_ARGS: e.g. "-c shardCount=64 --region eu-west-1".
PREFLIGHT_ARGS ?=
preflight: $(STAMP)
	$(INFRA_ENV) $(BIN)/python -m infra.doctor $(PREFLIGHT_ARGS)

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

infra-tools: node_modules/.installed

layer: $(STAMP)
	$(BIN)/python -m infra.layer

synth: $(STAMP) node_modules/.installed
	$(INFRA_ENV) $(CDK) synth --quiet --output $(CDK_OUT)

# make deploy [DEPLOY_CONTEXT="-c alarmEmail=ops@example.com -c shardCount=64"]: the preflight with
# the same context first; a check that blocks the deploy (exit 1) or a config synth refuses
# (exit 2) stops it before CloudFormation is called. Account and region come from the usual
# chain (AWS_PROFILE, AWS_REGION), the same for both steps. Outputs go to cdk-outputs.json.
DEPLOY_CONTEXT ?=
deploy: $(STAMP) node_modules/.installed
	$(INFRA_ENV) $(BIN)/python -m infra.doctor $(DEPLOY_CONTEXT)
	$(INFRA_ENV) $(CDK) deploy $(DEPLOY_CONTEXT) --outputs-file cdk-outputs.json

nag: $(STAMP)
	$(BIN)/python -m infra.app --outdir $(CDK_OUT)/nag --skip-bundling $(CHECK_ONLY)

lint-infra: $(STAMP)
	$(BIN)/python -m infra.app --outdir $(CDK_OUT)/lint --skip-bundling --no-checks $(CHECK_ONLY)
	$(BIN)/cfn-lint --ignore-checks W3005 -- $(CDK_OUT)/lint/*.template.json

# At a release: record the template's tables as released (the migration gate, which
# `make test` runs, compares every later template with them; docs/operate/upgrade.md).
release-tables: $(STAMP)
	$(BIN)/python -m infra.migrations --write

# After `cdk destroy`, before the stack is deployed again: import the retained tables into it
# (cdk import; docs/operate/teardown.md). ADOPT_ARGS: the deploy's -c settings, --table
# LOGICAL_ID=NAME to choose a table, --dry-run.
ADOPT_ARGS ?=
adopt-tables: $(STAMP) node_modules/.installed
	$(INFRA_ENV) $(BIN)/python -m infra.tables adopt $(ADOPT_ARGS)

# --- benchmarks: figures are reported, never asserted (see bench/report.md) ---
.PHONY: bench
BENCH_ARGS ?=

bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

# Local mode beside procrastinate and APScheduler 3 on PostgreSQL (bench/peers): a venv of
# its own, so the peers never enter the dev dependencies. PostgreSQL is started and stopped
# by the benchmark in a temporary directory. PEERS_ARGS=--quick: smoke sizes.
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed
PEERS_ARGS ?=

$(PEERS_STAMP): pyproject.toml layers/requirements.txt bench/peers/requirements.txt
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install --quiet --upgrade pip
	sed 's/\[[^]]*\]//' layers/requirements.txt > $(PEERS_VENV)/layer-constraints.txt
	$(PEERS_VENV)/bin/pip install --quiet -e '.[local]' -r bench/peers/requirements.txt \
	  -c $(PEERS_VENV)/layer-constraints.txt
	touch $(PEERS_STAMP)

.PHONY: bench-peers
bench-peers: $(PEERS_STAMP)
	$(PEERS_VENV)/bin/python -m bench.peers $(PEERS_ARGS)

# --- fault injection: the real pipeline on moto under a simulated clock (chaos) ---
# Prints one line of figures; exits non-zero when any must-be-0 figure is not 0.
.PHONY: chaos
SEED ?= 1
RUNS ?= 1000

chaos: $(STAMP)
	$(BIN)/python -m chaos --seed $(SEED) --runs $(RUNS)

# Every mutant of the pipeline (chaos/mutants.py) must make the checker fail on its figure;
# one the checker survives fails the target. `make test` runs it too, as
# tests/chaos/test_chaos.py::test_every_mutant_of_the_pipeline_is_caught.
.PHONY: chaos-selftest
chaos-selftest: $(STAMP)
	$(BIN)/python -m chaos.selftest
