"""Shutdown and health: a real `microrag serve` process, a real SIGTERM, a real (scripted) model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi", reason="server extra not installed")

from helpers.llm import stream_chat  # noqa: E402
from helpers.net import free_port, wait_serving  # noqa: E402
from helpers.server import HANDBOOK, Running  # noqa: E402
from microrag_engine.config import LLMConfig  # noqa: E402


def serve(tmp: Path, llm_url: str, *extra: str) -> tuple[subprocess.Popen, str]:
    kb = tmp / "kb"
    kb.mkdir(exist_ok=True)
    for name, text in HANDBOOK.items():
        (kb / name).write_text(text)
    port = free_port()
    env = {**os.environ, "MICRORAG_SERVER_DIR": str(tmp / "srv"), "LLM_BASE_URL": llm_url}
    proc = subprocess.Popen([sys.executable, "-m", "microrag_engine.cli", "serve", "--port", str(port), "--no-verify",
                             "--corpus", str(kb), "--index", str(tmp / "ix"), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_serving(url, "/health/ready", proc=proc)
    except AssertionError:
        proc.kill()
        raise
    return proc, url


def in_flight(url: str, out: dict) -> threading.Thread:
    def ask() -> None:
        try:
            out["response"] = httpx.post(url + "/query", json={"query": "how many vacation days do I get?"}, timeout=60)
        except httpx.HTTPError as exc:
            out["error"] = exc
    t = threading.Thread(target=ask)
    t.start()
    return t


def wait_for_model_call(llm_server, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while not llm_server.requests and time.time() < deadline:
        time.sleep(0.05)
    assert llm_server.requests, "the answer never reached the model"


def test_sigterm_finishes_the_answer_in_flight_refuses_new_work_and_exits_cleanly(tmp_path, llm_server):
    pieces = ["Employees get ", "20 vacation days ", "a year ", "[source: leave.md · chunk 0]"]
    llm_server.script(lambda h: stream_chat(h, pieces, gap_s=0.6))  # about 2.4 s of answering
    proc, url = serve(tmp_path, llm_server.url, "--grace-seconds", "20")
    try:
        out: dict = {}
        t = in_flight(url, out)
        wait_for_model_call(llm_server)
        proc.send_signal(signal.SIGTERM)
        refused = False
        deadline = time.time() + 2
        while time.time() < deadline and not refused:  # the listener closes at once
            try:
                httpx.get(url + "/health/live", timeout=0.5)
                time.sleep(0.05)
            except httpx.HTTPError:
                refused = True
        assert refused, "new connections were still accepted after SIGTERM"
        t.join(timeout=30)
        assert "error" not in out, out.get("error")
        r = out["response"]
        assert r.status_code == 200 and "20 vacation days" in r.json()["answer"]
        # uvicorn re-raises the signal once it has shut down, as a process stopped by SIGTERM
        # should (systemd and Kubernetes count that exit as clean)
        assert proc.wait(timeout=20) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_an_answer_longer_than_the_grace_period_is_cut_and_the_index_stays_whole(tmp_path, llm_server):
    llm_server.script(lambda h: stream_chat(h, ["slow "] * 40, gap_s=0.5))  # 20 s of answering
    proc, url = serve(tmp_path, llm_server.url, "--grace-seconds", "1")
    try:
        out: dict = {}
        t = in_flight(url, out)
        wait_for_model_call(llm_server)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        assert time.monotonic() - began < 15  # the grace period bounds the wait, not the answer
        t.join(timeout=30)
        assert "error" in out or out["response"].status_code >= 500
    finally:
        if proc.poll() is None:
            proc.kill()
    check = subprocess.run([sys.executable, "-m", "microrag_engine.cli", "check", "--index", str(tmp_path / "ix")],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_liveness_and_readiness_are_separate(tmp_path, llm_server):
    (tmp_path / "up").mkdir()
    (tmp_path / "down").mkdir()
    s = Running(tmp_path / "up", rate_per_minute=100_000, verify=False, llm=LLMConfig(base_url=llm_server.url))
    dead = Running(tmp_path / "down", rate_per_minute=100_000, verify=False,
                   llm=LLMConfig(base_url=f"http://127.0.0.1:{free_port()}", api_key="sk-SECRET-ready"))
    try:
        assert s.call("GET", "/health/live").json() == {"status": "ok"}
        assert s.call("GET", "/health/ready").json() == {"status": "ready"}
        assert dead.call("GET", "/health/live").status_code == 200  # alive: restarting it would not help
        r = dead.call("GET", "/health/ready")
        assert r.status_code == 503 and r.json()["status"] == "not ready"
        reasons = " ".join(r.json()["reasons"])
        assert "language model" in reasons
        assert "127.0.0.1" not in reasons and "SECRET" not in reasons  # a probe names no address or key
    finally:
        s.stop()
        dead.stop()


def test_sigterm_during_an_upload_finishes_it_and_the_restarted_server_has_it(tmp_path, llm_server):
    """An upload is the write that must not be lost or half done: SIGTERM while it is being
    chunked and embedded lets it finish within the grace period, and the next start serves it."""
    admin = subprocess.run([sys.executable, "-m", "microrag_engine.cli", "keys", "add", "ops", "--role", "admin", "-q",
                            "--index", str(tmp_path / "ix")], capture_output=True, text=True, check=True).stdout.strip()
    # long enough to be in flight when the signal lands: hundreds of chunks to embed
    body = "# Rollout notes\n\n" + "\n\n".join(
        f"## Step {i}\n\nThe rollout step {i} moves shard {i * 7 % 101} to rack {i % 13} after the canary "
        f"{i * 3 % 17} reports healthy for {i % 9 + 1} minutes." for i in range(1500))
    proc, url = serve(tmp_path, llm_server.url, "--grace-seconds", "120")
    auth = {"Authorization": f"Bearer {admin}"}
    out: dict = {}

    def upload() -> None:
        out["response"] = httpx.post(url + "/ingest", json={"source": "ops/rollout.md", "body": body}, headers=auth,
                                     timeout=180)
        out["at"] = time.monotonic()
    t = threading.Thread(target=upload)
    try:
        t.start()
        time.sleep(1.0)  # the body is sent and the server is working on it
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        t.join(timeout=180)
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
    r = out["response"]
    assert r.status_code == 200, r.text
    assert out["at"] > signalled, "the upload finished before the signal: the test proved nothing"
    check = subprocess.run([sys.executable, "-m", "microrag_engine.cli", "check", "--index", str(tmp_path / "ix")],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    proc, url = serve(tmp_path, llm_server.url)
    try:
        docs = httpx.get(url + "/documents", headers=auth, timeout=30).json()
        review = httpx.get(url + "/review", headers=auth, timeout=30).json()
        assert r.json()["doc"] in {d["doc"] for d in docs} | {e["doc"] for e in review}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
