"""What the answer-time insider defences (#19) cost and how often they fire on clean questions.

    python benchmarks/insider_latency.py     # ~5 min; needs the Python docs (scripts/install-pydoc.sh)

For each question of the handbook and Python-docs QA dev sets and of HotpotQA-100 (no
poison anywhere), in one process: retrieval with the restatement hold off and on, and
the conflict check, each timed per question (best of 3, CPU-independent of the model
server: no LLM). Prints and writes ``benchmarks/results/insider.md`` (+ .json): the time
added per question (p50 / p99), questions with a passage held back, questions with a
(false) conflict.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np

from microrag_engine import Engine, override, preset
from microrag_engine.engine import demo_corpus
from microrag_engine.eval.qa import load_qa
from microrag_engine.store import open_store
from microrag_engine.types import Document

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
OUT = ROOT / "benchmarks" / "results"
PYDOC_IX = Path(os.environ.get("MICRORAG_QA_CACHE", Path.home() / ".cache" / "microrag" / "qa")) / "pydoc-ix"


def timed(fn, repeats: int = 3):
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best * 1000, out


def measure(name: str, eng: Engine, questions: list[str]) -> dict:
    off = Engine.__new__(Engine)
    off.__dict__ = {**eng.__dict__, "settings": override(eng.settings, hold_mimics=False, conflicts=False)}
    added, held, conflicted = [], 0, 0
    eng.retrieve(questions[0])
    eng.conflicts(eng.retrieve(questions[0]))  # the NLI model loads once, outside the timings
    for q in questions:
        t_off, _ = timed(lambda q=q: off.retrieve(q))
        t_on, r = timed(lambda q=q: eng.retrieve(q))
        t_conf, (found, _) = timed(lambda r=r: eng.conflicts(r))
        added.append(t_on - t_off + t_conf)
        held += bool(r.held or r.restating)
        conflicted += bool(found)
    a = np.array(added)
    return {"set": name, "questions": len(questions), "held_back": held, "conflicts": conflicted,
            "added_ms_p50": round(float(np.median(a)), 1), "added_ms_p99": round(float(np.percentile(a, 99)), 1)}


def main() -> None:
    logging.disable(logging.WARNING)
    s = preset("default")
    rows = [measure("handbook QA", Engine.from_paths([demo_corpus()], s),
                    [i.question for i in load_qa(ROOT / "benchmarks" / "qa" / "handbook.jsonl")])]
    if PYDOC_IX.is_dir():
        rows.append(measure("Python-docs QA", Engine.from_store(open_store(PYDOC_IX), s, save_derived=False),
                            [i.question for i in load_qa(ROOT / "benchmarks" / "qa" / "python-docs.jsonl")]))
    hp = SHARED / "datasets" / "hotpotqa-100"
    if hp.is_dir():
        corpus = json.loads((hp / "hotpotqa_train_corpus.json").read_text())
        docs = [Document(f"{i:04d}.md", f"# {t}\n\n" + "".join(p)) for i, (t, p) in enumerate(corpus.items())]
        qs = [q["question"] for q in json.loads((hp / "hotpotqa_train.json").read_text())]
        rows.append(measure("HotpotQA-100", Engine.from_documents(docs, s), qs))
    lines = ["| questions (no poison) | n | passages held back | conflicts shown (false) | time added p50 | p99 |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['set']} | {r['questions']} | {r['held_back']} ({r['held_back'] / r['questions']:.1%}) | "
                     f"{r['conflicts']} ({r['conflicts'] / r['questions']:.1%}) | {r['added_ms_p50']} ms | {r['added_ms_p99']} ms |")
    text = ("# Answer-time insider defences on clean questions: false alarms and time added\n\n" + "\n".join(lines)
            + f"\n\nTime added = retrieval with the restatement hold minus without it, plus the conflict check (shipped NLI "
              f"model), best of 3 per question, one process, no LLM. {time.strftime('%Y-%m-%d')}, "
              "`python benchmarks/insider_latency.py`.\n")
    (OUT / "insider.md").write_text(text)
    (OUT / "insider.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(text)


if __name__ == "__main__":
    main()
