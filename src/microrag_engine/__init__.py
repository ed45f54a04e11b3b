"""microRAG: a small, fast, auditable retrieval-augmented generation engine.

The package tree reads as the pipeline (imports only flow downwards):
  errors types text rx config dlp guard   the vocabulary every step shares
  runtime/      model runtimes: onnxruntime, numpy BERT, cross-encoders, the LLM client
  load/         1a · paths and uploads -> documents (md, rst, html, pdf, office, notebooks, e-books, jsonl)
  chunk.py      1b · documents -> chunks
  index/        2  · index twice: keyword (tfidf | bm25) and embedding (hash | minilm)
  retrieve/     3  · hybrid retrieve: fuse, grounding gate, diversity cap (optional rerank)
  augment.py    4  · prompt assembly, retrieved text marked as data
  generate.py   5  · extractive answerer (the LLM streams through runtime/llm.py)
  tools.py      5b · the file tool and when a model's call may run
  verify/       6  · answer verification: each sentence against the chunks (NLI)
  store/ ingest.py watch.py   persistence: ids by collection, one DLP policy, folders kept in sync
  engine.py     ``Engine``: the one place the steps are wired
  server/ cli/ redteam/ eval/   front ends
Importing this package needs only the core dependencies; models load when first used.
"""

__version__ = "0.1.0"

from .config import PRESETS, Settings, override, preset  # noqa: E402
from .errors import MicroRAGError  # noqa: E402

__all__ = ["Engine", "PRESETS", "Settings", "override", "preset", "MicroRAGError", "load_nli", "__version__"]


def __getattr__(name: str):
    # Engine pulls numpy & friends; keep `import microrag_engine` itself light.
    if name == "Engine":
        from .engine import Engine

        return Engine
    if name == "load_nli":
        from .verify.nli import load_nli

        return load_nli
    raise AttributeError(name)
