"""microRAG: a small, fast, auditable retrieval-augmented generation engine.

The pipeline, one module per step:
  chunk.py    1 · load documents, split into chunks
  index.py    2 · index twice: keyword (tfidf | bm25) and embedding (hash | minilm)
  retrieve.py 3 · hybrid retrieve: fuse, grounding gate, diversity cap
  augment.py  4 · prompt assembly, retrieved text marked as data
  generate.py 5 · OpenAI-compatible SSE client, extractive answerer
  verify.py   6 · answer verification: each sentence against the chunks (NLI, ``nli.py``)
  rerank.py   3b· optional cross-encoder rerank of the fused candidates (off by default)
``pipeline.Engine`` wires them; ``cli`` is the command line. Importing this
package needs only the core dependencies; models load when first used.
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
