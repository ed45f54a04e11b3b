"""eval/qa.py and ``microrag eval --qa``: the QA format, fact matching, the figures, the handbook set.

The committed handbook figures (benchmarks/expected/qa-handbook.json) are checked live:
the set is small enough to answer in a test. The Python-docs set needs its corpus
(scripts/install-pydoc.sh) and ~15 min of indexing, so it runs by hand only.
"""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, needs_models, run_cli
from microrag_engine.errors import CorpusError
from microrag_engine.eval.qa import QAItem, QAResult, fact_present, is_refusal, load_qa, summarise
from microrag_engine.types import NOT_IN_DOCUMENTS

EXPECTED = ROOT / "benchmarks" / "expected"


def test_facts_match_whole_tokens_case_and_space_insensitively():
    assert fact_present("Employees get 20 paid\n  vacation DAYS.", ("20 paid vacation days",))
    assert fact_present("You get 20 days.", ("day",))  # a word may go on
    assert not fact_present("within 15 minutes", ("5 minutes",))  # not the tail of a number
    assert not fact_present("port 8443", ("844",))  # nor a number's head
    assert not fact_present("it expired", ("pired",))
    assert fact_present("use lru_cache(maxsize=None)", ("cache(", "nothing"))


@pytest.mark.parametrize("line,err", [
    ('{"id": "a", "question": "q", "kind": "howto", "docs": ["d"]}', "non-empty 'facts'"),
    ('{"id": "a", "question": "q", "kind": "guess", "docs": ["d"], "facts": [["x"]]}', "kind 'guess'"),
    ('{"question": "q"}', "not a QA record"),
    ("not json", "not a QA record"),
])
def test_bad_qa_files_name_the_line(tmp_path, line, err):
    f = tmp_path / "qa.jsonl"
    f.write_text('{"id": "ok", "question": "q", "kind": "unanswerable", "answerable": false}\n' + line + "\n")
    with pytest.raises(CorpusError, match=f"qa.jsonl:2: .*{err}"):
        load_qa(f)


def test_summary_counts_refusals_on_both_sides():
    ans = QAItem("a", "q", "howto", ("p.md",), (("x",), ("y",)))
    una = QAItem("u", "q", "unanswerable")
    results = [QAResult(ans, ["p.md"], "x only", False, [True, False], 0.01),
               QAResult(ans, ["z.md"], NOT_IN_DOCUMENTS, True, [False, False], 0.03),
               QAResult(una, [], NOT_IN_DOCUMENTS + " (the documents do not mention 'zork')", True, [], 0.02)]
    s = summarise(results)
    assert s["hit@4"] == 0.5 and s["fact_recall"] == 0.25 and s["all_facts"] == 0.0
    assert s["refused_unanswerable"] == 1.0 and s["false_refusals"] == 0.5
    assert s["answer_ms_p50"] == pytest.approx(20.0)
    assert is_refusal(results[2].answer) and not is_refusal("The documents say that form covers leave.")


def test_the_committed_qa_sets_are_well_formed():
    py, hb = load_qa(ROOT / "benchmarks/qa/python-docs.jsonl"), load_qa(ROOT / "benchmarks/qa/handbook.jsonl")
    assert sum(i.answerable for i in py) >= 60 and sum(not i.answerable for i in py) >= 15
    assert sum(i.answerable for i in hb) >= 20 and sum(not i.answerable for i in hb) >= 5



@pytest.mark.parametrize("name", ["flask", "git", "django", "rust-book", "apache2", "cryptography", "postgresql", "sqlite"])
def test_the_public_docs_sets_are_large_enough_and_name_their_pages(name):
    """The zoo's QA sets (benchmarks/qa_report.py SETS): 60+ answerable and 20+ in-domain
    unanswerable questions each, every answerable one naming its pages and its facts."""
    items = load_qa(ROOT / f"benchmarks/qa/{name}.jsonl")
    answerable = [i for i in items if i.answerable]
    assert len(answerable) >= 60 and len(items) - len(answerable) >= 20
    assert all(i.docs and i.facts and all(group for group in i.facts) for i in answerable)
    assert len({i.question for i in items}) == len(items)


@needs_models
def test_eval_qa_on_the_handbook_reproduces_the_committed_figures(tmp_path):
    expected = json.loads((EXPECTED / "qa-handbook.json").read_text())
    out = tmp_path / "qa.json"
    proc = run_cli("eval", "--qa", str(ROOT / "benchmarks/qa/handbook.jsonl"), "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "| handbook |" in proc.stdout and "false refusals" in proc.stdout
    got = json.loads(out.read_text())["summary"]
    # Rates over 51 + 12 questions: one question moves a rate by 0.02-0.08; the answerer is
    # deterministic on one machine, and int8 embeddings differ slightly between CPUs.
    for key in ("hit@4", "fact_recall", "refused_unanswerable", "false_refusals"):
        assert got[key] == pytest.approx(expected["summary"][key], abs=0.09), key


def test_eval_options_belong_to_their_mode(tmp_path):
    proc = run_cli("eval", "--qa", "x.jsonl", "--dynamic")
    assert proc.returncode == 2 and "belong to --dataset" in proc.stderr and proc.stderr.count("\n") == 1
    proc = run_cli("eval", "--dataset", "x", "--llm")
    assert proc.returncode == 2 and "belong to --qa" in proc.stderr
