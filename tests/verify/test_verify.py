"""verify.py: sentence splitting, verdicts, policies, and the engine / CLI / server wiring.

The pure parts run against a scripted backend; the wiring runs the shipped model.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from conftest import needs_models, run_cli
from helpers.llm import delta, sse
from helpers.timing import best_time
from microrag_engine.verify import (
    CONTRADICTED,
    ENTAILED,
    NEUTRAL,
    NOT_SUPPORTED,
    SentenceVerdict,
    apply_policy,
    decide,
    split_sentences,
    strip_citations,
    verify,
)


class Scripted:
    """A backend whose probabilities are looked up by (chunk text, claim)."""

    min_entail, min_contra = 0.5, 0.5

    def __init__(self, table: dict[tuple[str, str], tuple[float, float, float]]) -> None:
        self.table = table

    def score_grid(self, chunks, claims):
        return [[self.table.get((c, s), (0.1, 0.8, 0.1)) for c in chunks] for s in claims]


# ---------------------------------------------------------------- splitting


@pytest.mark.parametrize("answer, expected", [
    ("One fact. Two facts.", ["One fact.", "Two facts."]),
    # a citation after the full stop stays with its sentence
    ("Vacation is 20 days. [1] Sick leave is 10 days [2].", ["Vacation is 20 days. [1]", "Sick leave is 10 days [2]."]),
    ("See the handbook [hr/leave.md#2]. Done.", ["See the handbook [hr/leave.md#2].", "Done."]),
    # the prompt's own tag, even on a line of its own after the quote
    ("Days expire. [source: hr/leave.md · chunk 0]", ["Days expire. [source: hr/leave.md · chunk 0]"]),
    ("Days expire.\n\n[source: a.md · chunk 1]", ["Days expire. [source: a.md · chunk 1]"]),
    # abbreviations and decimals do not end sentences
    ("Use a passphrase, e.g. four words. Version 3.5 is current.", ["Use a passphrase, e.g. four words.", "Version 3.5 is current."]),
    ("Ask Dr. Smith first.", ["Ask Dr. Smith first."]),
    ("It supports A, B, etc. The VPN is off.", ["It supports A, B, etc.", "The VPN is off."]),
    ("No. The VPN is not needed.", ["No.", "The VPN is not needed."]),
    # a tag opening a new line with text after it belongs to that line
    ("The VPN is required.\n[2] Rotate keys weekly.", ["The VPN is required.", "[2] Rotate keys weekly."]),
    # list items are sentences of their own, bullets stripped
    ("Steps:\n1. Open the portal.\n2) Enter your name\n- Approve the push",
     ["Steps:", "Open the portal.", "Enter your name", "Approve the push"]),
    # markup or punctuation alone is no sentence (MkDocs "///", a stray brace); a fence is one unit
    ("Send this:\n///\n```JSON\n{\"a\": 1}\n```\n{\n}\n---", ["Send this:", "```JSON\n{\"a\": 1}\n```"]),
    # a heading's and a quote's marker is structure, the words are checked
    ("## Carry-over\n> Days expire in March.", ["Carry-over", "Days expire in March."]),
    # a table: the header row names the cells of each row, the rule row is markup
    ("| kind | days |\n|---|---:|\n| vacation | 20 |\n| sick | 10 |\nDone.", ["kind: vacation; days: 20", "kind: sick; days: 10", "Done."]),
    ("| a | b |\n| 1 | 2 | 3 |", ["a; b", "1; 2; 3"]),
    # a header with no rows is still checked; "\|" is a pipe inside a cell; a one-dash rule is a rule
    ("| Wire 500 dollars | to account 123 |\n|-|-|\nDone.", ["Wire 500 dollars; to account 123", "Done."]),
    ("| op | means |\n|---|---|\n| a \\| b | either |", ["op: a | b; means: either"]),
    ("", []),
])
def test_split_sentences(answer, expected):
    assert split_sentences(answer) == expected


def test_a_heading_is_checked_unless_a_source_holds_it():
    text = "# Carry-over rules\n\nUnused vacation days carry over until March 31."
    chunks = [("leave.md#0", text)]
    nli = Scripted({(text, "Unused vacation days carry over until March 31."): (0.95, 0.03, 0.02)})
    said = "## Carry-over\n\nUnused vacation days carry over until March 31."
    v = verify(said, chunks, nli, policy="refuse")
    assert [(s.verdict, s.chunk) for s in v.sentences] == [(ENTAILED, "leave.md#0")] * 2 and v.text == said
    # a heading no source holds is a claim like any other: it cannot slip past "refuse"
    hidden = "# Wire 500 dollars to account 123 today\n\nUnused vacation days carry over until March 31."
    v = verify(hidden, chunks, nli, policy="refuse")
    assert v.sentences[0].verdict != ENTAILED and v.text == NOT_SUPPORTED
    only = verify("| Wire 500 dollars | to account 123 |\n|---|---|", chunks, nli, policy="refuse")
    assert only.sentences and only.text == NOT_SUPPORTED  # a table header alone is checked too


MARKUP = st.sampled_from(["|", "---", "| a | b |", "|---|---|", "# ", "## T", "```", "~~~", "- ", "1. ", "> ", "{", "///",
                          "\n", " ", "word", "Days expire.", "[source: a.md · chunk 1]", "e.g.", "3.5"])


@hsettings(max_examples=300, deadline=None)
@given(st.lists(MARKUP | st.text(max_size=12), max_size=40).map("".join))
def test_split_sentences_of_any_markup_gives_claims_only(answer):
    for unit in split_sentences(answer):
        assert unit.strip() and any(ch.isalnum() for ch in unit), unit


@pytest.mark.parametrize("piece", ["| a | b |\n", "|" + " " * 50 + "x\n", "#" * 7 + " word\n", "- " * 30 + "\n", " " * 200 + "-\n"])
def test_split_sentences_time_grows_linearly(piece):
    small, big = piece * 500, piece * 2_000
    t_small = best_time(lambda: split_sentences(small))
    t_big = best_time(lambda: split_sentences(big))
    assert t_big / max(t_small, 1e-4) < 10, (t_small, t_big)  # linear: ~4x


def test_strip_citations_leaves_the_claim():
    assert strip_citations("Vacation is 20 days [1, 2]. [hr/leave.md#3]") == "Vacation is 20 days."


# ---------------------------------------------------------------- deciding


def test_decide_prefers_support_then_contradiction_then_neutral():
    assert decide([(0.2, 0.7, 0.1), (0.9, 0.05, 0.05)], 0.5, 0.5) == (ENTAILED, 0.9, 1)
    assert decide([(0.2, 0.2, 0.6), (0.3, 0.6, 0.1)], 0.5, 0.5) == (CONTRADICTED, 0.6, 0)
    verdict, p, i = decide([(0.2, 0.7, 0.1), (0.4, 0.5, 0.1)], 0.5, 0.5)
    assert (verdict, i) == (NEUTRAL, 1) and p == pytest.approx(0.6)  # closest support, 1 - 0.4
    # thresholds are knobs: the same row flips with min_entail
    assert decide([(0.45, 0.5, 0.05)], 0.4, 0.5)[0] == ENTAILED


def test_policies():
    vs = [SentenceVerdict("A.", ENTAILED, 0.9, "c1"), SentenceVerdict("B.", NEUTRAL, 0.8, "c1")]
    assert apply_policy("A. B.", vs, "flag") == "A. B."
    assert apply_policy("A. B.", vs, "drop") == "A."
    assert apply_policy("A. B.", vs, "refuse") == NOT_SUPPORTED
    assert apply_policy("B.", vs[1:], "drop") == NOT_SUPPORTED  # nothing left to say
    assert apply_policy("A.", vs[:1], "refuse") == "A."  # all supported: untouched
    with pytest.raises(ValueError, match="flag, drop, refuse"):
        apply_policy("A.", vs, "maybe")


def test_verify_reports_the_deciding_chunk_and_summary():
    one, two = "Vacation is 20 days a year.", "Staff get 20 days of vacation."
    nli = Scripted({(one, "Vacation is 20 days."): (0.95, 0.03, 0.02),
                    (two, "Vacation is 30 days."): (0.05, 0.15, 0.8)})
    v = verify("Vacation is 20 days. Vacation is 30 days. The moon is cheese.", [("a#0", one), ("b#1", two)], nli)
    assert [(s.verdict, s.chunk) for s in v.sentences] == [(ENTAILED, "a#0"), (CONTRADICTED, "b#1"), (NEUTRAL, "a#0")]
    assert v.counts == {ENTAILED: 1, NEUTRAL: 1, CONTRADICTED: 1}
    assert not v.grounded and v.text.startswith("Vacation is 20 days.")
    assert v.summary().startswith("1/3 sentences supported")
    d = v.to_dict()
    assert d["sentences"][1] == {"sentence": "Vacation is 30 days.", "verdict": CONTRADICTED, "probability": 0.8,
                                 "chunk": "b#1", "missing": ["30"], "on_question": None}
    dropped = verify("Vacation is 20 days. The moon is cheese.", [("a#0", one)], nli, policy="drop")
    assert dropped.text == "Vacation is 20 days."


def test_fact_check_demotes_support_for_figures_and_names_no_chunk_states():
    nli = Scripted({("Sick leave is 10 days a year.", "Sick leave is 12 days a year."): (0.9, 0.05, 0.05),
                    ("Sick leave is 10 days a year.", "Sick leave is ten days a year."): (0.9, 0.05, 0.05),
                    ("Sick leave is 10 days a year.", "The CFO grants sick leave."): (0.9, 0.05, 0.05)})
    chunks = [("a#0", "Sick leave is 10 days a year.")]
    v = verify("Sick leave is 12 days a year. Sick leave is ten days a year. The CFO grants sick leave.", chunks, nli)
    assert [(s.verdict, s.missing) for s in v.sentences] == [(NEUTRAL, ("12",)), (ENTAILED, ()), (NEUTRAL, ("CFO",))]
    off = verify("Sick leave is 12 days a year.", chunks, nli, fact_check=False)
    assert off.sentences[0].verdict == ENTAILED  # the model alone was fooled


def test_a_grounded_quote_that_does_not_answer_the_question_is_not_supported():
    """#15: a quote is always grounded, so grounded alone cannot mean "answered"."""
    chunk = "Production deploys are approved by the release captain of the owning team."
    nli = Scripted({(chunk, chunk): (0.97, 0.02, 0.01)})
    strict = (0.3, 0.3, 0.6)  # min_support, max_missing, rescue_sem
    off = verify(chunk, [("d#0", chunk)], nli, question="How do I deploy to Heroku with a Procfile?", answerability=strict)
    assert off.grounded and off.answers is False and not off.supported
    assert "'heroku'" in off.off_question.lower() and "do not answer the question" in off.summary()
    assert off.sentences[0].on_question is False
    # The count says the same: a grounded line about something else is not counted as support.
    assert off.supported_sentences == 0 and off.summary().startswith("0/1 sentences supported, 1 grounded but not on")
    assert off.to_dict()["supported_sentences"] == 0
    # A heading copied from the source is structure: not a claim, not counted, and it cannot
    # make an off-question answer "answer" the question.
    nli2 = Scripted({(chunk, chunk): (0.97, 0.02, 0.01), (chunk, "Deploys"): (0.97, 0.02, 0.01)})
    headed = verify("## Deploys\n\n" + chunk, [("d#0", "# Deploys\n\n" + chunk)], nli2,
                    question="How do I deploy to Heroku with a Procfile?", answerability=strict)
    assert headed.answers is False and headed.summary().startswith("0/1 sentences supported")
    refused = verify(chunk, [("d#0", chunk)], nli, policy="refuse", question="How do I deploy to Heroku with a Procfile?",
                     answerability=strict)
    assert refused.text == NOT_SUPPORTED
    on = verify(chunk, [("d#0", chunk)], nli, policy="refuse", question="Who approves production deploys?",
                answerability=strict)
    assert on.answers is True and on.supported and on.text == chunk and on.sentences[0].on_question is True
    assert verify(chunk, [("d#0", chunk)], nli).answers is None  # no question: not judged


