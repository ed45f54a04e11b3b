"""``microrag retrieve | ask | rank`` - questions against an index, the demo or a corpus.

``retrieve`` prints the ranked chunks with both legs' scores (no LLM), ``ask`` a
cited answer (the LLM at ``LLM_BASE_URL``, else the extractive answerer), ``rank``
the ranking protocol: one query per stdin line -> ``OK: ids`` or ``REFUSE``.
``retrieve`` and ``ask`` take ``--target URL`` to ask a server (``client.Client``)
instead, printing the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

from ..config import LLMConfig
from ..errors import MicroRAGError
from ..generate import is_refusal
from ..present import Numberer, Ref, Shown, printable
from ..types import Hit, Retrieval
from ..verify import SentenceVerdict
from .options import (
    add_corpus,
    add_index,
    add_output,
    add_preset,
    add_retrieval,
    add_target,
    add_verification,
    client_for,
    diag,
    engine_for,
    filter_of,
    labels_of,
    remote_filters,
)
from .verify import verdict_line

if TYPE_CHECKING:  # the client loads only with --target
    from ..client import Client


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
        if p is not k:  # rank reads a local index: its protocol is for offline evaluation
            add_target(p)
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


def verification_lines(verification: dict) -> list[str]:
    """A verification (``Verification.to_dict()``, as the server sends it) for a terminal:
    the summary, then one verdict line per sentence."""
    rows = [SentenceVerdict(**{**row, "missing": tuple(row.get("missing", ()))}) for row in verification.get("sentences", [])]
    return ["Verification: " + str(verification.get("summary", "")), *("  " + verdict_line(v) for v in rows)]


def print_cited(shown: Shown, out: TextIO) -> None:
    """The sources an answer cites, by number, under ``ask`` (``--json`` has every hit and its scores)."""
    listed = shown.sources(markdown=False)
    if listed:
        print("\n" + printable(listed), file=out)


def rank_line(r: Retrieval) -> str:
    """``OK: id, id, ...`` or ``REFUSE``."""
    if r.refused or not r.hits:
        return "REFUSE"
    return "OK: " + ", ".join(h.chunk.id for h in r.hits)


# ---------------------------------------------------------------- commands


def cmd_retrieve(args: argparse.Namespace) -> int:
    client = client_for(args)
    if client is not None:
        with client:
            return _retrieve_remote(args, client)
    where = filter_of(args)  # a malformed filter fails before any indexing
    engine = engine_for(args)
    _print_retrieval(engine.retrieve(args.query, labels=labels_of(args), where=where), args.json, sys.stdout)
    return 0


def _retrieve_remote(args: argparse.Namespace, client: Client) -> int:
    from ..client import to_hit

    where, exclude = remote_filters(args)
    found = client.search(args.query, top_k=args.top_k, where=where, exclude=exclude)
    if args.json:  # the server's hits as sent (they carry label and provenance too)
        json.dump(found["hits"], sys.stdout, ensure_ascii=False, indent=1)
        print()
        return 0
    if found["refused"]:
        print(f"REFUSE: {found['reason']}")
    for h in found["hits"]:
        print(format_hit(to_hit(h)))
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
    client = client_for(args)
    if client is not None:
        with client:
            return _ask_remote(args, client)
    where = filter_of(args)
    engine = engine_for(args)
    llm = LLMConfig.from_env()
    if not args.quiet:
        diag(f"answering with the LLM at {llm.base_url} (model {llm.model})" if llm
             else "answering with the extractive answerer (no LLM_BASE_URL set)")
    # drop/refuse may rewrite the answer, so it is printed once checked, not streamed.
    rewrites = args.verify and engine.settings.verify_policy != "flag"
    # Citations numbered as the answer arrives ([1], [2], ...), listed after it.
    numberer = Numberer(None)
    stream_out = None if args.json or rewrites else (lambda piece: print(printable(numberer.feed(piece)), end="", flush=True))
    if args.verify and not args.quiet:
        diag(f"verifying each sentence with NLI model '{engine.settings.nli}' (policy {engine.settings.verify_policy})")
    ans = engine.ask(args.query, llm=llm, on_piece=stream_out, labels=labels_of(args), verify=args.verify,
                     where=where)
    unavailable = [f for f in ans.flags if f.startswith("verify: unavailable")]
    if unavailable:  # asked for by name on the command line: an error, not a note
        raise MicroRAGError(unavailable[0].removeprefix("verify: unavailable (").removesuffix(")"))
    if args.json:
        json.dump({"answer": ans.text, "mode": ans.mode, "refused": ans.refused,
                   "reason": ans.reason, "truncated": ans.truncated,
                   "sources": [h.as_dict() for h in ans.retrieval.hits],
                   "verification": ans.verification.to_dict() if ans.verification else None},
                  sys.stdout, ensure_ascii=False, indent=1)
        print()
        return 0
    if rewrites:
        print(printable(numberer.feed(ans.text)), end="")
    print(printable(numberer.flush()))
    if ans.verification:
        print("\nVerification: " + ans.verification.summary())
        for v in ans.verification.sentences:
            print("  " + verdict_line(v))
    if ans.truncated and not args.quiet:
        diag("warning: the LLM stream dropped mid-answer; the answer above is partial")
    if ans.refused and ans.reason and not args.quiet:  # the answer is the plain sentence; why, for whoever tunes
        diag(f"refused: {ans.reason}")
    if not ans.refused:  # a refusal quotes nothing: no sources to list
        passages = [Ref.of(h, engine.title(h.chunk.doc)) for h in ans.retrieval.passages]
        print_cited(Shown("", numberer.cited).among(passages), sys.stdout)
    return 0


def _ask_remote(args: argparse.Namespace, client: Client) -> int:
    """``ask --target``: the server's answer, streamed as it arrives, printed as ``ask`` prints."""
    from ..client import Delta, Done, Sources

    where, exclude = remote_filters(args)
    verify = True if args.verify else None  # without --verify: the server's default
    if not args.quiet:
        diag(f"asking the server at {client.display_url}")
    if args.json:
        out = client.query(args.query, top_k=args.top_k, where=where, exclude=exclude, verify=verify)
        json.dump({"answer": out["answer"], "mode": out["mode"], "refused": out["refused"], "reason": out["reason"],
                   "truncated": any(f.startswith("budget:") for f in out["flags"]), "sources": out["sources"],
                   "verification": out["verification"], "flags": out["flags"]},
                  sys.stdout, ensure_ascii=False, indent=1)
        print()
        return 0
    text, refs, done, numberer = "", [], None, Numberer(None)
    for event in client.stream(args.query, top_k=args.top_k, where=where, exclude=exclude, verify=verify):
        if isinstance(event, Sources):
            refs = [Ref.of_row(s) for s in [*event.sources, *event.context]]
        elif isinstance(event, Delta):
            text += event.text
            print(printable(numberer.feed(event.text)), end="", flush=True)
        elif isinstance(event, Done):
            done = event
    print(printable(numberer.flush()))
    flags = done.flags if done else []
    unavailable = [f for f in flags if f.startswith("verify: unavailable")]
    if args.verify and unavailable:
        raise MicroRAGError("the server could not verify: " + unavailable[0].removeprefix("verify: unavailable (").removesuffix(")"))
    if done and done.verification and args.verify:
        print("\n" + "\n".join(verification_lines(done.verification)))
    if any(f.startswith("budget:") for f in flags) and not args.quiet:
        diag("warning: the server cut the answer at its time budget; the answer above is partial")
    if done is not None and done.refused and done.reason and not args.quiet:
        diag(f"refused: {done.reason}")
    if not ((done is not None and done.refused) or is_refusal(text)):
        print_cited(Shown("", numberer.cited).among(refs), sys.stdout)
    return 0
