"""Shared fixtures: paths to ../shared, a CLI runner, a scripted model (helpers/ holds the rest)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.llm import ScriptedServer, start

ROOT = Path(__file__).resolve().parents[1]
# Dev-only tools (perturbations, NLI evaluation) live beside the package, not in the wheel.
TRAINING = ROOT / "training"
sys.path.insert(0, str(TRAINING))
# ../shared (fixtures, datasets) sits beside the checkout in our workspace; a user's
# `pip install .[dev]` + pytest has none. MICRORAG_SHARED points elsewhere (or nowhere).
SHARED = Path(os.environ.get("MICRORAG_SHARED", ROOT.parent / "shared"))
FIXTURES = SHARED / "fixtures"
needs_shared = pytest.mark.skipif(not FIXTURES.is_dir(), reason=f"{SHARED} (fixtures and datasets beside the checkout) is absent")


def _has_models() -> bool:
    try:
        import onnxruntime  # noqa: F401
        import tokenizers  # noqa: F401

        from microrag_engine.index.embed import _minilm_files

        _minilm_files()
        return True
    except Exception:
        return False


HAS_MODELS = _has_models()
needs_models = pytest.mark.skipif(not HAS_MODELS, reason="MiniLM model packages not installed (pip install 'microrag-engine[models]')")


def run_cli(*args: str, stdin: str | None = None, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python -m microrag_engine.cli ARGS`` as a user would, capturing both streams."""
    # Hermetic: never pick up a developer's .microrag/ index unless a test asks for one.
    full_env = {**os.environ, "MICRORAG_INDEX": str(ROOT / ".no-such-index"), **(env or {})}
    full_env.pop("LLM_BASE_URL", None) if env is None or "LLM_BASE_URL" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "microrag_engine.cli", *args],
        input=stdin, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT,
    )


@pytest.fixture(scope="session")
def seed_kb() -> Path:
    path = FIXTURES / "seed-kb"
    if not path.is_dir():
        pytest.skip(f"{path} is absent (the seed fixture from ../shared)")
    return path


# ---------------------------------------------------------------- a scripted model

@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx honours proxy variables; the local server must be reached directly.
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def llm_server():
    """A scripted OpenAI-compatible server (helpers/llm.py) on a loopback port."""
    scripted = ScriptedServer(url="")
    httpd, thread = start(scripted)
    try:
        yield scripted
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=2)