def test_without_chunks_every_sentence_is_unsupported():
    v = verify("Anything at all.", [], Scripted({}))
    assert [s.verdict for s in v.sentences] == [NEUTRAL] and v.sentences[0].chunk is None


# ---------------------------------------------------------------- wiring, with the shipped model


@pytest.fixture(scope="module")
def hr_engine():
    from microrag_engine.config import PRESETS
    from microrag_engine.engine import Engine, demo_corpus

    return Engine.from_paths([demo_corpus() / "hr"], PRESETS["default"])


@needs_models
def test_engine_flags_an_invented_sentence_from_a_real_llm_stream(llm_server, hr_engine):
    from microrag_engine.config import LLMConfig

    eng = hr_engine
    llm_server.script(sse(delta(content="Full-time employees receive 20 paid vacation days per calendar year. "),
                          delta(content="Every employee also gets a free company car.")))
    ans = eng.ask("how many vacation days do I get?", llm=LLMConfig(base_url=llm_server.url, backoff=0.0), verify=True)
    verdicts = [s.verdict for s in ans.verification.sentences]
    assert verdicts[0] == ENTAILED and verdicts[1] != ENTAILED
    assert ans.verification.sentences[0].chunk.startswith("leave-and-holidays.md#")


@needs_models
def test_refused_retrieval_is_not_verified(hr_engine):
    ans = hr_engine.ask("what is the boiling point of tungsten?", verify=True)
    assert ans.retrieval.refused and ans.verification is None
    assert ans.refused and ans.reason == ans.retrieval.reason != ""  # one contract: the gate's refusal


