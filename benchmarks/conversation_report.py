"""Follow-up questions: hit@4 with and without the conversation's history.

    python benchmarks/conversation_report.py                   # both sets (~1 min; the Python docs index: qa_report.py builds it once)
    python benchmarks/conversation_report.py --sets handbook   # the demo handbook only (~30 s)
    LLM_BASE_URL=... python benchmarks/conversation_report.py --llm   # adds the LLM rewrite

Sets: ``benchmarks/conversations/*.jsonl`` (written by hand by a subagent that read the
documents and never saw the method; see its README). A follow-up turn *hits* when one of
its documents is among the distinct documents of the top 4 chunks retrieved with the
production settings (gate and diversity cap on: a refusal is a miss). Methods, each over
the same engine in one run:

* ``last message``: the follow-up alone (no history; what a client that sends one message gets);
* ``all user turns``: every user turn so far, joined (the naive use of history);
* ``previous + last``: always the user turn before, then the follow-up;
* ``condense``: ``retrieve.conversation.condense``, the default without an LLM;
* ``llm rewrite``: ``retrieve.conversation.rewrite`` with the model at LLM_BASE_URL (``--llm``).

Writes benchmarks/results/conversation.md and .json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from qa_report import engines  # noqa: E402

from microrag_engine import preset  # noqa: E402
from microrag_engine.config import LLMConfig  # noqa: E402
from microrag_engine.retrieve.conversation import CACHE, condense, rewrite  # noqa: E402
from microrag_engine.types import Turn  # noqa: E402

SETS = ROOT / "benchmarks" / "conversations"
RESULTS = ROOT / "benchmarks" / "results"
K = 4


def methods(llm: LLMConfig | None) -> dict[str, Callable[[list[str]], str]]:
    def turns(said: list[str]) -> list[Turn]:
        return [Turn("user", s) for s in said]

    out: dict[str, Callable[[list[str]], str]] = {
        "last message": lambda said: said[-1],
        "all user turns": lambda said: " ".join(said),
        "previous + last": lambda said: " ".join(said[-2:]),
        "condense": lambda said: condense(turns(said)).query,
    }
    if llm is not None:
        out["llm rewrite"] = lambda said: rewrite(turns(said), llm).query
    return out


def hit(engine, query: str, gold: list[str]) -> bool:
    r = engine.retrieve(query, safeguards=True)
    docs: list[str] = []
    for h in r.hits:
        if h.chunk.doc not in docs:
            docs.append(h.chunk.doc)
    return bool(set(docs[:K]) & set(gold))


def run(names: list[str], llm: LLMConfig | None) -> dict:
    settings = preset("default")
    out: dict = {"k": K, "sets": {}}
    for name, engine, _, how in engines(names, settings):
        exchanges = [json.loads(x) for x in (SETS / f"{name}.jsonl").read_text().splitlines() if x.strip()]
        score: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
        took: dict[str, float] = defaultdict(float)
        firsts = []
        for ex in exchanges:
            said: list[str] = []
            for turn in ex["turns"]:
                said.append(turn["user"])
                if not turn.get("follow_up"):
                    firsts.append(hit(engine, turn["user"], turn["docs"]))
                    continue
                for method, make in methods(llm).items():
                    t = time.perf_counter()
                    query = make(list(said))
                    took[method] += time.perf_counter() - t
                    ok = hit(engine, query, turn["docs"])
                    score[method]["all"].append(ok)
                    score[method][turn["kind"]].append(ok)
        n = len(score["last message"]["all"])
        out["sets"][name] = {
            "corpus": how, "exchanges": len(exchanges), "follow_ups": n,
            "first_turn_hit": sum(firsts) / len(firsts),
            "methods": {m: {kind: {"hit": sum(v) / len(v), "n": len(v)} for kind, v in kinds.items()}
                        | {"ms_per_query": 1000 * took[m] / n} for m, kinds in score.items()},
        }
        print(name, {m: round(r["all"]["hit"], 3) for m, r in out["sets"][name]["methods"].items()}, flush=True)
    out["llm"] = {"model": llm.model, "cached": len(CACHE.items)} if llm else None
    return out


def table(res: dict) -> str:
    lines = []
    for name, s in res["sets"].items():
        lines += [f"### {name} ({s['exchanges']} exchanges, {s['follow_ups']} follow-up turns; {s['corpus']})", "",
                  f"First turns (no history to use): hit@{res['k']} {s['first_turn_hit']:.3f}.", "",
                  f"| method | follow-ups hit@{res['k']} | elliptical | partial | topic switch | ms per query |",
                  "|---|---|---|---|---|---|"]
        for m, r in s["methods"].items():
            cells = [f"{r[k]['hit']:.3f} ({round(r[k]['hit'] * r[k]['n'])}/{r[k]['n']})" if k in r else "-"
                     for k in ("all", "elliptical", "partial", "switch")]
            lines.append(f"| {m} | " + " | ".join(cells) + f" | {r['ms_per_query']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=["handbook", "python-docs"], choices=["handbook", "python-docs"])
    ap.add_argument("--llm", action="store_true", help="add the LLM rewrite (LLM_BASE_URL)")
    args = ap.parse_args()
    llm = LLMConfig.from_env() if args.llm else None
    if args.llm and llm is None:
        sys.exit("--llm needs LLM_BASE_URL")
    res = run(args.sets, llm)
    cmd = "python benchmarks/conversation_report.py" + (" --sets " + " ".join(args.sets) if args.sets != ["handbook", "python-docs"]
                                                         else "") + (" --llm" if llm else "")
    md = ["# Conversations: follow-up retrieval with and without history", "",
          f"Measured with `{cmd}` ({time.strftime('%Y-%m-%d')}). A follow-up hits when one of its documents is among the "
          f"distinct documents of the top {res['k']} chunks (production settings: a refusal is a miss). "
          "Sets: `benchmarks/conversations/` (by hand, blind to the method).", "", table(res)]
    if llm:
        md.append(f"LLM rewrite: model `{llm.model}`; rewrites cached: {res['llm']['cached']}.")
    if args.sets == ["handbook", "python-docs"] or llm:
        RESULTS.mkdir(exist_ok=True)
        suffix = "-llm" if llm else ""
        (RESULTS / f"conversation{suffix}.md").write_text("\n".join(md) + "\n")
        (RESULTS / f"conversation{suffix}.json").write_text(json.dumps(res, indent=1) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
