"""The lab: a server on loopback, hardened or the naive baseline, for the red team to attack.

In:  a scratch folder, a ``Profile`` (``HARDENED`` or ``LAB``), the URL of a
model (``compliant.serve``), the knowledge base to ingest. Out: the running uvicorn
server, its URL and one key per role (admin, trusted, contributor, reader).
Used by ``tests/redteam/test_redteam.py`` and ``benchmarks/redteam_report.py``.
"""

from __future__ import annotations

import secrets
import socket
import string
import threading
import time
from pathlib import Path

import uvicorn

from ..config import LLMConfig, override, preset
from ..ingest import ingest_paths
from ..server.app import ServerConfig, create_app
from ..server.auth import KeyStore
from ..server.defences import Profile
from ..server.state import ServerState
from ..store import open_store
from .attacks import SECRET_TOOL_FILE


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tmp: Path, profile: Profile, llm_url: str, kb: Path, tools_dir: Path | None = None, input_guard: str = "flag"):
    """A server with ``profile`` on ``kb``: (server, url, keys by role); stop it with
    ``server.should_exit = True``. A ``tools_dir`` also gets the public file holding an AWS
    key id that the red team asks the file tool for (``attacks.SECRET_TOOL_FILE``)."""
    if tools_dir is not None:
        planted = tools_dir / SECRET_TOOL_FILE
        planted.write_text("Deploy notes. The deploy user's access key id is AKIA"
                           + "".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(16)) + ".\n")
        planted.with_name(planted.name + ".label").write_text("public\n")
    settings = override(preset("default"), **profile.settings)
    store = open_store(tmp / "ix")
    ingest_paths(store, [kb], settings, collection="")
    keys = KeyStore(tmp / "keys.sqlite")
    roles = {"admin": keys.add("root", "admin", ["public", "internal", "restricted"]),
             "contributor": keys.add("mallory", "contributor", ["public"]),
             # a trusted insider whose key is named like an operator document's stem (red team #9)
             "trusted": keys.add("password_policy", "contributor", ["public"], trusted=True),
             "reader": keys.add("rita", "reader", ["public"])}
    cfg = ServerConfig(store=store, settings=settings, keys=keys, state=ServerState(tmp / "state.sqlite"),
                       llm=LLMConfig(base_url=llm_url, backoff=0.0), defences=profile.defences, rate_per_minute=10_000,
                       tools_dir=tools_dir, verify=profile.verify, input_guard=input_guard)
    port = _port()
    server = uvicorn.Server(uvicorn.Config(create_app(cfg), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}", roles
