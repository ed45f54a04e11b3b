"""Tokenisers shared by the keyword legs."""

from __future__ import annotations

from microrag_engine.text import BM25S_STOPWORDS_EN, bm25_tokens


def test_the_copied_stopword_list_is_bm25s_own():
    from bm25s.stopwords import STOPWORDS_EN

    assert list(BM25S_STOPWORDS_EN) == list(STOPWORDS_EN)


def test_tokenising_a_query_does_not_import_bm25s_or_scipy():
    import subprocess
    import sys

    code = ("import sys; from microrag_engine.text import bm25_tokens; bm25_tokens('what is the E-4012 error'); "
            "print(sorted(m for m in ('bm25s', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert bm25_tokens("what is the E-4012 error") == ["e", "4012", "error"]  # stopwords gone, digits kept


def test_the_bm25_fingerprint_is_the_same_in_every_process():
    """A saved BM25 matrix is reused only under the same fingerprint: one that differs between
    processes (an object's address in it) re-derives the index at every open."""
    import subprocess
    import sys

    code = "from microrag_engine.text import bm25_fingerprint; print(bm25_fingerprint())"
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout for _ in range(2)}
    assert len(runs) == 1 and len(runs.pop().strip()) == 16
