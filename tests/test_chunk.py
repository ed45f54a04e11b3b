"""chunk.py and text.py: both chunkers and the sentence spans they cut on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from conftest import needs_models
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


# ---------------------------------------------------------------- additive token counts


class _Exact:
    """The MiniLM counter, every span counted whole (what the chunker did before #34)."""

    @property
    def additive_counts(self) -> bool:
        return False

    def __init__(self, counter) -> None:
        self.count_tokens = counter.count_tokens


_PIECES = ["word", "Café", "naïve", "x", "e.g.", "v2.10", "a,b", "—", "日本語", "(see", "below)", "`code`",
           "snake_case_name", "ÅNGSTRÖM", "ﬁle", "1.", "!", "?", "#", "##", "-", "\x00", "\x1c", "\u00a0", "\u200b"]
_GAPS = [" ", "  ", "\n", "\n\n", "\t", "\r\n", ". ", ".\n\n", "? ", "! ", "\n# ", "\n- ", "\n```\n", "", "\u3000", "\x1c\x1c", "\x85\x85"]


@needs_models
@hsettings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_PIECES), st.sampled_from(_GAPS)), max_size=160), st.integers(8, 120))
def test_additive_counts_cut_the_chunks_exact_counts_cut(parts, budget):
    """#34: with WordPiece counts the chunker counts each sentence once and adds the counts
    across whitespace gaps; any other gap (none at all, control or other Unicode spaces) is
    counted whole. The chunks are the ones counting every span whole gives, and fit."""
    from microrag_engine.index.embed import make_embedder

    minilm = make_embedder("minilm")
    text = "".join(w + g for w, g in parts)
    fast = chunk_sentences("d", text, budget, minilm)
    assert [(c.start, c.end) for c in fast] == [(c.start, c.end) for c in chunk_sentences("d", text, budget, _Exact(minilm))]
    # a chunk over budget is a single unit the chunker could not cut (one word, or a code block)
    assert all(minilm.count_tokens(c.text) <= budget or " " not in c.text.strip() or "```" in c.text for c in fast)


@needs_models
@pytest.mark.parametrize("gap", ["\x1c\x1c", "\x85\x85", "\u2028\u2028", "\u200b\n\n\u200b"])
def test_a_gap_the_tokenizer_drops_is_counted_whole(gap):
    """Python cuts lines at these characters; BERT's normalizer drops \\x1c and \\x85 (the words
    on either side join: "unbelievable" is 1 token, "un" + "believable" are 4), and keeps the
    others as word breaks. The chunker adds counts only across ASCII whitespace."""
    from microrag_engine.index.embed import make_embedder

    minilm = make_embedder("minilm")
    text = f"un{gap}believable"
    for budget in range(3, 9):
        fast = chunk_sentences("d", text, budget, minilm)
        assert [c.text for c in fast] == [c.text for c in chunk_sentences("d", text, budget, _Exact(minilm))], budget
