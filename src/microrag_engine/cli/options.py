"""Option groups the commands pick from, and the helpers that turn options into an engine.

Each command declares exactly the groups it uses (``retrieve`` takes the retrieval
knobs, ``ingest`` the chunking ones, ``check`` neither), so argparse rejects a flag
that would do nothing there. Nothing here parses a command line by itself.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from ..config import CHUNKERS, CONDENSERS, DEFAULT_INDEX, DLP_MODES, FUSIONS, PRESETS, VERIFY_POLICIES, Settings, api_key, override, preset
from ..engine import Engine, demo_corpus
from ..errors import MicroRAGError
from ..store import default_location, open_store, store_exists
from ..store.base import DocFilter

if TYPE_CHECKING:
    from ..client import Client


# Where diagnostics go instead of plain stderr lines: set by `serve --log-format json`, whose
# every stderr line must be one JSON object.
_DIAG_LOG: list[logging.Logger] = []


def diag(msg: str) -> None:
    """A diagnostic line on stderr (results go to stdout)."""
    if _DIAG_LOG:
        _DIAG_LOG[0].log(logging.WARNING if msg.lower().startswith("warning") else logging.INFO, msg)
        return
    print(f"microrag: {msg}", file=sys.stderr, flush=True)


def diag_to(logger: logging.Logger) -> None:
    """Send every later ``diag`` line to ``logger`` (a structured log's handler)."""
    _DIAG_LOG[:] = [logger]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}")
    return value


# ---------------------------------------------------------------- option groups


def add_output(p: argparse.ArgumentParser, json: bool = True) -> None:
    if json:
        p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no diagnostics on stderr")


def add_index(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index", metavar="DIR|URI",
                   help=f"persistent index: a folder, or postgresql://... (default: $MICRORAG_INDEX or {DEFAULT_INDEX}/)")


def add_corpus(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", action="append", metavar="PATH",
                   help="index this folder or pre-chunked .jsonl in memory for this run (repeatable); "
                        "without it and without an index, the bundled demo handbook")


def add_preset(p: argparse.ArgumentParser, chunker: bool = True, index: bool = True) -> None:
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="'default' = sentence chunks + BM25 + MiniLM; 'seed' = the walkthrough's character chunks "
                        "+ TF-IDF + hashed embedding (default: "
                        + ("what the index was built with, else 'default')" if index else "'default')"))
    if chunker:
        p.add_argument("--chunker", choices=CHUNKERS, help="override the preset's chunker")


def add_fusion(g: argparse._ActionsContainer) -> None:
    g.add_argument("--w-kw", type=unit_float, metavar="W", help="keyword weight in the blend, 0..1 (default 0.4; seed 0.5)")
    g.add_argument("--fusion", choices=FUSIONS, help="how the two legs are combined (default minmax)")


def add_conversation(p: argparse.ArgumentParser) -> None:
    p.add_argument("--condense", choices=CONDENSERS,
                   help="how a follow-up's retrieval query is made: lexical (default: the turns it continues are put "
                        "before it), llm (the model at LLM_BASE_URL rewrites it; measure it first: "
                        "docs/asking/follow-ups.md), off (last message only)")


def add_retrieval(p: argparse.ArgumentParser, labels: bool = True) -> None:
    g = p.add_argument_group("retrieval")
    if labels:
        g.add_argument("--labels", metavar="L1,L2", help="only retrieve chunks with these sensitivity labels (default: all)")
        g.add_argument("--where", action="append", metavar="FIELD=GLOB",
                       help="only documents whose FIELD matches: path, collection, title or a front-matter key "
                            "(e.g. --where 'path=tutorial/*'; repeat to require several)")
        g.add_argument("--exclude", action="append", metavar="FIELD=GLOB",
                       help="leave out documents whose FIELD matches (e.g. --exclude 'path=*CHANGELOG*')")
    g.add_argument("--top-k", type=positive_int, metavar="N", help="how many chunks to return (spec default 4)")
    add_fusion(g)
    g.add_argument("--max-per-source", type=positive_int, metavar="N",
                   help="diversity cap: at most N chunks per document, 0 = off (default 2)")
    g.add_argument("--min-kw", type=float, metavar="X", help="grounding gate floor on the raw keyword score (seed preset)")
    g.add_argument("--min-em", type=float, metavar="X", help="grounding gate floor on the raw embedding cosine")


