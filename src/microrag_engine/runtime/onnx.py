"""onnxruntime sessions and the model folders shipped inside the package."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path


def shipped_dir(name: str) -> Path:
    """Folder of a model that ships inside the package (``nli`` or ``rerank``)."""
    return Path(str(files("microrag_engine") / "models" / name))


def ort_session(path: Path):
    """An onnxruntime CPU session sized for this process (shared by embedder, NLI, reranker)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    # onnxruntime sizes its pool from the host's cores, not our cgroup's: oversubscribed
    # threads ran 3x slower here. Use the CPUs this process may actually run on.
    opts.intra_op_num_threads = max(1, len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else 0
    # Idle pool threads must not spin: they would steal the cores BLAS and the server need.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
