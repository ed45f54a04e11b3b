"""chunk.py and text.py: both chunkers and the sentence spans they cut on."""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from microrag_engine.chunk import chunk_chars, chunk_documents, chunk_sentences
from microrag_engine.load import load_documents
from microrag_engine.text import approx_tokens, sentence_spans

# ---------------------------------------------------------------- char window


def test_chunk_chars_matches_the_seed_rule():
    text = "  " + "abcdefghij" * 70  # 702 chars, leading blanks
    chunks = chunk_chars("d.md", text, size=300, overlap=60)
    expected = [text[i : i + 300].strip() for i in range(0, len(text), 240)]
    assert [c.text for c in chunks] == [e for e in expected if e]
    for c in chunks:
        assert text[c.start : c.end] == c.text
    assert [c.id for c in chunks] == [f"d.md#{k}" for k in range(len(chunks))]


def test_chunk_chars_drops_empty_windows():
    text = "x" * 10 + " " * 600 + "y"
    chunks = chunk_chars("d", text, size=300, overlap=60)
    assert all(c.text for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_seed_kb_has_13_char_chunks(seed_kb):
    assert len(chunk_documents(load_documents([seed_kb]), "chars")) == 13


# ---------------------------------------------------------------- sentence chunker


def test_sentence_spans_split_sentences_headings_and_items():
    text = "# Title\nFirst one. Second one!\n\n- item a\n- item b\n\nPara? Yes."
    parts = [text[s:e] for s, e in sentence_spans(text)]
    assert parts == ["# Title", "First one.", "Second one!", "- item a", "- item b", "Para?", "Yes."]


def test_sentence_chunks_respect_budget_and_spans():
    text = "\n\n".join(f"## Section {i}\n\n" + " ".join(f"Sentence {i}.{j} says something useful." for j in range(12)) for i in range(6))
    chunks = chunk_sentences("doc.md", text, max_tokens=64)
    assert len(chunks) > 3
    for c in chunks:
        assert approx_tokens(c.text) <= 64
        assert text[c.start : c.end] == c.text
        assert not c.text.startswith(" ")
    # no sentence is cut in half: every chunk ends at a sentence end or heading
    assert all(c.text.rstrip().endswith((".", "!", "?")) or c.text.lstrip().startswith("#") for c in chunks)


def test_sentence_chunker_cuts_an_overlong_sentence_at_words():
    text = " ".join(["word"] * 500) + "."
    chunks = chunk_sentences("d", text, max_tokens=40)
    assert len(chunks) > 5
    assert all(approx_tokens(c.text) <= 40 for c in chunks)
    assert " ".join(c.text for c in chunks) == text


@hsettings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab .!?\n#-")), max_size=400), st.integers(20, 80))
def test_sentence_chunks_cover_all_text_in_order(text, budget):
    chunks = chunk_sentences("d", text, max_tokens=budget)
    for c in chunks:
        assert text[c.start : c.end] == c.text
    assert [c.start for c in chunks] == sorted(c.start for c in chunks)
    # every non-space character belongs to some chunk
    covered = set()
    for c in chunks:
        covered.update(range(c.start, c.end))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())


def test_a_long_text_without_sentence_breaks_is_cut_in_linear_time():
    """#33 (first battery): a 1 MB log with no sentence break never finished: each binary-search
    step counted the tokens of the whole remaining text. Linear is ~4x for 4x the text."""
    from helpers.timing import best_time
    from microrag_engine.chunk import chunk_sentences

    def took(n: int) -> float:
        text = " ".join(f"w{i}" for i in range(n))
        return best_time(lambda: chunk_sentences("log.txt", text, 64), repeats=1)

    small, big = took(10_000), took(40_000)
    # Quadratic would be ~16x; the ceiling only catches that (CI shares cores).
    assert big < 0.5 or big / max(small, 1e-3) < 10, (small, big)
    pieces = chunk_sentences("log.txt", " ".join(f"w{i}" for i in range(2_000)), 64)
    assert " ".join(c.text for c in pieces) == " ".join(f"w{i}" for i in range(2_000))
