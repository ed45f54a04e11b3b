"""onnxruntime sessions and the model folders shipped inside the package."""

from __future__ import annotations

import os
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path


def shipped_dir(name: str) -> Path:
    """Folder of a model that ships inside the package (``minilm``, ``nli`` or ``rerank``)."""
    return Path(str(files("microrag_engine") / "models" / name))


def cpu_count() -> int:
    """CPUs this process may actually run on (its affinity / cgroup set, not the host's)."""
    return max(1, len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else max(1, os.cpu_count() or 1)


def ort_session(path: Path, threads: int | None = None, disabled_optimizers: Sequence[str] = (), spin: bool = False):
    """An onnxruntime CPU session sized for this process (shared by embedder, NLI, reranker).

    ``threads``: intra-op threads (default: every CPU this process may use).
    ``disabled_optimizers``: onnxruntime graph transformers to skip at load, by name.
    ``spin``: pool threads spin between runs (bulk work only: see ``MiniLMEmbedder._session``)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    # onnxruntime sizes its pool from the host's cores, not our cgroup's: oversubscribed
    # threads ran 3x slower here. Use the CPUs this process may actually run on.
    opts.intra_op_num_threads = threads or cpu_count()
    # Idle pool threads must not spin: they would steal the cores BLAS and the server need.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    extra = {"disabled_optimizers": list(disabled_optimizers)} if disabled_optimizers else {}
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"], **extra)
