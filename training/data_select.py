"""Training groups for the answer cross-encoder: one question, its candidate passages, which answer.

    .venv/bin/python training/data_select.py     # ~4 min with the QA indexes cached; writes build/select/*.jsonl

Two sources, both licence-clean and neither a test or outside set:

* ``build/qa-mined.jsonl`` (``training/mine_qa.py``): questions the zoo's dev corpora ask and
  answer themselves (question headings, definition-list terms), with the same page's other
  answers as negatives;
* the answerable questions of the QA dev sets whose pages may train shipped weights (the
  bundled handbook, written here; flask, BSD-3-Clause): retrieved and cut into candidate
  passages exactly as the answerer does (``generate.score_units``), a passage positive when it
  holds every fact group. Their unanswerable questions give groups with no positive: the
  model must learn to score none of them high.

git's QA set (GPL-2.0 pages) is kept out of training and written apart as the validation
groups (``build/select/val-git.jsonl``) that pick the blend weight (the last epoch is kept).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import qa_report  # noqa: E402

from microrag_engine import Engine, preset  # noqa: E402
from microrag_engine.eval.qa import fact_present, load_qa  # noqa: E402
from microrag_engine.generate import _join, score_units  # noqa: E402

MINED = ROOT / "build" / "qa-mined.jsonl"
OUT = ROOT / "build" / "select"
TRAIN_SETS = ("handbook", "flask")
VAL_SETS = ("git",)


def answerer_groups(name: str, engine: Engine) -> list[dict]:
    """Every question of the set with the candidates the answerer scores, in its order."""
    out = []
    for item in load_qa(qa_report.QA / f"{name}.jsonl"):
        r = engine.with_context(engine.retrieve(item.question))
        if r.refused or not r.hits:
            continue
        sc = score_units(item.question, r, engine.index.embedder, r.weight, learned=True)
        texts = [_join([sc.units[k] for k in span]) for span in sc.spans]  # the passage, not its heading
        labels = [bool(item.answerable) and all(fact_present(t, tuple(g)) for g in item.facts) for t in texts]
        out.append({"source": name, "question": item.question, "answerable": bool(item.answerable),
                    "passages": sc.shown, "labels": labels, "linear": [float(v) for v in sc.total]})
    return out


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    train = []
    for line in MINED.read_text(encoding="utf-8").splitlines():
        it = json.loads(line)
        train.append({"source": it["corpus"], "question": it["question"], "answerable": True,
                      "passages": [it["positive"], *it["negatives"]], "labels": [True] + [False] * len(it["negatives"])})
    for name, engine, _, _ in qa_report.engines(list(TRAIN_SETS + VAL_SETS), preset("default")):
        groups = answerer_groups(name, engine)
        print(name, len(groups), "groups,", sum(any(g["labels"]) for g in groups), "with a positive", flush=True)
        if name in VAL_SETS:
            (OUT / f"val-{name}.jsonl").write_text("".join(json.dumps(g) + "\n" for g in groups), encoding="utf-8")
        else:
            train += groups
    (OUT / "train.jsonl").write_text("".join(json.dumps(g) + "\n" for g in train), encoding="utf-8")
    print(f"wrote {OUT}/train.jsonl: {len(train)} groups, {sum(len(g['passages']) for g in train)} pairs")


if __name__ == "__main__":
    main()
