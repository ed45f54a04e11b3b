"""Structured logs: a real `microrag serve --log-format json`, its stderr read line by line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="server extra not installed")

from helpers.net import free_port, wait_serving  # noqa: E402
from helpers.server import HANDBOOK  # noqa: E402
from microrag_engine.server.auth import KeyStore  # noqa: E402
from microrag_engine.server.logs import request_id  # noqa: E402

QUESTION = "what does the engineering salary band L5 pay?"


def test_every_line_is_json_with_its_request_id_and_no_key_question_or_document_text(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    for name, text in HANDBOOK.items():
        (kb / name).write_text(text)
    keys = KeyStore(tmp_path / "ix" / "keys.sqlite")  # beside a folder index (cli/keys.py server_dir)
    admin = keys.add("root", "admin", ["public", "internal", "restricted"])
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "microrag_engine.cli", "serve", "--port", str(port), "--no-verify",
                             "--corpus", str(kb), "--index", str(tmp_path / "ix"), "--log-format", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MICRORAG_SERVER_DIR": str(tmp_path / "srv")}, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_serving(url, "/health/live", proc=proc)
        auth = {"Authorization": f"Bearer {admin}"}
        r = httpx.post(url + "/query?debug=" + admin, json={"query": QUESTION}, timeout=60,
                       headers={**auth, "X-Request-ID": "trace-123"})
        assert r.status_code == 200 and "180000" in r.json()["answer"]
        assert r.headers["x-request-id"] == "trace-123"  # a caller's own id comes back
        forged = httpx.get(url + "/health", headers={"X-Request-ID": "x\"} {\"level\": \"error\"" + "a" * 80}, timeout=10)
        assert len(forged.headers["x-request-id"]) == 32 and forged.headers["x-request-id"].isalnum()  # replaced
        httpx.get(url + "/whoami", headers={"Authorization": "Bearer sk-wrong-SECRET-key"}, timeout=10)
        audit = httpx.get(url + "/audit", headers=auth, timeout=10).json()
        assert any(row["request_id"] == "trace-123" and row["action"] == "query" for row in audit)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    lines = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line parses
    assert all({"ts", "level", "logger", "message", "request_id"} <= set(x) for x in lines)
    access = [x for x in lines if x["logger"] == "microrag.access"]
    assert any(x["request_id"] == "trace-123" and "POST /query 200" in x["message"] for x in access)
    assert access and all(len(x["request_id"]) > 0 for x in access)
    assert any(x["logger"] == "microrag" and "serving" in x["message"] for x in lines)  # the start-up line too
    for secret in (admin, "sk-wrong-SECRET-key", QUESTION, "salary band", "180000", "WireGuard"):
        assert secret not in err


@given(st.text(max_size=200))
def test_a_sent_id_is_kept_only_when_it_is_a_plain_short_token(sent):
    rid = request_id(sent)
    assert 1 <= len(rid) <= 64 and all(c.isascii() and (c.isalnum() or c in "._:-") for c in rid)
    assert (rid == sent) == (0 < len(sent) <= 64 and all(c.isascii() and (c.isalnum() or c in "._:-") for c in sent))
