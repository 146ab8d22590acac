# msvm: two commands do everything on a fresh machine.
#   make demo   set up .venv and run the article's example with its bytecode dump and [MS] logs
#   make test   set up .venv and run every test suite
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
E2E_STAMP := tests/e2e/node_modules/.installed

.PHONY: demo test test-vm test-jit test-server test-dap test-extension test-e2e lint bench clean venv node build vsix

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[ide,dev]'
	$(BIN)/pip install -q --no-deps 'mindcv==0.3.0'    # a real model zoo for the tests (tests/vm/test_compat.py)
	touch $(STAMP)

node: $(NODE_STAMP)

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

demo: $(STAMP)
	$(BIN)/msvm dump examples/dynamic_matmul.py
	MSVM_LOG=DEBUG $(BIN)/msvm run examples/dynamic_matmul.py --dump
	$(BIN)/msvm run examples/bert_layer.py

test: $(STAMP) lint test-vm test-jit test-server test-dap test-extension test-e2e

lint: $(STAMP)
	$(BIN)/ruff check vm server tests bench examples

test-vm: $(STAMP)
	$(BIN)/python -m pytest tests/vm

test-jit: $(STAMP)
	$(BIN)/python -m pytest tests/jit

test-server: $(STAMP)
	$(BIN)/python -m pytest tests/server

test-dap: $(STAMP) $(NODE_STAMP)
	MSVM_PYTHON=$(abspath $(BIN))/python npx mocha --timeout 60000 tests/dap/*.test.js

build: $(NODE_STAMP)
	npm run build

test-extension: build $(E2E_STAMP)
	npm run test:unit

$(E2E_STAMP): tests/e2e/package.json tests/e2e/package-lock.json tests/e2e/install.sh
	tests/e2e/install.sh

# the .vsix: the bundled extension, the panel pages and the Python packages (python/)
vsix: build
	rm -rf python && mkdir -p python/vm python/server
	cp pyproject.toml README.md LICENSE python/
	cp -r vm/msvm python/vm/ && cp -r server/msvm_server python/server/
	find python -name __pycache__ -prune -exec rm -rf {} +
	npm run vsix

test-e2e: $(STAMP) $(E2E_STAMP) vsix
	MSVM_PYTHON=$(abspath $(BIN))/python node tests/e2e/run.js
	MSVM_E2E_SCENARIO=managed-venv node tests/e2e/run.js

bench: $(STAMP)
	$(BIN)/python bench/interp_overhead.py
	$(BIN)/python bench/jit_bench.py
	$(BIN)/pip install -q -e '.[bench]' || echo 'bench extra not installed: bench/peers.py skips onnxruntime'
	$(BIN)/python bench/peers.py

clean:
	rm -rf $(VENV) node_modules tests/e2e/node_modules dist out python build *.egg-info vm/*.egg-info server/*.egg-info
