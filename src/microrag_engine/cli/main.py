"""``microrag`` - the command line.

  microrag retrieve QUERY   ranked chunks with their scores (no LLM needed)
  microrag ask QUERY        a cited answer (LLM if LLM_BASE_URL is set, else extractive)
  microrag rank             the ranking protocol: queries on stdin, OK:/REFUSE lines out
  microrag ingest PATH...   build or update the persistent index (default .microrag/)
  microrag delete DOC       remove a document; microrag check verifies the index
  microrag eval             measure retrieval on BEIR data / HotpotQA-100
  microrag verify           check an answer's sentences against context chunks (NLI)
  (serve, keys, compliant-llm and redteam live in cli_server.py)

Results go to stdout, diagnostics to stderr. A user mistake prints one line
``microrag: error: ...`` and exits non-zero; it never prints a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from .. import __version__
from ..config import CHUNKERS, FUSIONS, PRESETS, override, preset
from ..engine import Engine, demo_corpus
from ..errors import MicroRAGError
from ..runtime.llm import LLMConfig
from ..store import DEFAULT_INDEX, default_location, open_store, store_exists
from ..types import Hit, Retrieval
from .verify import cmd_verify, verdict_line, verify_flags
from .verify import unit_float as _unit_float

log = logging.getLogger("microrag")


def _diag(msg: str) -> None:
    print(f"microrag: {msg}", file=sys.stderr, flush=True)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("corpus and settings")
    g.add_argument("--corpus", action="append", metavar="PATH",
                   help="index this folder or pre-chunked .jsonl in memory for this run (repeatable)")
    g.add_argument("--index", metavar="DIR|URI",
                   help="persistent index to read: a folder, or postgresql://... "
                        f"(default: $MICRORAG_INDEX or {DEFAULT_INDEX}/; without one, the bundled demo handbook)")
    g.add_argument("--labels", metavar="L1,L2",
                   help="only retrieve chunks with these sensitivity labels (default: all)")
    g.add_argument("--preset", choices=sorted(PRESETS),
                   help="'default' = sentence chunks + BM25 + MiniLM; 'seed' = the walkthrough's "
                        "character chunks + TF-IDF + hashed embedding (default: what the index was "
                        "built with, else 'default')")
    g.add_argument("--top-k", type=_positive_int, metavar="N", help="how many chunks to return (spec default 4)")
    g.add_argument("--w-kw", type=_unit_float, metavar="W", help="keyword weight in the blend, 0..1 (default: 0.4; seed preset 0.5)")
    g.add_argument("--fusion", choices=FUSIONS, help="how the two legs are combined (default minmax)")
    g.add_argument("--max-per-source", type=_positive_int, metavar="N",
                   help="diversity cap: at most N chunks per document, 0 = off (default 2)")
    g.add_argument("--min-kw", type=float, metavar="X", help="grounding gate floor on the raw keyword score (seed preset)")
    g.add_argument("--min-em", type=float, metavar="X", help="grounding gate floor on the raw embedding cosine (default preset)")
    g.add_argument("--chunker", choices=CHUNKERS, help="override the preset's chunker")
    g.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    g.add_argument("-q", "--quiet", action="store_true", help="no diagnostics on stderr")
    return p


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="microrag",
        description="microRAG: chunk -> index (keyword + embedding) -> hybrid retrieve -> augment -> generate.",
        epilog="Examples:\n"
               "  microrag ingest my-docs/\n"
               "  microrag retrieve \"how do I reset my password?\"\n"
               "  microrag ask \"how many vacation days do I get?\"\n"
               "  printf 'vpn access\\n' | microrag rank --corpus chunks.jsonl\n"
               "Set LLM_BASE_URL (and LLM_API_KEY, LLM_MODEL) to answer with an OpenAI-compatible model.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"microrag {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    r = sub.add_parser("retrieve", parents=[common], help="show the ranked chunks for a query (no LLM)")
    r.add_argument("query", help="the question, in quotes")
    a = sub.add_parser("ask", parents=[common, verify_flags()], help="answer a question with citations")
    a.add_argument("query", help="the question, in quotes")
    a.add_argument("--verify", action="store_true", help="check every answer sentence against the sources (NLI)")
    v = sub.add_parser("verify", parents=[common, verify_flags()],
                       help="check an answer's sentences against context chunks (NLI)")
    v.add_argument("--context", required=True, metavar="FILE",
                   help="the chunks, one per paragraph (blank-line separated); '-' for stdin")
    v.add_argument("--answer", required=True, metavar="TEXT", help="the answer to check; '-' for stdin")
    sub.add_parser("rank", parents=[common], help="ranking protocol: one query per stdin line -> 'OK: ids' or 'REFUSE'")
    ing = sub.add_parser("ingest", parents=[common], help="add or update documents in the persistent index")
    ing.add_argument("paths", nargs="+", metavar="PATH", help="folders or files to ingest")
    ing.add_argument("--label", help="sensitivity label for these documents (default: front-matter 'label:', else public)")
    ing.add_argument("--prune", action="store_true", help="remove indexed documents whose files are gone")
    ing.add_argument("--dlp", choices=("redact", "label", "off"),
                     help="secrets/PII found in documents: redact before indexing (default preset), "
                          "label the document restricted, or off (the seed preset's default)")
    from .serve import add_parsers  # serve, keys, compliant-llm, redteam

    add_parsers(sub, common)
    ev = sub.add_parser("eval", parents=[common], help="measure retrieval on a BEIR dataset or HotpotQA-100")
    ev.add_argument("--dataset", required=True, metavar="DIR", help="BEIR folder (corpus.jsonl[.gz], queries.jsonl, qrels/) "
                    "or the hotpotqa-100 folder")
    ev.add_argument("--split", default="test", help="qrels split (default: %(default)s)")
    ev.add_argument("--dynamic", action="store_true", help="configured row uses dynamic w_kw (exact-looking tokens)")
    ev.add_argument("--cache", metavar="FILE", help="document-vector cache (.npz; default ~/.cache/microrag/)")
    ev.add_argument("--out", metavar="FILE", help="also save the results as JSON")
    ev.add_argument("--no-ablation", action="store_true", help="only the configured setting")
    d = sub.add_parser("delete", parents=[common], help="remove documents from the index by doc path")
    d.add_argument("docs", nargs="+", metavar="DOC", help="doc path as shown by 'microrag documents'")
    sub.add_parser("check", parents=[common], help="verify the index's integrity (exit 1 on a problem)")
    sub.add_parser("documents", parents=[common], help="list indexed documents with label and provenance")
    return parser


# ---------------------------------------------------------------- building the engine


def _settings(args: argparse.Namespace, name: str):
    settings = override(
        preset(name),
        top_k=args.top_k or None,
        w_kw=args.w_kw,
        fusion=args.fusion,
        max_per_source=args.max_per_source,
        min_kw=args.min_kw,
        min_em=args.min_em,
        chunker=args.chunker,
        verify_policy=getattr(args, "policy", None),
        nli=getattr(args, "nli", None),
        min_entail=getattr(args, "min_entail", None),
    )
    if args.top_k == 0:
        raise MicroRAGError("--top-k must be at least 1")
    return settings


def _preset_for(meta: dict[str, str]) -> str:
    """The preset whose stored-data settings match an index's (else 'default')."""
    for name, s in PRESETS.items():
        if meta.get("embedder") == s.embedder and meta.get("chunker") == s.chunker:
            return name
    return "default"


