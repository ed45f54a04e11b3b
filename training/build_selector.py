"""Train the answer selector: which candidate passage of the retrieved chunks answers the question.

    .venv/bin/python training/build_selector.py     # ~8 min on 2 cores with the QA indexes cached

Data: the answerable questions of the QA *dev* sets (``benchmarks/qa_report.py`` SETS: the
bundled handbook and the zoo's dev corpora flask, git, django, rust-book, apache2 and
cryptography, written by readers of the pages for this project; never the test or outside
sets; python-docs is left out for its 20-minute index). Each question is retrieved and cut into candidate passages
exactly as the answerer does (``generate.score_units``); a passage is positive when it
holds every fact group of the question. Model: a conditional logit (softmax over one
question's candidates) on ``generate.FEATURES``, fitted with L-BFGS and an L2 penalty.
It is scored leave-one-set-out against the hand-set score it replaces (top-1: the best
passage holds the facts), then fitted on every set and written to
``src/microrag_engine/models/selector/weights.json`` (a few floats: no int8 question).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import qa_report  # noqa: E402

from microrag_engine import preset  # noqa: E402
from microrag_engine.eval.qa import fact_present, load_qa  # noqa: E402
from microrag_engine.generate import FEATURES, _join, score_units  # noqa: E402

SETS = [n for n, role in qa_report.SETS.items() if role == "dev" and n != "python-docs"]  # python-docs: 20 min to index
L2 = 1.0
OUT = ROOT / "src" / "microrag_engine" / "models" / "selector" / "weights.json"


def groups(names: list[str]) -> dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Per set: (features, labels, the hand-set score) of each question with a positive and a negative."""
    out: dict[str, list] = {}
    for name, engine, _, _ in qa_report.engines(names, preset("default")):
        rows = []
        for item in load_qa(qa_report.QA / f"{name}.jsonl"):
            if not item.answerable:
                continue
            r = engine.with_context(engine.retrieve(item.question))
            if r.refused or not r.hits:
                continue
            sc = score_units(item.question, r, engine.index.embedder, r.weight)
            texts = [_join([sc.units[k] for k in span]) for span in sc.spans]
            y = np.array([all(fact_present(t, tuple(g)) for g in item.facts) for t in texts])
            if y.any() and not y.all():
                rows.append((sc.features.astype(np.float64), y, sc.total))
        out[name] = rows
        print(f"{name}: {len(rows)} questions with a positive passage", flush=True)
    return out


def fit(rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> np.ndarray:
    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        total, grad = L2 * float(w @ w), 2 * L2 * w
        for x, y, _ in rows:
            z = x @ w
            z -= z.max()
            p = np.exp(z) / np.exp(z).sum()
            pos = p[y].sum()
            total -= float(np.log(pos + 1e-12))
            # d/dw -log sum_pos p = E_p[x] - E_{p | pos}[x]
            grad += p @ x - (p[y] / pos) @ x[y]
        return total, grad

    return minimize(loss, np.zeros(len(FEATURES)), jac=True, method="L-BFGS-B").x


def top1(rows, score) -> float:
    return float(np.mean([y[int(np.argmax(score(x, t)))] for x, y, t in rows])) if rows else 0.0


def main() -> None:
    data = groups(SETS)
    report = {}
    for held in SETS:
        w = fit([r for n in SETS if n != held for r in data[n]])
        report[held] = {"questions": len(data[held]), "hand-set top1": round(top1(data[held], lambda x, t: t), 3),
                        "selector top1 (trained without this set)": round(top1(data[held], lambda x, t, w=w: x @ w), 3)}
        print(held, report[held], flush=True)
    w = fit([r for n in SETS for r in data[n]])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({
        "features": list(FEATURES), "weights": [round(float(v), 6) for v in w],
        "trained_on": {n: len(data[n]) for n in SETS}, "leave_one_set_out": report, "l2": L2,
        "command": "python training/build_selector.py"}, indent=1) + "\n")
    print(f"wrote {OUT}: " + ", ".join(f"{f} {v:+.2f}" for f, v in zip(FEATURES, w)))


if __name__ == "__main__":
    main()
