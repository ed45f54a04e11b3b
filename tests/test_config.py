"""config.py: presets, validation, and the one reader of the environment."""

from __future__ import annotations

import pytest

from microrag_engine import config
from microrag_engine.config import LLMConfig, override, preset
from microrag_engine.errors import ConfigError


def test_override_rejects_unknown_knobs_and_impossible_values():
    with pytest.raises(ConfigError, match="unknown setting"):
        override(preset("default"), topk=3)
    with pytest.raises(ConfigError, match="overlap"):
        override(preset("seed"), size=100, overlap=100)
    with pytest.raises(ConfigError, match="choose one of"):
        override(preset("default"), fusion="sum")
    assert override(preset("default"), top_k=None).top_k == preset("default").top_k  # None = leave as is
    with pytest.raises(ConfigError, match="answer_rerank"):
        override(preset("default"), answer_rerank=0)
    with pytest.raises(ConfigError, match="answer_min_answers"):
        override(preset("default"), answer_min_answers=1.5)
    assert preset("default").answer_model == preset("seed").answer_model == ""  # none ships
    with pytest.raises(ConfigError, match="needs answer_selector"):
        override(preset("default"), answer_model="build/select-nli/onnx", answer_selector=False)


def test_environment_is_read_here(monkeypatch):
    monkeypatch.setenv("MICRORAG_INDEX", "/srv/ix")
    monkeypatch.setenv("MICRORAG_PG_SCHEMA", "tenant_a")
    monkeypatch.setenv("MICRORAG_MINILM_ONNX", "/m/model.onnx")
    monkeypatch.delenv("MICRORAG_MINILM_TOKENIZER", raising=False)
    assert config.index_location() == "/srv/ix"
    assert config.pg_schema() == "tenant_a"
    assert config.minilm_files() == ("/m/model.onnx", "")
    monkeypatch.delenv("MICRORAG_INDEX")
    assert config.index_location() == config.DEFAULT_INDEX


def test_llm_config_from_the_environment_never_shows_the_key():
    assert LLMConfig.from_env({}) is None
    cfg = LLMConfig.from_env({"LLM_BASE_URL": "http://h/v1/", "LLM_API_KEY": "sk-SECRET", "LLM_MAX_TOKENS": "64"})
    assert cfg is not None and cfg.base_url == "http://h/v1" and cfg.max_tokens == 64
    assert "sk-SECRET" not in repr(cfg)
    with pytest.raises(ConfigError, match="LLM_MAX_TOKENS"):
        LLMConfig.from_env({"LLM_BASE_URL": "http://h", "LLM_MAX_TOKENS": "many"})


def test_no_other_module_reads_the_environment():
    """The layered design's rule: config is the only reader (a grep, so a new reader fails here)."""
    import re
    from pathlib import Path

    import microrag_engine

    pkg = Path(microrag_engine.__file__).parent
    readers = [str(p.relative_to(pkg)) for p in pkg.rglob("*.py")
               if p.name != "config.py" and re.search(r"os\.environ|os\.getenv", p.read_text())]
    assert readers == []
