# Precis: `make dev` runs the local stack, `make test` runs everything CI runs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Lambda runs python3.12; so do the virtualenvs (found on PATH, else under pyenv).
PYTHON312 ?= $(shell for p in $$(ls -d $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12 2>/dev/null) python3.12; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { command -v $$p; break; }; done)
VENV := .venv
SAM_VENV := .venv-sam
SECURITY_VENV := .venv-security
PY := $(VENV)/bin/python
SAM := $(SAM_VENV)/bin/sam
ENCODINGS := layers/common/precis/encodings/.verified
export SAM_CLI_TELEMETRY := 0
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help dev test test-fast checks lint check-py build security bench invoke encodings clean

help:
	@echo "make dev      run Precis locally on 127.0.0.1:\$${PRECIS_PORT:-8000} (moto, no Docker)"
	@echo "make test     lint the template, sam build, checkov, ruff and mypy, run the whole test suite"
	@echo "make check-py ruff check and ruff format --check over the Python, mypy over the shared layer and the handlers (pyproject.toml)"
	@echo "make security checkov on the template (offline; skips justified in .checkov.yaml)"
	@echo "make bench    run the benchmarks (tables, plots under bench/out/); make bench local (or BENCH=\"local cost\") for some"
	@echo "make invoke FN=ContextFunction EVENT=events/context_health.json   one handler, one event"

# The `precis` command (cli/, editable: it validates settings with the layer as it stands) comes with the virtualenv.
$(VENV)/.installed: requirements-dev.txt layers/common/requirements.txt pyproject.toml
	@test -n "$(PYTHON312)" || { echo "python3.12 not found (set PYTHON312=/path/to/python3.12)"; exit 1; }
	test -d $(VENV) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

$(SAM_VENV)/.installed: requirements-sam.txt
	test -d $(SAM_VENV) || $(PYTHON312) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet -r requirements-sam.txt
	touch $@

# checkov and schemathesis pin their own hypothesis, jsonschema, boto3...: they get a virtualenv of their own.
$(SECURITY_VENV)/.installed: requirements-security.txt
	@test -n "$(PYTHON312)" || { echo "python3.12 not found (set PYTHON312=/path/to/python3.12)"; exit 1; }
	test -d $(SECURITY_VENV) || $(PYTHON312) -m venv $(SECURITY_VENV)
	$(SECURITY_VENV)/bin/pip install --quiet -r requirements-security.txt
	touch $@

# Honcho's TypeScript SDK for tests/sdk/test_sdk_typescript.py: the versions package-lock.json pins, their integrity
# hashes checked by npm ci. Node.js 20 or later (its test runner, fetch, FormData, File).
TS_SDK := tests/sdk/ts
$(TS_SDK)/node_modules/.installed: $(TS_SDK)/package.json $(TS_SDK)/package-lock.json
	@command -v node >/dev/null && node -e 'process.exit(parseInt(process.versions.node) < 20 ? 1 : 0)' || \
		{ echo "Node.js 20 or later not found: the TypeScript SDK's tests need it (apt-get install nodejs npm)"; exit 1; }
	cd $(TS_SDK) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(ENCODINGS): scripts/fetch_encodings.py | $(VENV)/.installed
	$(PY) scripts/fetch_encodings.py
	touch $@

encodings: $(ENCODINGS)

# .venv-sam too: the local stack reads each function's role from SAM's own transform (local/iam.py).
dev: $(VENV)/.installed $(SAM_VENV)/.installed $(ENCODINGS)
	$(PY) -m local

lint: $(SAM_VENV)/.installed
	$(SAM) validate --lint

# ruff (well under a second) and mypy over layers/common/precis and functions/ (pyproject.toml: strict for the pure modules; about a
# minute cold, a few seconds from its cache in .mypy_cache).
PY_DIRS := layers functions local bench tests cli deploy scripts
check-py: $(VENV)/.installed
	$(PY) -m ruff check $(PY_DIRS)
	$(PY) -m ruff format --check $(PY_DIRS)
	$(PY) -m mypy

