"""``microrag`` - the command line.

  microrag retrieve QUERY   ranked chunks with their scores (no LLM needed)
  microrag ask QUERY        a cited answer (LLM if LLM_BASE_URL is set, else extractive)
  microrag rank             the ranking protocol: queries on stdin, OK:/REFUSE lines out
  microrag ingest PATH...   build or update the persistent index (default .microrag/)
  microrag delete DOC       remove a document; microrag check verifies the index

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

from . import __version__
from .config import FUSIONS, preset, override, PRESETS, CHUNKERS
from .errors import MicroRAGError
from .generate import LLMConfig
from .pipeline import Engine, demo_corpus
from .store import DEFAULT_INDEX, default_location, open_store, store_exists
from .store.base import BOUND_SETTINGS
from .retrieve import Hit, Retrieval

log = logging.getLogger("microrag")


def _diag(msg: str) -> None:
    print(f"microrag: {msg}", file=sys.stderr, flush=True)


def _unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}")
    return value


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
    g.add_argument("--w-kw", type=_unit_float, metavar="W", help="keyword weight in the blend, 0..1 (default 0.5)")
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
               "  microrag ingest docs/\n"
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
    a = sub.add_parser("ask", parents=[common], help="answer a question with citations")
    a.add_argument("query", help="the question, in quotes")
    sub.add_parser("rank", parents=[common], help="ranking protocol: one query per stdin line -> 'OK: ids' or 'REFUSE'")
    ing = sub.add_parser("ingest", parents=[common], help="add or update documents in the persistent index")
    ing.add_argument("paths", nargs="+", metavar="PATH", help="folders or files to ingest")
    ing.add_argument("--label", help="sensitivity label for these documents (default: front-matter 'label:', else public)")
    ing.add_argument("--prune", action="store_true", help="remove indexed documents whose files are gone")
    ing.add_argument("--dlp", choices=("redact", "label", "off"),
                     help="secrets/PII found in documents: redact before indexing (default preset), "
                          "label the document restricted, or off (the seed preset's default)")
    sv = sub.add_parser("serve", parents=[common], help="run the HTTP API (hardened defaults)")
    sv.add_argument("--host", default="127.0.0.1", help="interface to bind (default: %(default)s)")
    sv.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    sv.add_argument("--no-anonymous", action="store_true", help="require an API key for every call")
    sv.add_argument("--dlp", choices=("redact", "label", "off"),
                    help="secrets/PII in ingested text: redact them (default preset), label the document restricted, or off")
    sv.add_argument("--input-guard", choices=("flag", "block", "off"), default="flag",
                    help="injection-looking questions: flag in the audit trail (default) or block")
    sv.add_argument("--tools-dir", metavar="DIR", help="enable the file-read tool, confined to DIR (default: off)")
    sv.add_argument("--profile", choices=("hardened", "lab-baseline"), default="hardened",
                    help="lab-baseline = the naive server of the spec (no auth, no DLP, no cap, literal blocklists, "
                         "unconfined file tool), loopback only, to demonstrate the attacks")
    cl = sub.add_parser("compliant-llm", help="run the maximally compliant test model (OpenAI-compatible)")
    cl.add_argument("--host", default="127.0.0.1")
    cl.add_argument("--port", type=int, default=8001)
    rt = sub.add_parser("redteam", help="run the canonical RAG attacks against a live server")
    rt.add_argument("--target", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    rt.add_argument("--keys", help="admin=KEY,contributor=KEY,reader=KEY (missing roles call anonymously)")
    rt.add_argument("--kb", default="../shared/fixtures/lab-kb", help="the planted-secrets knowledge base the server holds")
    rt.add_argument("--probe", default="/etc/hostname", help="a file the file tool must never reveal")
    rt.add_argument("--json", action="store_true", help="rows as JSON")
    ky = sub.add_parser("keys", help="manage server API keys: add | list | revoke")
    ksub = ky.add_subparsers(dest="action", metavar="ACTION")
    ksub.required = True
    ka = ksub.add_parser("add", parents=[common], help="create a key (printed once)")
    ka.add_argument("name", help="principal name; also the namespace of its uploads")
    ka.add_argument("--role", choices=("reader", "contributor", "admin"), default="reader")
    ka.add_argument("--clearance", metavar="L1,L2", help="labels this key may read (public is always included)")
    ka.add_argument("--trusted", action="store_true", help="contributor uploads go live without review")
    ksub.add_parser("list", parents=[common], help="list keys (never the keys themselves)")
    kr = ksub.add_parser("revoke", parents=[common], help="revoke a key by id or name")
    kr.add_argument("name", help="key id or principal name")
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
    engine = _engine(args)
    llm = LLMConfig.from_env()
    if not args.quiet:
        _diag(f"answering with the LLM at {llm.base_url} (model {llm.model})" if llm
              else "answering with the extractive answerer (no LLM_BASE_URL set)")
    stream_out = None if args.json else (lambda piece: print(piece, end="", flush=True))
    ans = engine.ask(args.query, llm=llm, on_piece=stream_out, labels=_labels(args))
    if args.json:
        json.dump({"answer": ans.text, "mode": ans.mode, "refused": ans.retrieval.refused,
                   "reason": ans.retrieval.reason, "truncated": ans.truncated,
                   "sources": [h.as_dict() for h in ans.retrieval.hits]}, sys.stdout, ensure_ascii=False, indent=1)
        print()
        return 0
    print()
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
    from .ingest import ingest_paths

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
    from .ingest import delete_documents

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

    from .evaluate import METRICS, evaluate, load_dataset

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


def _server_dir(args: argparse.Namespace):
    from pathlib import Path

    loc = args.index or default_location()
    return Path(".microrag-server") if loc.startswith(("postgresql://", "postgres://")) else Path(loc)


def cmd_keys(args: argparse.Namespace) -> int:
    from .server.auth import KeyStore

    keys = KeyStore(_server_dir(args) / "keys.sqlite")
    if args.action == "add":
        key = keys.add(args.name, args.role, [x for x in (args.clearance or "public").split(",") if x], args.trusted)
        print(key)
        if not args.quiet:
            _diag("store this key now: it is shown once and kept only as a hash")
    elif args.action == "list":
        for k in keys.list():
            print(f"{k['id']}\t{k['name']}\t{k['role']}\t{k['clearance']}\t{'trusted' if k['trusted'] else 'untrusted'}"
                  f"\t{'REVOKED' if k['revoked'] else 'active'}\t{k['created']}")
    else:
        keys.revoke(args.name)
        print(f"revoked {args.name}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from .server.app import ServerConfig, create_app
        from .server.auth import KeyStore
        from .server.state import ServerState
    except ImportError:
        raise MicroRAGError("the server needs its extra: pip install 'microrag[server]'") from None
    from pathlib import Path

    loopback = args.host in ("127.0.0.1", "localhost", "::1")
    if args.profile == "lab-baseline":
        if not loopback:
            raise MicroRAGError("the lab-baseline profile is deliberately vulnerable and binds to loopback only")
        _diag("WARNING: lab-baseline profile - NO auth, NO DLP, NO diversity cap, literal blocklists, an "
              "unconfined file tool. A demonstration target for `microrag redteam`; never expose it.")
    elif not loopback and not args.quiet:
        _diag(f"warning: listening on {args.host}: put TLS and a firewall in front of it")
    store = open_store(args.index or default_location(), create=True)
    name = args.preset or _preset_for(store.meta())
    settings = override(_settings(args, name), dlp=args.dlp)
    if args.profile == "lab-baseline":
        settings = override(settings, dlp="off", max_per_source=0, w_kw=0.6, gate="none")
    if args.corpus and not store.documents():
        from .ingest import ingest_paths

        report = ingest_paths(store, args.corpus, settings)
        if not args.quiet:
            _diag(f"indexed {', '.join(args.corpus)}: {report.summary()}")
    sdir = _server_dir(args)
    cfg = ServerConfig(store=store, settings=settings, keys=KeyStore(sdir / "keys.sqlite"),
                       state=ServerState(sdir / "server.sqlite"), corpus=list(args.corpus or []),
                       llm=LLMConfig.from_env(), allow_anonymous=not args.no_anonymous, profile=args.profile,
                       input_guard=args.input_guard, tools_dir=Path(args.tools_dir) if args.tools_dir else None)
    app = create_app(cfg)
    if not args.quiet:
        _diag(f"serving {args.index or default_location()} on http://{args.host}:{args.port} "
              f"(OpenAPI at /docs; answers by {'the LLM' if cfg.llm else 'the extractive answerer'})")
    # uvicorn's access log prints paths, never headers: keys stay out of logs.
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning" if args.quiet else "info")
    return 0


def cmd_compliant_llm(args: argparse.Namespace) -> int:
    import time

    from .redteam.compliant import serve

    httpd = serve(args.host, args.port)
    print(f"compliant model on http://{args.host}:{httpd.server_address[1]} - a test instrument: it quotes its "
          "context and obeys every instruction. Set LLM_BASE_URL to it for red-team runs.", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        httpd.shutdown()
    return 0


def cmd_redteam(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .redteam.attacks import run_all

    keys = dict(kv.split("=", 1) for kv in (args.keys or "").split(",") if "=" in kv)
    unknown = set(keys) - {"admin", "contributor", "reader"}
    if unknown:
        raise MicroRAGError(f"--keys takes admin=...,contributor=...,reader=...; unknown role(s): {', '.join(unknown)}")
    kb, probe = Path(args.kb), Path(args.probe)
    if not kb.is_dir() or not probe.is_file():
        raise MicroRAGError(f"need the planted-secrets knowledge base (--kb, got {kb}) and a probe file (--probe, got {probe})")
    try:
        rows = run_all(args.target, keys, kb, probe)
    except httpx_errors() as exc:
        raise MicroRAGError(f"cannot reach {args.target}: {type(exc).__name__}") from None
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    else:
        print(f"{'attack':<26}{'attempts':>9}{'successes':>10}  defence that stopped it")
        for r in rows:
            print(f"{r['attack']:<26}{r['attempts']:>9}{r['successes']:>10}  {r['defence']}")
    return 1 if any(r["successes"] for r in rows) else 0


def httpx_errors():
    import httpx

    return (httpx.TransportError,)


COMMANDS = {"compliant-llm": cmd_compliant_llm, "redteam": cmd_redteam, "serve": cmd_serve, "keys": cmd_keys, "eval": cmd_eval, "retrieve": cmd_retrieve, "ask": cmd_ask, "rank": cmd_rank, "ingest": cmd_ingest,
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
    try:
        return COMMANDS[args.command](args)
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


if __name__ == "__main__":
    sys.exit(main())
