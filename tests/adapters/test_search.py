"""What both adapters share (``adapters.search``), and that the core never needs the extras."""

from __future__ import annotations

import subprocess
import sys

import pytest

from microrag_engine.adapters.search import METADATA_KEYS, Found, check_args
from microrag_engine.client import Client, Source, to_hit
from microrag_engine.errors import ConfigError
from microrag_engine.types import Chunk, Hit


def test_the_core_and_the_shared_part_import_no_framework() -> None:
    # A fresh interpreter: this one has LangChain and LlamaIndex loaded by the other test modules.
    code = ("import sys, microrag_engine, microrag_engine.adapters, microrag_engine.adapters.search, microrag_engine.engine\n"
            "loaded = sorted(m for m in sys.modules if m.startswith(('langchain', 'llama_index')))\n"
            "assert not loaded, loaded")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_metadata_of_a_paged_hit() -> None:
    hit = Hit(Chunk("manual.pdf#7", "manual.pdf", 7, 0, 10, "Torque the bolts.", page=3), 0.9, 0.8, 1.0, 4.2, 0.71)
    m = Found(hit, "internal").metadata()
    assert tuple(m) == METADATA_KEYS
    assert m == {"source": "manual.pdf", "doc": "manual.pdf", "chunk": 7, "id": "manual.pdf#7", "page": 3, "hybrid": 0.9,
                 "kw": 0.8, "em": 1.0, "citation": "[source: manual.pdf · chunk 7 · p. 3]", "label": "internal"}


def test_a_server_hit_cites_as_a_local_one() -> None:
    local = Hit(Chunk("hr/leave.md#2", "hr/leave.md", 2, 40, 90, "20 days a year."), 0.7, 0.6, 0.8, 3.0, 0.5)
    served = Source(doc="hr/leave.md", chunk=2, id="hr/leave.md#2", page=0, hybrid=0.7, kw=0.6, em=0.8, raw_kw=3.0, raw_em=0.5,
                    text="20 days a year.", label="public")  # as /search sends it: no character span
    assert Found(to_hit(served), "public").citation == Found(local, "public").citation == "[source: hr/leave.md · chunk 2]"


def test_check_args() -> None:
    client = Client("http://127.0.0.1:9")  # never contacted
    check_args(None, client, None)
    with pytest.raises(ConfigError, match="exactly one"):
        check_args(None, None, None)
    with pytest.raises(ConfigError, match="local index only"):
        check_args(None, client, ["public"])
    with pytest.raises(ConfigError, match="at least 1"):
        check_args(None, client, top_k=0)
