"""The optional local LLM: our client against llama.cpp's real OpenAI-compatible server.

Slow (the server loads SmolLM2-135M and generates on the CPU) and needs
llama-cpp-python, which compiles from source: ``make test-llm`` builds it
(scripts/install-llama.sh) and runs these; ``make test`` deselects them.
"""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from conftest import ROOT, needs_models
from helpers.net import free_port
from microrag_engine.config import LLMConfig
from microrag_engine.runtime.llm import ChatStream

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def local_llm(tmp_path_factory):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed: bash scripts/install-llama.sh")
    port = free_port()
    # llama.cpp logs a lot: a file, not a pipe nobody reads (a full pipe would stall the server).
    log = open(tmp_path_factory.mktemp("llm") / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "microrag_engine.cli", "local-llm", "--port", str(port), "--n-ctx", "2048", "-q"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"local-llm exited with {proc.returncode}: {log.read()[-2000:]}")
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("local-llm did not answer /v1/models within 180 s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_our_client_streams_a_real_reply(local_llm):
    cfg = LLMConfig(base_url=local_llm, temperature=0.0, max_tokens=40, timeout=120)
    stream = ChatStream(cfg, [{"role": "user", "content": "Name one colour of the sky."}])
    pieces = list(stream)
    assert len(pieces) > 1, "expected a token stream, got one block"
    assert "".join(pieces).strip() and not stream.truncated


@needs_models
def test_offline_rag_with_the_local_model_and_verification(local_llm):
    from microrag_engine.config import PRESETS
    from microrag_engine.engine import Engine, demo_corpus

    eng = Engine.from_paths([demo_corpus() / "hr"], PRESETS["default"])
    cfg = LLMConfig(base_url=local_llm, temperature=0.0, max_tokens=60, timeout=120)
    ans = eng.ask("how many vacation days do I get?", llm=cfg, verify=True)
    assert ans.mode == "llm" and ans.text.strip()
    assert ans.verification is not None and len(ans.verification.sentences) >= 1