def add_verification(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("verification")
    g.add_argument("--policy", choices=VERIFY_POLICIES,
                   help="unsupported sentences: flag them (default), drop them, or refuse the answer")
    g.add_argument("--nli", metavar="MODEL",
                   help="'shipped' (default), 'llm' (LLM_BASE_URL as judge), or a Hugging Face model folder")
    g.add_argument("--min-entail", type=unit_float, metavar="P",
                   help="entailment probability a sentence needs (default: the model's calibrated value)")


def add_dlp(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dlp", choices=DLP_MODES,
                   help="secrets/PII found in documents: redact before indexing (default preset), "
                        "label the document restricted, or off (the seed preset's default)")


def add_target(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("server")
    g.add_argument("--target", metavar="URL",
                   help="run against a microRAG server (e.g. http://127.0.0.1:8000) instead of a local index")
    g.add_argument("--key", metavar="KEY", help="the server's API key (default: $MICRORAG_API_KEY; the variable keeps it "
                                                "out of your shell history and the process list)")


# ---------------------------------------------------------------- options -> a server client

# Options that configure a local index, by namespace name. With --target the server's own
# index and settings decide, so each is refused rather than silently ignored.
_LOCAL_ONLY = {"corpus": "--corpus", "index": "--index", "preset": "--preset", "chunker": "--chunker", "w_kw": "--w-kw",
               "fusion": "--fusion", "max_per_source": "--max-per-source", "min_kw": "--min-kw", "min_em": "--min-em",
               "policy": "--policy", "nli": "--nli", "min_entail": "--min-entail", "dlp": "--dlp", "prune": "--prune",
               "watch": "--watch", "labels": "--labels", "condense": "--condense"}


def client_for(args: argparse.Namespace) -> Client | None:
    """A client for ``--target`` (key: ``--key``, else ``$MICRORAG_API_KEY``), or None to run locally.
    A local-index option given with ``--target`` is a one-line error."""
    given = vars(args)
    if not given.get("target"):
        if given.get("key"):
            raise MicroRAGError("--key is for a server: give its URL with --target")
        return None
    for name, flag in _LOCAL_ONLY.items():
        if given.get(name) not in (None, False):
            why = ("your key's clearance decides what you may read" if name == "labels"
                   else "the server answers from its own index with its own settings")
            raise MicroRAGError(f"{flag} does nothing with --target: {why}; leave {flag} out")
    from ..client import Client  # only with --target: a local query never loads the client

    return Client(args.target, api_key=given.get("key") or api_key() or None)


def remote_filters(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, str]]:
    """``--where``/``--exclude`` as the server takes them: one glob per field."""
    found = filter_of(args) or DocFilter()
    out: tuple[dict[str, str], dict[str, str]] = ({}, {})
    for pairs, into, flag in ((found.where, out[0], "--where"), (found.exclude, out[1], "--exclude")):
        for name, glob in pairs:
            if name in into:
                raise MicroRAGError(f"{flag} {name}=... is given twice; a server takes one glob per field")
            into[name] = glob
    return out


# ---------------------------------------------------------------- options -> settings -> engine

# Settings knobs a command may expose, by option name; options a command did not
# declare are simply absent from its namespace.
_KNOBS = {"top_k": "top_k", "w_kw": "w_kw", "fusion": "fusion", "max_per_source": "max_per_source", "min_kw": "min_kw",
          "min_em": "min_em", "chunker": "chunker", "policy": "verify_policy", "nli": "nli", "min_entail": "min_entail",
          "dlp": "dlp", "condense": "condense"}


def settings_for(args: argparse.Namespace, name: str) -> Settings:
    """Preset ``name`` with the knobs this command's options set."""
    given = vars(args)
    if given.get("top_k") == 0:
        raise MicroRAGError("--top-k must be at least 1")
    return override(preset(name), **{knob: given.get(opt) for opt, knob in _KNOBS.items()})


def preset_for(meta: dict[str, str]) -> str:
    """The preset whose stored-data settings match an index's (else 'default')."""
    for name, s in PRESETS.items():
        if meta.get("embedder") == s.embedder and meta.get("chunker") == s.chunker:
            return name
    return "default"


def filter_of(args: argparse.Namespace) -> DocFilter | None:
    """The ``--where``/``--exclude`` filter, or None when neither is given."""
    try:
        found = DocFilter.parse(args.where, args.exclude)
    except ValueError as exc:
        raise MicroRAGError(str(exc)) from None
    return found or None


def labels_of(args: argparse.Namespace) -> list[str] | None:
    if not args.labels:
        return None
    return [x.strip() for x in args.labels.split(",") if x.strip()]


def _describe(engine: Engine, where: str) -> str:
    s = engine.settings
    chunking = f"chars {s.size}/{s.overlap}" if s.chunker == "chars" else f"sentences <= {s.max_tokens} tokens"
    return (f"{engine.n_chunks} chunks from {engine.n_documents} documents in {where} "
            f"({chunking}; {s.keyword}; {s.embedder} dim {engine.index.dim}; {s.fusion} w_kw {s.w_kw})")


def engine_for(args: argparse.Namespace) -> Engine:
    """The engine a query command runs on: ``--corpus`` in memory, else the index, else the demo."""
    progress = sys.stderr.isatty() and not args.quiet
    if args.corpus:
        engine = Engine.from_paths(args.corpus, settings_for(args, args.preset or "default"), progress=progress)
        where = ", ".join(args.corpus)
    elif args.index or store_exists():
        loc = args.index or default_location()
        store = open_store(loc, create=False)
        try:
            engine = Engine.from_store(store, settings_for(args, args.preset or preset_for(store.meta())))
        except BaseException:
            store.close()
            raise
        if engine.store is None:  # everything is loaded; a remote engine keeps its connection
            store.close()
        where = f"index {loc}"
    else:
        engine = Engine.from_paths([demo_corpus()], settings_for(args, args.preset or "default"), progress=progress)
        where = f"the bundled demo handbook (no index at {default_location()}; build one with: microrag ingest PATH)"
    if not args.quiet:
        diag(f"{'loaded' if where.startswith('index') else 'indexed'} {_describe(engine, where)}")
    return engine
