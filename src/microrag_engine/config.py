"""One settings object, named presets, and overrides.

``seed`` reproduces the walkthrough to the printed digit (character chunks 300/60,
seed TF-IDF, hashed 128-d embedding); ``default`` is what users get (sentence-aware
chunks within the embedder's 256-token budget, BM25, all-MiniLM-L6-v2).
Knob names are the spec's: ``size``, ``overlap``, ``top_k``, ``w_kw``,
``max_per_source``, ``min_kw``.

It is also the only reader of the process environment (bottom of this file):
``MICRORAG_INDEX``, ``MICRORAG_PG_SCHEMA``, ``MICRORAG_MINILM_ONNX`` /
``MICRORAG_MINILM_TOKENIZER``, ``MICRORAG_API_KEY`` (a server's key, for ``--target``)
and the model endpoint's ``LLM_BASE_URL``, ``LLM_API_KEY``, ``LLM_MODEL``, ``LLM_MAX_TOKENS``. Nothing else here does I/O.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError

CHUNKERS = ("chars", "sentences")
MARKUPS = ("clean", "raw")
KEYWORDS = ("tfidf", "bm25")
EMBEDDERS = ("hash", "minilm")
FUSIONS = ("minmax", "rrf")
GATES = ("none", "kw", "em", "either")
DLP_MODES = ("redact", "label", "off")
VERIFY_POLICIES = ("flag", "drop", "refuse")
CONDENSERS = ("lexical", "llm", "off")  # how a follow-up's retrieval query is made (retrieve.conversation)


@dataclass(frozen=True)
class Settings:
    """Every knob of the five steps. Frozen: derive variants with :func:`override`."""

    # step 1 - load and chunk
    markup: str = "clean"  # clean: Markdown/HTML rendered to what a reader sees (code, headings kept); raw: as written
    chunker: str = "sentences"
    size: int = 300  # chars window: characters per chunk
    overlap: int = 60  # chars window: characters shared by neighbours
    max_tokens: int = 256  # sentences: embedder token budget per chunk
    # step 2 - index twice
    keyword: str = "bm25"
    embedder: str = "minilm"
    k1: float = 0.9  # BM25 term-frequency saturation (Anserini's BEIR setting)
    b: float = 0.4  # BM25 length normalisation
    # step 3 - hybrid retrieve
    fusion: str = "minmax"
    w_kw: float = 0.4  # tuned on SciFact train (0.3-0.7 swept); the seed keeps 0.5
    dynamic_w_kw: bool = False  # lean on keywords for queries with codes/hostnames/ids
    rrf_k: int = 60
    top_k: int = 4
    gate: str = "either"  # which raw signals the grounding gate reads (see retrieve.grounding_gate)
    min_kw: float = 0.05  # gate floor on the raw keyword score (gate="kw", the seed)
    min_em: float = 0.38  # gate floor on the raw embedding cosine (measured: benchmarks/results/gate.md)
    min_kwcov: float = 0.46  # gate floor on BM25 coverage of the query (gate="either")
    max_per_source: int = 2  # diversity cap; 0 = off
    w_long_doc: float = 0.08  # length prior: a document of n > long_doc_chunks chunks loses w * ln(n / long_doc_chunks)
    long_doc_chunks: int = 20  # (measured on the QA dev sets: benchmarks/results/qa.md; 0 weight = off)
    # name prior: a query word that only a few documents' titles or file names hold (name_rare of
    # those a caller can see at most) ranks their chunks this much higher per word (retrieve.names)
    w_name: float = 0.1
    name_rare: float = 0.05
    # PoisonedRAG (#19): a passage that asks the query back as a question is held back from the
    # answer when other passages ground it (retrieve.mimic); an FAQ that is the only source stays
    hold_mimics: bool = True
    # provenance prior: each tier below the operator's (admin-approved 1, trusted contributor 2)
    # ranks this much lower, in units of the fused scores' spread (only where tiers are set: the server)
    w_provenance: float = 0.05
    ann_threshold: int = 50_000  # at this many chunks, use a faiss HNSW first pass (if installed)
    first_pass: int = 100  # per-leg candidates for ANN / database first passes
    # ingest-time DLP: redact secrets/PII before indexing, label the document restricted, or off
    dlp: str = "redact"
    # Presidio's recognisers on top of ours (extra "pii"): off - ours validate cards, IBANs and
    # national ids by check digit, and Presidio cost 2.6 GB and 40% of an ingest (#16)
    dlp_presidio: bool = False
    # conversations: how a follow-up's retrieval query is made (retrieve.conversation)
    # lexical (default): measured 0.896 / 0.721 follow-up hit@4 where the packaged SmolLM2-135M's rewrite
    # scored 0.328 / 0.515 (benchmarks/results/conversation*.md); llm: the configured model rewrites
    # (lexical without one); off: the last message alone
    condense: str = "lexical"
    # whether `retrieve` applies gate + cap (the seed's bare retriever does not)
    safeguards_on_retrieve: bool = True
    # step 3b - cross-encoder rerank of the first ``rerank_depth`` fused candidates
    rerank: bool = False  # off: it lowered SciFact nDCG@10 and costs ~0.5 s a query (benchmarks/results/rerank.md)
    rerank_depth: int = 20
    rerank_model: str = ""  # a cross-encoder folder with a 'relevant' label (none ships: training/RERANKER.md)
    w_rerank: float = 0.5  # blend of the reranker's score with the fused score
    # step 5 - extractive answers: answerability (calibrated on the QA dev sets: benchmarks/results/qa.md)
    answer_min_support: float = 0.3  # refuse when no passage's support (keyword share + cosine) / 2 reaches this
    answer_max_missing: float = 0.2  # ...or when more of the query's term weight than this is absent from
    answer_rescue_sem: float = 0.6  # every retrieved chunk and no passage's cosine reaches answer_rescue_sem
    # chunks each side of a hit, in its document, that an answer may quote from (small-to-big):
    # a fact one sentence past a chunk's edge is in reach. 0: the hits alone.
    context_chunks: int = 1
    # which passage to quote: the trained selector (models/selector, training/build_selector.py)
    # or the hand-set score (support plus small priors)
    answer_selector: bool = True
    # an answer model (a cross-encoder folder built by training/train_selector.py; none ships:
    # 0-2 points of facts for 2.3-2.8x the answer step's time, training/ANSWER_MODEL.md)
    # reorders the selector's best ``answer_rerank`` passages (None: the number it was tuned
    # at); the answerer refuses when it gives none of them ``answer_min_answers`` probability
    # of answering (None: the floor calibrated with the model on the QA dev sets). Both
    # defaults come from the model's config.json.
    answer_model: str = ""
    answer_rerank: int | None = None
    answer_min_answers: float | None = None
    # step 6 - verify answers (NLI): "shipped", "llm", or a model folder
    nli: str = "shipped"
    verify_policy: str = "flag"  # flag | drop | refuse unsupported sentences
    min_entail: float | None = None  # None: the model's calibrated threshold
    min_contra: float | None = None
    verify_facts: bool = True  # a number or name no chunk states makes a sentence unsupported
    # retrieved sources that contradict each other about the question are shown as a conflict,
    # not blended into one answer (verify.conflict; the shipped NLI model, both directions)
    conflicts: bool = True
    min_conflict: float = 0.8  # mean contradiction probability of a pair, both ways (1 false conflict in 167 dev questions)

    def validate(self) -> Settings:
        """Raise :class:`ConfigError` on an impossible combination; return self."""
        for name, allowed in (
            ("markup", MARKUPS),
            ("chunker", CHUNKERS),
            ("keyword", KEYWORDS),
            ("embedder", EMBEDDERS),
            ("fusion", FUSIONS),
            ("gate", GATES),
            ("dlp", DLP_MODES),
            ("verify_policy", VERIFY_POLICIES),
            ("condense", CONDENSERS),
        ):
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")
        if self.size <= 0:
            raise ConfigError(f"size must be positive, got {self.size}")
        if not 0 <= self.overlap < self.size:
            raise ConfigError(f"overlap must be in [0, size), got {self.overlap} with size {self.size}")
        if self.max_tokens < 16:
            raise ConfigError(f"max_tokens must be at least 16, got {self.max_tokens}")
        if not 0.0 <= self.w_kw <= 1.0:
            raise ConfigError(f"w_kw must be between 0 and 1, got {self.w_kw}")
        if self.top_k < 1:
            raise ConfigError(f"top_k must be at least 1, got {self.top_k}")
        for name in ("min_entail", "min_contra", "w_rerank", "answer_min_support", "answer_max_missing", "answer_rescue_sem",
                     "answer_min_answers"):
            v = getattr(self, name)
            if v is not None and not 0.0 <= v <= 1.0:
                raise ConfigError(f"{name} must be between 0 and 1, got {v}")
        if self.rerank and not self.rerank_model:
            raise ConfigError("rerank needs rerank_model, a cross-encoder folder: none ships with microRAG "
                              "(its training data is non-commercial); build one with training/ (training/RERANKER.md)")
        if self.rerank_depth < 1:
            raise ConfigError(f"rerank_depth must be at least 1, got {self.rerank_depth}")
        if self.w_name < 0 or not 0 < self.name_rare <= 1:
            raise ConfigError(f"w_name must be >= 0 and name_rare in (0, 1], got {self.w_name}, {self.name_rare}")
        if self.w_long_doc < 0 or self.long_doc_chunks < 1:
            raise ConfigError(f"w_long_doc must be >= 0 and long_doc_chunks >= 1, got {self.w_long_doc}, {self.long_doc_chunks}")
        if self.answer_rerank is not None and not 1 <= self.answer_rerank <= 32:
            raise ConfigError(f"answer_rerank must be between 1 and 32, got {self.answer_rerank}")
        if self.answer_model and not self.answer_selector:
            raise ConfigError("answer_model reorders the trained selector's choice: it needs answer_selector on")
        if not 0 <= self.context_chunks <= 4:
            raise ConfigError(f"context_chunks must be between 0 and 4, got {self.context_chunks}")
        if self.max_per_source < 0:
            raise ConfigError(f"max_per_source must be >= 0 (0 turns the cap off), got {self.max_per_source}")
        return self

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, Settings] = {
    "default": Settings(),
    "seed": Settings(
        markup="raw",  # the seed indexes files as they are written
        chunker="chars",
        keyword="tfidf",
        embedder="hash",
        w_kw=0.5,
        gate="kw",
        dlp="off",  # the seed indexes text as it is, to reproduce its numbers
        min_kw=0.05,
        safeguards_on_retrieve=False,
        w_long_doc=0.0,  # the seed ranks by the fused score alone
        w_name=0.0,
        answer_min_support=0.0,  # and quotes what it retrieved
        answer_max_missing=1.0,
        answer_rescue_sem=0.0,
        hold_mimics=False,  # the seed answers from what it retrieved, as written
        conflicts=False,
        context_chunks=0,  # and from its hits alone
        answer_selector=False,  # with the hand-set score
    ),
}


def preset(name: str) -> Settings:
    """The named preset; :class:`ConfigError` names the valid ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None


