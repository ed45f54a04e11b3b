"""Each install extra, missing: the one line that says what to install, never a traceback.

An import is made to fail by putting ``None`` in ``sys.modules`` (what Python does
for a module it could not find), so these run on the full test install too.
"""

from __future__ import annotations

import logging
import sys

import pytest

from conftest import run_cli
from microrag_engine.errors import MicroRAGError


def _missing(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_models_extra(monkeypatch):
    from microrag_engine.index.embed import MiniLMEmbedder

    _missing(monkeypatch, "onnxruntime")
    with pytest.raises(MicroRAGError, match=r"pip install 'microrag-engine\[models\]'"):
        MiniLMEmbedder()


def test_models_extra_for_the_cross_encoder(monkeypatch, tmp_path):
    from microrag_engine.runtime.crossencoder import load_encoder

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("{}")
    _missing(monkeypatch, "tokenizers")
    with pytest.raises(MicroRAGError, match=r"pip install 'microrag-engine\[models\]'"):
        load_encoder(tmp_path)


def test_postgres_extra(monkeypatch):
    from microrag_engine.store.postgres import PostgresStore

    _missing(monkeypatch, "psycopg")
    with pytest.raises(MicroRAGError, match=r"pip install 'microrag-engine\[postgres\]'"):
        PostgresStore("postgresql://127.0.0.1:1/none")


def test_ann_extra(monkeypatch, caplog):
    import numpy as np

    from microrag_engine.config import override, preset
    from microrag_engine.engine import _maybe_ann

    _missing(monkeypatch, "faiss")
    with caplog.at_level(logging.WARNING, logger="microrag"):
        assert _maybe_ann(np.zeros((10, 4), np.float32), override(preset("seed"), ann_threshold=5)) is None
    assert "pip install 'microrag-engine[ann]'" in caplog.text


def test_eval_extra(monkeypatch):
    from microrag_engine.eval.retrieval import measure

    _missing(monkeypatch, "pytrec_eval")
    with pytest.raises(MicroRAGError, match=r"pip install 'microrag-engine\[eval\]'"):
        measure({"q": {"d": 1}}, {"q": {"d": 1.0}})


def test_pii_extra(monkeypatch, caplog):
    from microrag_engine import guard

    _missing(monkeypatch, "presidio_analyzer")
    guard.presidio.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="microrag"):
            assert guard.presidio() is None
        assert "pip install 'microrag-engine[pii]'" in caplog.text
    finally:
        guard.presidio.cache_clear()


def test_server_extra(tmp_path):
    """A real process whose fastapi import fails: `microrag serve` says which extra."""
    boot = tmp_path / "sitecustomize.py"
    boot.write_text("import sys\nsys.modules['fastapi'] = None\n")
    proc = run_cli("serve", "--index", str(tmp_path / "ix"), env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "pip install 'microrag-engine[server]'" in proc.stderr


def test_local_llm_extra(tmp_path):
    boot = tmp_path / "sitecustomize.py"
    boot.write_text("import importlib.util, sys\n_find = importlib.util.find_spec\n"
                    "importlib.util.find_spec = lambda name, *a: None if name == 'llama_cpp' else _find(name, *a)\n")
    proc = run_cli("local-llm", env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "bash scripts/install-llama.sh" in proc.stderr
