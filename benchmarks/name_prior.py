"""The name prior's weight (``w_name``, retrieve/names.py): hit@4 of every QA set at each weight.

    python benchmarks/name_prior.py            # every set (the zoo indexes of qa_report.py, built once)
    python benchmarks/name_prior.py --sets git flask

The weight is chosen on the dev sets (most pages found in the top 4, summed over them);
the test and outside sets are printed beside it, measured and never used to choose.
Writes benchmarks/results/name-prior.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from hostinfo import machine  # noqa: E402
from qa_report import QA, SETS, engines  # noqa: E402

from microrag_engine import override, preset  # noqa: E402
from microrag_engine.eval.qa import load_qa  # noqa: E402

WEIGHTS = (0.0, 0.05, 0.1, 0.15, 0.2)
RESULTS = ROOT / "benchmarks" / "results" / "name-prior.md"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    args = ap.parse_args()
    base = preset("default")
    rows: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}
    ms: dict[str, float] = {}
    for name, engine, _, _ in engines(args.sets, base):
        items = [i for i in load_qa(QA / f"{name}.jsonl") if i.answerable]
        sizes[name], rows[name] = len(items), []
        for w in WEIGHTS:
            engine.settings = override(base, w_name=w)
            t = time.perf_counter()
            found = 0
            for it in items:
                pages = list(dict.fromkeys(h.chunk.doc for h in engine.retrieve(it.question).hits))
                found += any(p in it.docs for p in pages[:4])
            rows[name].append(found)
            if w == base.w_name:
                ms[name] = 1000 * (time.perf_counter() - t) / len(items)
        print(name, SETS[name], dict(zip(WEIGHTS, rows[name])), flush=True)
    dev = [n for n in rows if SETS[n] == "dev"]
    total = [sum(rows[n][i] for n in dev) for i in range(len(WEIGHTS))]
    best = WEIGHTS[int(np.argmax(total))] if dev else None
    head = "| set | role | questions | " + " | ".join(f"w_name {w}" for w in WEIGHTS) + " | retrieve ms at the default |"
    lines = ["# The name prior's weight: hit@4 per QA set", "",
             f"`python benchmarks/name_prior.py --sets {' '.join(rows)}`, on {machine()}.", "",
             "Pages found in the top 4 (hit@4) at each weight of `w_name` (retrieve/names.py), every other",
             f"setting the default (`name_rare` {base.name_rare}). The default is chosen on the dev sets only;",
             "the test and outside sets are measured beside it and never used to choose.", "",
             head, "|" + "---|" * (len(WEIGHTS) + 4)]
    for n in rows:
        cells = " | ".join(f"{v / sizes[n]:.3f}" for v in rows[n])
        lines.append(f"| {n} | {SETS[n]} | {sizes[n]} | {cells} | {ms[n]:.1f} |")
    if dev:
        lines.append(f"| dev sets summed | dev | {sum(sizes[n] for n in dev)} | "
                     + " | ".join(str(t) for t in total) + " | |")
        lines += ["", f"Most pages found on the dev sets at `w_name` {best} (shipped: {base.w_name})."]
    RESULTS.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