# sam build needs python3.12 on PATH for the python3.12 runtime.
build: $(SAM_VENV)/.installed $(ENCODINGS)
	PATH="$(dir $(PYTHON312)):$$PATH" $(SAM) build --cached

# checkov on template.yaml as written and as CloudFormation deploys it (SAM's transform, run offline by the policy
# test module, so the IAM roles SAM generates are scanned too). Offline: no API key, --skip-download.
security: $(VENV)/.installed $(SAM_VENV)/.installed $(SECURITY_VENV)/.installed
	@mkdir -p .aws-sam/security
	$(PY) -m tests.deploy.test_template_policy --sam-transform > .aws-sam/security/template.json
	env -u BC_API_KEY BC_SKIP_MAPPING=TRUE $(SECURITY_VENV)/bin/checkov --config-file .checkov.yaml \
		-f template.yaml -f .aws-sam/security/template.json

# The MCP Inspector CLI (npm, pinned by its lock) that tests/mcp drives against the local stack.
INSPECTOR := tests/mcp/inspector/node_modules/.installed
$(INSPECTOR): tests/mcp/inspector/package.json tests/mcp/inspector/package-lock.json
	npm ci --prefix tests/mcp/inspector --no-audit --no-fund --loglevel=error
	touch $@

# pytest-xdist (TEST_WORKERS=0 runs in this process). Most end-to-end tests wait on their stack's background work, so
# a worker more than the machine's two cores fills the waits: on 2 cores, 3 workers ran the suite in 9 min 20 s
# against 10 min 25 s with 2. Whole files go to one worker (--dist loadfile): a module's stack and fixtures start
# once, and the files that start stacks of their own go first (tests/conftest.py).
TEST_WORKERS ?= 3
# The template lint, ruff and mypy, sam build and checkov share nothing: they run side by side, each one's output
# kept together.
checks: $(VENV)/.installed $(SAM_VENV)/.installed $(SECURITY_VENV)/.installed $(ENCODINGS)
	@$(MAKE) --no-print-directory -j4 --output-sync=target lint check-py build security

test: $(VENV)/.installed $(ENCODINGS) $(INSPECTOR) $(TS_SDK)/node_modules/.installed checks
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

test-fast: $(VENV)/.installed $(SAM_VENV)/.installed $(ENCODINGS) $(TS_SDK)/node_modules/.installed
	$(PY) -m pytest -x -q $(ARGS)

# `make bench local cost` runs those benchmarks (as BENCH="local cost" does): the words after `bench` are names, not goals.
ifeq (bench,$(firstword $(MAKECMDGOALS)))
  BENCH_NAMES := $(wordlist 2,$(words $(MAKECMDGOALS)),$(MAKECMDGOALS))
  ifneq ($(BENCH_NAMES),)
    BENCH := $(BENCH_NAMES)
    .PHONY: $(BENCH_NAMES)
    $(eval $(BENCH_NAMES):;@:)
  endif
endif

# The cold-start bench also times the layer as it deploys: build it first, quietly (the output is tables only).
bench: $(VENV)/.installed $(ENCODINGS) $(SAM_VENV)/.installed
	@mkdir -p .aws-sam && $(MAKE) --no-print-directory build > .aws-sam/build.log 2>&1 || \
		{ cat .aws-sam/build.log; echo "sam build failed (.aws-sam/build.log)"; exit 1; }
	@$(PY) -m bench $(BENCH)

invoke: $(VENV)/.installed $(SAM_VENV)/.installed $(ENCODINGS)
	@test -n "$(FN)" -a -n "$(EVENT)" || { echo "usage: make invoke FN=<LogicalId> EVENT=events/<file>.json"; exit 2; }
	$(PY) -m local.invoke $(FN) $(EVENT)

clean:
	rm -rf .aws-sam bench/out .pytest_cache .hypothesis .mypy_cache .ruff_cache $(TS_SDK)/node_modules