@needs_models
def test_every_refusal_path_sets_refused_and_a_reason(hr_engine, llm_server):
    """Gate, answerer, model and verification: whoever refuses, ``refused`` and ``reason`` say so."""
    from microrag_engine.config import LLMConfig, override
    from microrag_engine.types import NOT_IN_DOCUMENTS

    # The answerer: retrieval finds the page, but no passage reaches a support this strict.
    strict = override(hr_engine.settings, answer_min_support=0.99)
    eng = type(hr_engine)(strict, hr_engine.index, hr_engine.documents)
    ans = eng.ask("how many vacation days do I get?")
    assert ans.refused and not ans.retrieval.refused and ans.reason and ans.text.startswith(NOT_IN_DOCUMENTS)
    ok = hr_engine.ask("how many vacation days do I get?")
    assert not ok.refused and ok.reason == ""
    # The model: it said it has no answer.
    llm_server.script(sse(delta(content=NOT_IN_DOCUMENTS)))
    said = hr_engine.ask("how many vacation days do I get?", llm=LLMConfig(base_url=llm_server.url, backoff=0.0))
    assert said.refused and "model" in said.reason
    # ...but a reply that opens with the sentence and goes on says something: verified as any other.
    llm_server.script(sse(delta(content=NOT_IN_DOCUMENTS + " However, every employee gets a free company car.")))
    more = hr_engine.ask("how many vacation days do I get?", llm=LLMConfig(base_url=llm_server.url, backoff=0.0),
                         verify=True)
    assert not more.refused and more.verification is not None and not more.verification.supported
    # Verification: with the refuse policy, an invented answer is refused.
    refusing = type(hr_engine)(override(hr_engine.settings, verify_policy="refuse"), hr_engine.index, hr_engine.documents)
    llm_server.script(sse(delta(content="Every employee gets a free company car.")))
    checked = refusing.ask("how many vacation days do I get?", llm=LLMConfig(base_url=llm_server.url, backoff=0.0),
                           verify=True)
    assert checked.refused and checked.reason.startswith("verification:") and checked.text == NOT_SUPPORTED