def _describe(engine: Engine, where: str) -> str:
    s = engine.settings
    chunking = f"chars {s.size}/{s.overlap}" if s.chunker == "chars" else f"sentences <= {s.max_tokens} tokens"
    return (f"{engine.n_chunks} chunks from {len(engine.documents)} documents in {where} "
            f"({chunking}; {s.keyword}; {s.embedder} dim {engine.index.dim}; {s.fusion} w_kw {s.w_kw})")


def _engine(args: argparse.Namespace) -> Engine:
    progress = sys.stderr.isatty() and not args.quiet
    if args.corpus:
        engine = Engine.from_paths(args.corpus, _settings(args, args.preset or "default"), progress=progress)
        where = ", ".join(args.corpus)
    elif args.index or store_exists():
        loc = args.index or default_location()
        store = open_store(loc, create=False)
        try:
            name = args.preset or _preset_for(store.meta())
            engine = Engine.from_store(store, _settings(args, name))
        except BaseException:
            store.close()
            raise
        if engine.store is None:  # everything is loaded; a remote engine keeps its connection
            store.close()
        where = f"index {loc}"
    else:
        engine = Engine.from_paths([demo_corpus()], _settings(args, args.preset or "default"), progress=progress)
        where = f"the bundled demo handbook (no index at {default_location()}; build one with: microrag ingest PATH)"
    if not args.quiet:
        _diag(f"{'loaded' if where.startswith('index') else 'indexed'} {_describe(engine, where)}")
    return engine


def _labels(args: argparse.Namespace) -> list[str] | None:
    if not getattr(args, "labels", None):
        return None
    return [x.strip() for x in args.labels.split(",") if x.strip()]


# ---------------------------------------------------------------- output


