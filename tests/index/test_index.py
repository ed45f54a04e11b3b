"""Step 2: the keyword scorers and the embedders, against formulas written out here."""

from __future__ import annotations

import hashlib
import math
from collections import Counter

import numpy as np
import pytest

from conftest import needs_models
from microrag_engine.errors import ConfigError
from microrag_engine.index.embed import HashEmbedder, make_embedder
from microrag_engine.index.keyword import BM25Scorer, TfidfScorer, make_keyword
from microrag_engine.text import bm25_tokens, seed_tokens

DOCS = [
    "Reset your password with Okta. Password resets need MFA.",
    "The VPN uses GlobalProtect; connect before internal services.",
    "Database host db-prod runs PostgreSQL 15 on port 5432.",
    "Onboarding: new hires get a laptop and a badge in week one.",
]


def reference_tfidf(docs, query):
    """The spec's seed TF-IDF written the slow, obvious way."""
    toks = [seed_tokens(d) for d in docs]
    n = len(docs)
    df = Counter(t for ts in toks for t in set(ts))
    idf = lambda t: math.log((n + 1) / (df.get(t, 0) + 1)) + 1  # noqa: E731
    def vec(ts):
        return {t: c * idf(t) for t, c in Counter(ts).items()}
    q = vec(seed_tokens(query))
    out = []
    for ts in toks:
        c = vec(ts)
        dot = sum(w * c.get(t, 0.0) for t, w in q.items())
        nq = math.sqrt(sum(w * w for w in q.values()))
        nc = math.sqrt(sum(w * w for w in c.values()))
        out.append(dot / (nq * nc + 1e-9))
    return out


def test_seed_tokenizer():
    assert seed_tokens("It's A user's DB-prod 15 x") == ["it's", "user's", "db", "prod"]


@pytest.mark.parametrize("query", ["reset password", "vpn vpn internal", "database port", "zzz unknown words", ""])
def test_tfidf_matches_the_formula(query):
    got = TfidfScorer().fit(DOCS).scores(query)
    assert np.allclose(got, reference_tfidf(DOCS, query), atol=1e-12)


def test_bm25_keeps_digits_and_stems():
    toks = bm25_tokens("Passwords on db-prod port 5432, error E-4012")
    assert "password" in toks and "5432" in toks and "4012" in toks and "prod" in toks
    scores = BM25Scorer().fit(DOCS).scores("port 5432")
    assert int(np.argmax(scores)) == 2 and scores[2] > 0
    assert np.count_nonzero(scores) == 1


def test_bm25_matches_lucene_formula():
    """bm25s' lucene variant equals the formula computed by hand."""
    k1, b = 0.9, 0.4
    toks = [bm25_tokens(d) for d in DOCS]
    avgdl = sum(map(len, toks)) / len(toks)
    n = len(toks)
    q = bm25_tokens("password reset okta")
    expected = []
    for ts in toks:
        s = 0.0
        for t in q:
            df = sum(t in d for d in toks)
            if not df:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            tf = ts.count(t)
            s += idf * tf / (tf + k1 * (1 - b + b * len(ts) / avgdl))
        expected.append(s)
    assert np.allclose(BM25Scorer(k1, b).fit(DOCS).scores("password reset okta"), expected, rtol=1e-5)


def test_bm25_empty_query_and_unknown_terms_score_zero():
    s = BM25Scorer().fit(DOCS)
    assert not s.scores("").any()
    assert not s.scores("flibberjab").any()


def test_hash_embedder_is_the_seed_rule():
    e = HashEmbedder()
    v = e.embed(["password password reset", ""])
    ref = np.zeros(128)
    for t in ["password", "password", "reset"]:
        ref[int(hashlib.md5(t.encode()).hexdigest(), 16) % 128] += 1.0
    assert np.allclose(v[0], ref / np.linalg.norm(ref))
    assert not v[1].any()  # no tokens -> zero vector, not NaN


def test_unknown_names_are_config_errors():
    with pytest.raises(ConfigError):
        make_keyword("tf-idf")
    with pytest.raises(ConfigError):
        make_embedder("openai")


@needs_models
def test_minilm_vectors_are_unit_and_semantic():
    e = make_embedder("minilm")
    v = e.embed(["how do I reset my password?", "To change a forgotten password, use the self-service portal.",
                 "The cafeteria serves lunch from noon.", ""])
    assert v.shape == (4, 384)
    assert np.allclose(np.linalg.norm(v[:3], axis=1), 1.0, atol=1e-4)
    assert v[0] @ v[1] > 0.5 > v[0] @ v[2]


@needs_models
def test_minilm_batching_does_not_change_vectors():
    e = make_embedder("minilm")
    texts = ["short one", "a much longer sentence " * 30, "medium length text about the VPN client"]
    together = e.embed(texts)
    alone = np.vstack([e.embed([t]) for t in texts])
    assert np.allclose(together, alone, atol=1e-4)


@needs_models
def test_minilm_token_count_is_untruncated():
    e = make_embedder("minilm")
    assert e.count_tokens("word " * 400) > 400  # the shipped tokenizer.json truncates at 128
    assert e.count_tokens("hello") == 3  # [CLS] hello [SEP], no padding