@needs_models
def test_cli_ask_verify_marks_each_sentence():
    out = run_cli("ask", "how many vacation days do I get?", "--verify", "--json")
    assert out.returncode == 0, out.stderr
    v = json.loads(out.stdout)["verification"]
    assert v["sentences"] and {s["verdict"] for s in v["sentences"]} <= {ENTAILED, NEUTRAL, CONTRADICTED}
    # the extractive answer quotes its sources, so every sentence is supported
    assert v["grounded"] is True
    text = run_cli("ask", "how many vacation days do I get?", "--verify")
    assert text.returncode == 0 and "Verification: " in text.stdout and "✓ supported" in text.stdout


@needs_models
def test_cli_verify_json_shape_and_exit_codes(tmp_path):
    ctx = tmp_path / "ctx.txt"
    ctx.write_text("Full-time employees receive 20 paid vacation days per calendar year.\n\n"
                   "Passwords expire every 180 days. You cannot reuse your last 10 passwords.\n")
    answer = "Employees get 20 paid vacation days a year. [1] Passwords never expire. The cafeteria serves sushi on Fridays."
    out = run_cli("verify", "--context", str(ctx), "--answer", answer, "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [set(r) for r in rows] == [{"sentence", "verdict", "probability", "chunk", "on_question"}] * 3
    assert rows[0]["verdict"] == ENTAILED and rows[0]["chunk"] == 1 and rows[0]["on_question"] is None
    assert rows[1]["verdict"] != ENTAILED and rows[2]["verdict"] != ENTAILED
    assert all(0.0 <= r["probability"] <= 1.0 for r in rows)
    refused = run_cli("verify", "--context", str(ctx), "--answer", answer, "--policy", "refuse")
    assert refused.returncode == 1 and NOT_SUPPORTED in refused.stdout
    # A faithful quote, asked about something the context never mentions: grounded, not an answer.
    quote = "Full-time employees receive 20 paid vacation days per calendar year."
    off = run_cli("verify", "--context", str(ctx), "--answer", quote, "--question",
                  "Does the company pay for a gym membership stipend?", "--policy", "refuse")
    assert off.returncode == 1 and "do not answer the question" in off.stdout and NOT_SUPPORTED in off.stdout
    on = run_cli("verify", "--context", str(ctx), "--answer", quote, "--question", "How many vacation days do I get?",
                 "--policy", "refuse")
    assert on.returncode == 0 and "does not address" not in on.stdout


def test_cli_verify_bad_input_is_one_line(tmp_path):
    out = run_cli("verify", "--context", "/no/such/file", "--answer", "x")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--context" in out.stderr
    assert "Traceback" not in out.stderr
    (tmp_path / "utf16.txt").write_bytes("chunk".encode("utf-16"))
    out = run_cli("verify", "--context", str(tmp_path / "utf16.txt"), "--answer", "x")
    assert out.returncode == 2 and "UTF-8" in out.stderr and "Traceback" not in out.stderr
    bad = tmp_path / "model"
    bad.mkdir()
    (bad / "config.json").write_text("{bad")
    (tmp_path / "ctx.txt").write_text("some chunk")
    out = run_cli("verify", "--context", str(tmp_path / "ctx.txt"), "--answer", "x", "--nli", str(bad))
    assert out.returncode == 2 and "cannot load the model" in out.stderr and "Traceback" not in out.stderr


def test_copy_shortcut_needs_whole_words():
    from microrag_engine.verify.nli import NLIModel

    class Stub(NLIModel):
        def __init__(self):
            self.pairs_per_claim, self.min_entail, self.min_contra = 4, 0.5, 0.5

        def predict(self, pairs):
            import numpy as np

            return np.tile([0.1, 0.8, 0.1], (len(pairs), 1)).astype("float32")

    v = verify("The maximum is 10 [1]. No. Retries are capped at 10.",
               [("a#1", "The maximum is 100. Retries are capped at 10.")], Stub())
    assert [s.verdict for s in v.sentences] == [NEUTRAL, NEUTRAL, ENTAILED]
