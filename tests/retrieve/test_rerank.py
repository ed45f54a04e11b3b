"""rerank.py: the blend puts reranked candidates first, p(relevant) is read by label name,
and retrieval with ``rerank=True`` uses the model folder it is given (none ships)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import needs_models
from helpers import tiny_models
from microrag_engine.retrieve.rerank import blend, relevance


def test_blend_orders_reranked_first_by_the_mix():
    hybrid = np.array([0.9, 0.8, 0.7, 0.1])
    out = blend(hybrid, [0, 1, 2], np.array([0.0, 1.0, 0.5]), w_rerank=1.0)
    assert list(np.argsort(-out)) == [1, 2, 0, 3]  # pure rerank; the unreranked tail stays last
    out = blend(hybrid, [0, 1, 2], np.array([0.0, 1.0, 0.5]), w_rerank=0.0)
    assert list(np.argsort(-out)) == [0, 1, 2, 3]  # w 0 = the hybrid order
    half = blend(hybrid, [0, 1, 2], np.array([0.0, 1.0, 0.5]), w_rerank=0.5)
    assert half[1] == pytest.approx(0.5 * 1.0 + 0.5 * 0.5) and half[3] < 0


def test_relevance_reads_the_relevant_column_by_name(tmp_path):
    pytest.importorskip("torch", reason="torch is installed by `make test` for this parity check")
    from microrag_engine.runtime.crossencoder import CrossEncoder

    model = tiny_models.build(tmp_path / "r", id2label={0: "relevant", 1: "irrelevant"})
    enc = CrossEncoder(tmp_path / "r")
    ref = np.array(tiny_models.reference_logits(model, enc, [("the cat", "the cat sat"), ("the cat", "a man runs")]))
    soft = np.exp(ref) / np.exp(ref).sum(axis=1, keepdims=True)
    assert np.allclose(relevance(enc, "the cat", ["the cat sat", "a man runs"]), soft[:, 0], atol=1e-4)


@needs_models
def test_retrieval_with_rerank_on_reports_and_uses_the_scores(tmp_path):
    pytest.importorskip("torch", reason="the tiny cross-encoder is built with torch (installed by `make test`)")
    from microrag_engine.config import PRESETS, override
    from microrag_engine.engine import Engine, demo_corpus
    from microrag_engine.retrieve.rerank import load_reranker

    folder = tmp_path / "rerank"
    tiny_models.build(folder, id2label={0: "irrelevant", 1: "relevant"})
    assert json.loads((folder / "config.json").read_text())["id2label"] == {"0": "irrelevant", "1": "relevant"}
    eng = Engine.from_paths([demo_corpus()], override(PRESETS["default"], rerank=True, rerank_model=str(folder),
                                                      w_rerank=1.0, max_per_source=0))
    r = eng.retrieve("who approves production deploys?")
    assert len(r.hits) == 4 and all(h.rerank is not None and 0.0 <= h.rerank <= 1.0 for h in r.hits)
    scores = [h.rerank for h in r.hits]
    assert scores == sorted(scores, reverse=True)  # w_rerank 1: the reranker alone orders the top
    plain = Engine(override(eng.settings, rerank=False), eng.index, eng.documents).retrieve("who approves production deploys?")
    assert all(h.rerank is None for h in plain.hits)
    assert load_reranker(str(folder)) is load_reranker(str(folder))  # loaded once


def test_rerank_without_a_model_says_how_to_get_one():
    """None ships (its training data is non-commercial): asking for it is a clear error."""
    from microrag_engine.config import PRESETS, override
    from microrag_engine.errors import ConfigError

    with pytest.raises(ConfigError, match="rerank_model.*training/"):
        override(PRESETS["default"], rerank=True).validate()
