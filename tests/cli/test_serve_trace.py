"""``microrag serve --trace`` as an operator runs it: set in microrag.toml, spans to the
console exporter (``OTEL_TRACES_EXPORTER=console``), one JSON object per span on stdout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

pytest.importorskip("fastapi", reason="server extra not installed")
pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from helpers.net import free_port, wait_serving  # noqa: E402
from helpers.server import HANDBOOK  # noqa: E402


def spans_of(stdout: str) -> list[dict]:
    """The console exporter's objects (each pretty-printed JSON, one after another)."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while (start := stdout.find("{", at)) != -1:
        obj, at = decoder.raw_decode(stdout, start)
        out.append(obj)
    return out


def test_serve_trace_from_the_options_file_prints_spans_without_text(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    for name, text in HANDBOOK.items():
        (kb / name).write_text(text)
    (tmp_path / "microrag.toml").write_text(f'[serve]\ntrace = true\nno-verify = true\ncorpus = ["{kb}"]\n'
                                            f'index = "{tmp_path / "ix"}"\n')
    port = free_port()
    env = {**os.environ, "MICRORAG_CONFIG": str(tmp_path / "microrag.toml"), "MICRORAG_SERVER_DIR": str(tmp_path / "srv"),
           "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "kb-test"}
    env.pop("LLM_BASE_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "microrag_engine.cli", "serve", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        wait_serving(f"http://127.0.0.1:{port}", "/health/ready", proc=proc)
        r = httpx.post(f"http://127.0.0.1:{port}/query", json={"query": "Which UDP port does the corporate VPN use?"},
                       headers={"X-Request-ID": "cli-trace-1"}, timeout=60)
        assert r.status_code == 200, r.text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert "tracing: spans to the console" in err
    spans = spans_of(out)
    names = {s["name"] for s in spans}
    assert {"microrag.ingest", "microrag.request", "microrag.retrieve", "microrag.answer", "microrag.guard"} <= names
    root = next(s for s in spans if s["name"] == "microrag.request" and s["attributes"].get("http.route") == "/query")
    assert root["attributes"]["microrag.request_id"] == "cli-trace-1"
    assert root["resource"]["attributes"]["service.name"] == "kb-test"
    for text in ("WireGuard", "51820", "corporate", "180000", "salaries"):
        assert text.lower() not in out.lower(), text