def override(settings: Settings, **changes: Any) -> Settings:
    """A validated copy with ``changes`` applied; ``None`` values are ignored."""
    known = {f.name for f in fields(Settings)}
    unknown = set(changes) - known
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    return replace(settings, **{k: v for k, v in changes.items() if v is not None}).validate()


# ---------------------------------------------------------------- the environment (read here only)

DEFAULT_INDEX = ".microrag"


def index_location() -> str:
    """``$MICRORAG_INDEX`` or ``.microrag`` in the current directory."""
    return os.environ.get("MICRORAG_INDEX") or DEFAULT_INDEX


def pg_schema() -> str:
    """The PostgreSQL schema when the URI names none: ``$MICRORAG_PG_SCHEMA`` or ``microrag``."""
    return os.environ.get("MICRORAG_PG_SCHEMA") or "microrag"


def minilm_files() -> tuple[str, str]:
    """Overrides for the MiniLM graph and tokenizer (``""`` = from the model packages)."""
    return os.environ.get("MICRORAG_MINILM_ONNX", ""), os.environ.get("MICRORAG_MINILM_TOKENIZER", "")


def api_key() -> str:
    """``$MICRORAG_API_KEY``: the key the CLI sends to a server (``--target``) when ``--key`` is not given."""
    return os.environ.get("MICRORAG_API_KEY", "").strip()