def _preview(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def format_hit(hit: Hit) -> str:
    """The seed's line: ``[0.846 kw=1.00 em=0.69] doc · chunk 0`` and a preview."""
    return f"[{hit.hybrid:.3f} kw={hit.kw:.2f} em={hit.em:.2f}] {hit.chunk.doc} · chunk {hit.chunk.index}\n  {_preview(hit.chunk.text)}"


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
    engine = _engine(args)
    r = engine.retrieve(args.query, labels=_labels(args))
    _print_retrieval(r, args.json, sys.stdout)
    return 0


def cmd_rank(args: argparse.Namespace) -> int:
    engine = _engine(args)
    for line in sys.stdin:
        print(rank_line(engine.rank(line.rstrip("\r\n"), labels=_labels(args))), flush=True)
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    if not args.query.strip():
        raise MicroRAGError("the question is empty")
    engine = _engine(args)
    llm = LLMConfig.from_env()
    if not args.quiet:
        _diag(f"answering with the LLM at {llm.base_url} (model {llm.model})" if llm
              else "answering with the extractive answerer (no LLM_BASE_URL set)")
    # drop/refuse may rewrite the answer, so it is printed once checked, not streamed.
    rewrites = args.verify and engine.settings.verify_policy != "flag"
    stream_out = None if args.json or rewrites else (lambda piece: print(piece, end="", flush=True))
    if args.verify and not args.quiet:
        _diag(f"verifying each sentence with NLI model '{engine.settings.nli}' (policy {engine.settings.verify_policy})")
    ans = engine.ask(args.query, llm=llm, on_piece=stream_out, labels=_labels(args), verify=args.verify)
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
        _diag("warning: the LLM stream dropped mid-answer; the answer above is partial")
    if ans.retrieval.hits:
        print("\nSources:")
        for h in ans.retrieval.hits:
            print(f"  [source: {h.chunk.doc} · chunk {h.chunk.index}] hybrid {h.hybrid:.3f}")
    return 0


def _open_for_write(args: argparse.Namespace):
    return open_store(args.index or default_location(), create=True)


def cmd_ingest(args: argparse.Namespace) -> int:
    from ..ingest import ingest_paths

    store = _open_for_write(args)
    try:
        name = args.preset or _preset_for(store.meta())
        report = ingest_paths(store, args.paths, override(_settings(args, name), dlp=args.dlp), label=args.label,
                              prune=args.prune, progress=sys.stderr.isatty() and not args.quiet)
    finally:
        store.close()
    if args.json:
        json.dump({**report.__dict__, "changes": report.changes}, sys.stdout, indent=1)
        print()
    else:
        print(f"{args.index or default_location()}: {report.summary()}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from ..ingest import delete_documents

    store = open_store(args.index or default_location(), create=False)
    try:
        report = delete_documents(store, args.docs)
    finally:
        store.close()
    print(f"removed {len(report.removed)} document(s): {', '.join(report.removed)}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    store = open_store(args.index or default_location(), create=False)
    try:
        problems = store.check()
        docs, gen = store.documents(), store.generation()
    finally:
        store.close()
    for p in problems:
        print(f"PROBLEM: {p}")
    print(f"{'FAILED' if problems else 'OK'}: {len(docs)} documents, {sum(d.n_chunks for d in docs.values())} chunks, "
          f"generation {gen}")
    return 1 if problems else 0


def cmd_documents(args: argparse.Namespace) -> int:
    store = open_store(args.index or default_location(), create=False)
    try:
        docs = store.documents()
    finally:
        store.close()
    if args.json:
        json.dump([d.__dict__ for d in docs.values()], sys.stdout, indent=1)
        print()
    for d in [] if args.json else docs.values():
        print(f"{d.doc}\t{d.n_chunks} chunks\t{d.label}\t{d.principal}\t{d.ingested_at}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..eval.retrieval import METRICS, evaluate, load_dataset

    ds = load_dataset(args.dataset, args.split)
    settings = _settings(args, args.preset or "default")
    if args.dynamic:
        settings = override(settings, dynamic_w_kw=True)
    cache = Path(args.cache) if args.cache else Path.home() / ".cache" / "microrag" / f"{Path(args.dataset).name}.{settings.embedder}.npz"
    if not args.quiet:
        _diag(f"evaluating {ds.name}: {len(ds.texts)} documents, {len(ds.queries)} judged queries "
              f"(document vectors cached in {cache})")
    rows = evaluate(ds, settings, cache=cache, ablation=not args.no_ablation)
    result = {"dataset": ds.name, "documents": len(ds.texts), "queries": len(ds.queries),
              "settings": settings.as_dict(), "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    cols = list(METRICS) + ["recall@2", "recall@5"]
    print(f"{'config':<26}" + "".join(f"{c:>11}" for c in cols))
    for r in rows:
        print(f"{r['config']:<26}" + "".join(f"{r[c]:>11.4f}" for c in cols))
    return 0


COMMANDS = {"verify": cmd_verify, "eval": cmd_eval, "retrieve": cmd_retrieve, "ask": cmd_ask, "rank": cmd_rank, "ingest": cmd_ingest,
            "delete": cmd_delete, "check": cmd_check, "documents": cmd_documents}


class _StderrFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"microrag: {record.levelname.lower()}: {record.getMessage()}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StderrFormatter())
    log.handlers[:] = [handler]
    log.setLevel(logging.ERROR if getattr(args, "quiet", False) else logging.WARNING)
    log.propagate = False
    from .serve import COMMANDS as SERVER_COMMANDS

    try:
        return {**COMMANDS, **SERVER_COMMANDS}[args.command](args)
    except MicroRAGError as exc:
        print(f"microrag: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `microrag retrieve ... | head` is fine
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
