"""screen.collision: a document written to answer everything is found by the probe questions;
a genuine page, however long, wins questions on its own subject only."""

from __future__ import annotations

import numpy as np

from conftest import needs_models
from microrag_engine import Engine, preset
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


def _engine(extra: Document) -> Engine:
    eng = Engine.from_documents(load_documents([demo_corpus()]) + [extra], preset("default"))
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
def test_unrelated_means_pairwise_far_apart():
    qs = ["How do I reset my password?", "How can I change my password?", "What is the capital of Australia?"]
    eng = _engine(Document("@m/x.md", "x"))
    v = ProbeVectors(eng.index.embedder)(qs)
    assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-3)
    assert mutually_unrelated(qs, v) == [qs[0], qs[2]]  # the two password questions count once
