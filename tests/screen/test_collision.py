"""screen.collision: a document written to answer everything is found by the probe questions;
a genuine page, however long, wins questions on its own subject only."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needs_models
from microrag_engine import Engine, preset
from microrag_engine.config import override
from microrag_engine.engine import demo_corpus
from microrag_engine.load import load_documents
from microrag_engine.screen.collision import ProbeVectors, generic_probes, mutually_unrelated, probe
from microrag_engine.types import Document

# One short, plausible answer per subject: nothing repeated (no stuffing), no instruction, no copy.
EVERYTHING = """# Quick answers

Canberra is the capital of Australia. Leonardo da Vinci painted the Mona Lisa.
Photosynthesis turns light, water and carbon dioxide into sugar in the leaves of plants.
Vaccines train the immune system by showing it a harmless piece of a pathogen.
An index fund tracks a stock index such as the S&P 500 at a low fee.
Boil an egg for seven minutes for a firm yolk. Sourdough bread needs a starter and a long rise.
Solar panels generate electricity when light frees electrons in silicon cells.
Antibiotics kill bacteria by breaking their cell walls or their protein factories.
The Second World War ended in 1945. Kilimanjaro is the tallest mountain in Africa.
Bees make honey from nectar that they evaporate in the hive."""


def _engine(extra: Document, **knobs) -> Engine:
    eng = Engine.from_documents(load_documents([demo_corpus()]) + [extra], override(preset("default"), **knobs))
    eng.relabel(eng.index.chunks.docs() == extra.path, "_quarantine")  # probed before it goes live
    return eng


@needs_models
def test_a_document_that_answers_everything_sweeps_unrelated_probes():
    eng = _engine(Document("@m/quick.md", EVERYTHING))
    found = probe(eng, "@m/quick.md", list(generic_probes()), ProbeVectors(eng.index.embedder))
    assert found.sweeping, found
    assert found.reason().startswith("collision:")


@needs_models
def test_a_genuine_page_wins_only_its_own_subject():
    page = ("# Printer setup\n\nTo install the office printer, open Settings, choose Printers and add floor-3. "
            "If printing fails, restart the print spooler and check that the toner cartridge is seated. "
            "Toner and paper are in the supply room next to the kitchen.")
    eng = _engine(Document("@m/printer.md", page))
    found = probe(eng, "@m/printer.md", list(generic_probes()), ProbeVectors(eng.index.embedder))
    assert not found.sweeping, found


@needs_models
def test_above_the_ann_threshold_a_probe_ranks_as_a_query_does(monkeypatch):
    """Above ``ann_threshold`` each probe ranks the live chunks' first pass (a handful here)
    plus the document's own chunks, never every chunk's keyword score: the sweeping page is
    still held, the genuine one still passes."""
    pytest.importorskip("faiss")
    page = ("# Printer setup\n\nTo install the office printer, open Settings, choose Printers and add floor-3. "
            "If printing fails, restart the print spooler and check that the toner cartridge is seated.")
    for doc, text, sweeps in [("@m/quick.md", EVERYTHING, True), ("@m/printer.md", page, False)]:
        eng = _engine(Document(doc, text), ann_threshold=10, first_pass=4)
        assert eng.index.ann is not None
        monkeypatch.setattr(eng.index, "kw_scores", lambda q: pytest.fail("every chunk scored for a probe"))
        found = probe(eng, doc, list(generic_probes()), ProbeVectors(eng.index.embedder))
        assert found.sweeping is sweeps, found


@needs_models
def test_unrelated_means_pairwise_far_apart():
    qs = ["How do I reset my password?", "How can I change my password?", "What is the capital of Australia?"]
    eng = _engine(Document("@m/x.md", "x"))
    v = ProbeVectors(eng.index.embedder)(qs)
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-3)
    assert mutually_unrelated(qs, v) == [qs[0], qs[2]]  # the two password questions count once


def test_a_databases_live_first_pass_is_kept_a_while_per_probe_and_clearance():
    """``LivePasses`` asks the database once per probe and clearance while its pass is young,
    again once it is older than ``max_age`` or the store changes."""
    from microrag_engine.screen.collision import LivePasses
    from microrag_engine.store.base import Candidates
    from microrag_engine.types import Chunk

    class Counting:
        def __init__(self) -> None:
            self.asked: list[tuple[str, list[str]]] = []

        def search(self, query, qvec, labels, n=100):
            self.asked.append((query, labels))
            return Candidates([(Chunk(f"d.md#{len(self.asked)}", "d.md", 0, 0, 1, "x"), 1.0, 0.5)], 2.0, (0.0, -0.25))

    store, other = Counting(), Counting()
    passes, v = LivePasses(max_age=3600), np.zeros(4, dtype=np.float32)
    assert passes(store, "q1", v, ["public"], 100) == ([("d.md#1", "d.md")], (0.0, -0.25))
    assert passes(store, "q1", v, ["public"], 100) == ([("d.md#1", "d.md")], (0.0, -0.25))  # kept
    passes(store, "q1", v, ["public", "hr"], 100)  # another clearance: asked
    passes(other, "q1", v, ["public"], 100)  # another store: asked, and the first one's passes dropped
    assert len(store.asked) == 2 and len(other.asked) == 1
    stale = LivePasses(max_age=0)
    stale(store, "q1", v, ["public"], 100)
    stale(store, "q1", v, ["public"], 100)
    assert len(store.asked) == 4
