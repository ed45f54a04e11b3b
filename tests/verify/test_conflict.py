"""verify.conflict and the engine's conflict answer: sources that contradict each other about
the question are shown side by side (mode "conflict"), never blended; agreeing or unrelated
sources are not a conflict. Uses the shipped NLI model."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from conftest import needs_models
from microrag_engine import Engine, override, preset
from microrag_engine.engine import demo_corpus
from microrag_engine.load import load_documents
from microrag_engine.types import Document
from microrag_engine.verify.conflict import MAX_CHARS, _shared, conflict_answer, find_conflicts, passage_on
from microrag_engine.verify.nli import load_nli

Q = "How many vacation days do full-time employees get per year?"
TRUE = "Full-time employees receive 20 days of paid vacation per year, accrued monthly."
FALSE = "Full-time employees receive 45 days of paid vacation per year, accrued monthly."


def test_a_passage_is_taken_only_when_it_is_about_the_question():
    p = passage_on(Q, "a#0", "a", "The cafeteria opens at eight. " + TRUE + " Ask HR for details.")
    assert p is not None and "20 days" in p.text
    assert passage_on(Q, "b#0", "b", "The cafeteria opens at eight and serves soup on Fridays.") is None


@needs_models
def test_contradicting_sources_are_a_conflict_and_agreeing_ones_are_not():
    nli = load_nli("shipped")
    found = find_conflicts(Q, [("a#0", "a.md", TRUE), ("b#0", "b.md", FALSE)], nli, 0.8)
    assert len(found) == 1 and {found[0].first.doc, found[0].second.doc} == {"a.md", "b.md"}
    text = conflict_answer(found)
    assert "20 days" in text and "45 days" in text and "disagree" in text
    assert find_conflicts(Q, [("a#0", "a.md", TRUE), ("c#0", "c.md", TRUE.replace("receive", "get"))], nli, 0.8) == []
    # one source, or one document's two chunks, cannot disagree with itself here
    assert find_conflicts(Q, [("a#0", "a.md", TRUE), ("a#1", "a.md", FALSE)], nli, 0.8) == []


@needs_models
def test_the_engine_answers_a_conflict_with_both_sources_and_no_model_call():
    docs = [Document("hr/leave.md", "# Leave\n\n" + TRUE), Document("@mallory/leave-update.md", "# Update\n\n" + FALSE),
            Document("it/vpn.md", "# VPN\n\nConnect with the company VPN client before opening internal sites.")]
    eng = Engine.from_documents(docs, preset("default"))
    ans = eng.ask(Q)  # no LLM configured: the extractive path would quote one side
    assert ans.mode == "conflict" and ans.conflicts
    assert "20 days" in ans.text and "45 days" in ans.text
    assert any(f.startswith("conflict:") for f in ans.flags)
    off = Engine.from_documents(docs, override(preset("default"), conflicts=False)).ask(Q)
    assert off.mode == "extractive" and not off.conflicts


@needs_models
def test_no_false_conflict_on_the_handbook_questions():
    eng = Engine.from_documents(load_documents([demo_corpus()]), preset("default"))
    for q in ["How many vacation days do I get?", "How do I connect to the VPN?", "What is the parental leave policy?",
              "How do I submit an expense report?", "Who do I call when my laptop breaks?"]:
        assert eng.conflicts(eng.retrieve(q))[0] == [], q


@given(st.text(max_size=200), st.text(max_size=3000), st.text(max_size=3000))
def test_passages_and_overlap_never_raise_on_untrusted_text(question, a, b):
    """Retrieved chunks are untrusted: whatever they hold, picking the passage on the question
    and measuring overlap return a value, never an exception."""
    p = passage_on(question, "x#0", "x", a)
    assert p is None or len(p.text) <= MAX_CHARS
    assert 0.0 <= _shared(a, b) <= 1.0