def config_file() -> Path | None:
    """The options file: ``$MICRORAG_CONFIG``, else ``./microrag.toml`` when there is one."""
    named = os.environ.get("MICRORAG_CONFIG", "").strip()
    if named:
        return Path(named)
    here = Path("microrag.toml")
    return here if here.is_file() else None


def llm_environment() -> dict[str, str]:
    """The model's settings as the environment gives them (``LLM_*``), for ``microrag config show``."""
    return {k: v for k, v in os.environ.items() if k.startswith("LLM_")}


def otel_environment() -> dict[str, str]:
    """The standard OpenTelemetry variables (``OTEL_*``), for ``serve --trace``'s exporters."""
    return {k: v for k, v in os.environ.items() if k.startswith("OTEL_")}


def single_threaded_blas() -> None:
    """Keep OpenBLAS to one thread unless the user chose otherwise: a one-shot command multiplies
    a handful of vectors, and OpenBLAS's idle threads spun ~0.14 s of CPU per ``retrieve`` (#34).
    Must run before numpy is first imported; a ``OPENBLAS_NUM_THREADS`` the user set wins."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def child_environment(**extra: str) -> dict[str, str]:
    """This process's environment plus ``extra``, for a server we exec."""
    return {**os.environ, **extra}


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to call the model. ``repr`` never shows the key."""

    base_url: str
    api_key: str = field(default="", repr=False)
    model: str = "default"
    temperature: float = 0.2
    max_tokens: int | None = None  # cap the reply (LLM_MAX_TOKENS); small local models can ramble
    top_p: float | None = None  # nucleus sampling, when a caller asks for it (None: the model's default)
    max_retries: int = 2  # extra attempts after the first, for drops before any token
    timeout: float = 60.0
    backoff: float = 0.5  # seconds, doubled per retry

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LLMConfig | None:
        """From ``LLM_BASE_URL``/``LLM_API_KEY``/``LLM_MODEL``; ``None`` if no URL is set."""
        env = os.environ if env is None else env  # the only reader: see above
        url = env.get("LLM_BASE_URL", "").strip()
        if not url:
            return None
        cap = env.get("LLM_MAX_TOKENS", "").strip()
        if cap and not cap.isdigit():
            raise ConfigError(f"LLM_MAX_TOKENS must be a whole number, got {cap!r}")
        return cls(base_url=url.rstrip("/"), api_key=env.get("LLM_API_KEY", ""),
                   model=env.get("LLM_MODEL", "") or "default", max_tokens=int(cap) if cap else None)


def cluster_test_hooks() -> tuple[str, int]:
    """Test-only knobs of distributed ingest (tests/test_cluster.py). ``$MICRORAG_TEST_WORKER_DIES``:
    a marker file; the first Ray task that finds it absent creates it and kills its own worker
    process. ``$MICRORAG_TEST_COMMIT_CHUNKS``: chunks per write transaction (unset: the default)."""
    chunks = os.environ.get("MICRORAG_TEST_COMMIT_CHUNKS", "").strip()
    return os.environ.get("MICRORAG_TEST_WORKER_DIES", ""), int(chunks) if chunks.isdigit() else 0
