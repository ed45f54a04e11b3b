"""``microrag retrieve | ask | rank`` - questions against an index, the demo or a corpus.

``retrieve`` prints the ranked chunks with both legs' scores (no LLM), ``ask`` a
cited answer (the LLM at ``LLM_BASE_URL``, else the extractive answerer), ``rank``
the ranking protocol: one query per stdin line -> ``OK: ids`` or ``REFUSE``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from ..augment import citation
from ..config import LLMConfig
from ..errors import MicroRAGError
from ..generate import is_refusal
from ..types import Hit, Retrieval
from .options import add_corpus, add_index, add_output, add_preset, add_retrieval, add_verification, diag, engine_for, filter_of, labels_of
from .verify import verdict_line


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("retrieve", help="show the ranked chunks for a query (no LLM)")
    r.add_argument("query", help="the question, in quotes")
    a = sub.add_parser("ask", help="answer a question with citations")
    a.add_argument("query", help="the question, in quotes")
    a.add_argument("--verify", action="store_true", help="check every answer sentence against the sources (NLI)")
    k = sub.add_parser("rank", help="ranking protocol: one query per stdin line -> 'OK: ids' or 'REFUSE'")
    for p, run in ((r, cmd_retrieve), (a, cmd_ask), (k, cmd_rank)):
        add_corpus(p)
        add_index(p)
        add_preset(p)
        add_retrieval(p)
        if p is a:
            add_verification(p)
        add_output(p, json=p is not k)  # rank's protocol is its output
        p.set_defaults(run=run)


# ---------------------------------------------------------------- output


def _preview(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def format_hit(hit: Hit) -> str:
    """The seed's line: ``[0.846 kw=1.00 em=0.69] doc · chunk 0`` and a preview."""
    page = f" · p. {hit.chunk.page}" if hit.chunk.page else ""
    return (f"[{hit.hybrid:.3f} kw={hit.kw:.2f} em={hit.em:.2f}] {hit.chunk.doc} · chunk {hit.chunk.index}{page}\n"
            f"  {_preview(hit.chunk.text)}")


def _print_retrieval(r: Retrieval, as_json: bool, out: TextIO) -> None:
    if as_json:
        json.dump([h.as_dict() for h in r.hits], out, ensure_ascii=False, indent=1)
        out.write("\n")
        return
    if r.refused:
        print(f"REFUSE: {r.reason}", file=out)
    for h in r.hits:
        print(format_hit(h), file=out)


def rank_line(r: Retrieval) -> str:
    """``OK: id, id, ...`` or ``REFUSE``."""
    if r.refused or not r.hits:
        return "REFUSE"
    return "OK: " + ", ".join(h.chunk.id for h in r.hits)


# ---------------------------------------------------------------- commands


def cmd_retrieve(args: argparse.Namespace) -> int:
    where = filter_of(args)  # a malformed filter fails before any indexing
    engine = engine_for(args)
    _print_retrieval(engine.retrieve(args.query, labels=labels_of(args), where=where), args.json, sys.stdout)
    return 0


def cmd_rank(args: argparse.Namespace) -> int:
    where = filter_of(args)
    engine = engine_for(args)
    for line in sys.stdin:
        ranked = engine.retrieve(line.rstrip("\r\n"), safeguards=True, labels=labels_of(args), where=where)
        print(rank_line(ranked), flush=True)
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    if not args.query.strip():
        raise MicroRAGError("the question is empty")
    where = filter_of(args)
    engine = engine_for(args)
    llm = LLMConfig.from_env()
    if not args.quiet:
        diag(f"answering with the LLM at {llm.base_url} (model {llm.model})" if llm
             else "answering with the extractive answerer (no LLM_BASE_URL set)")
    # drop/refuse may rewrite the answer, so it is printed once checked, not streamed.
    rewrites = args.verify and engine.settings.verify_policy != "flag"
    stream_out = None if args.json or rewrites else (lambda piece: print(piece, end="", flush=True))
    if args.verify and not args.quiet:
        diag(f"verifying each sentence with NLI model '{engine.settings.nli}' (policy {engine.settings.verify_policy})")
    ans = engine.ask(args.query, llm=llm, on_piece=stream_out, labels=labels_of(args), verify=args.verify,
                     where=where)
    unavailable = [f for f in ans.flags if f.startswith("verify: unavailable")]
    if unavailable:  # asked for by name on the command line: an error, not a note
        raise MicroRAGError(unavailable[0].removeprefix("verify: unavailable (").removesuffix(")"))
    if args.json:
        json.dump({"answer": ans.text, "mode": ans.mode, "refused": ans.retrieval.refused,
                   "reason": ans.retrieval.reason, "truncated": ans.truncated,
                   "sources": [h.as_dict() for h in ans.retrieval.hits],
                   "verification": ans.verification.to_dict() if ans.verification else None},
                  sys.stdout, ensure_ascii=False, indent=1)
        print()
        return 0
    if rewrites:
        print(ans.text, end="")
    print()
    if ans.verification:
        print("\nVerification: " + ans.verification.summary())
        for v in ans.verification.sentences:
            print("  " + verdict_line(v))
    if ans.truncated and not args.quiet:
        diag("warning: the LLM stream dropped mid-answer; the answer above is partial")
    if ans.retrieval.hits and not is_refusal(ans.text):  # a refusal quotes nothing: no sources to list
        print("\nSources:")
        for h in ans.retrieval.hits:
            print(f"  {citation(h)} hybrid {h.hybrid:.3f}")
    return 0
