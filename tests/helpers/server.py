"""A real microRAG server (uvicorn on a loopback port, in a thread) with one key per role."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import uvicorn

from helpers.net import free_port
from microrag_engine.config import preset
from microrag_engine.ingest import ingest_paths
from microrag_engine.server.app import ServerConfig, create_app
from microrag_engine.server.auth import KeyStore
from microrag_engine.server.state import ServerState
from microrag_engine.store import open_store

HANDBOOK = {
    "vpn.md": "# VPN\n\nThe corporate VPN uses WireGuard on UDP port 51820. Install the client from the portal.",
    "leave.md": "# Leave\n\nEmployees get 20 vacation days a year. Up to 5 unused days carry over to March 31.",
    "deploy.md": "# Deploys\n\nProduction deploys are approved by the release captain of the owning team in Shipyard.",
    "salaries.md": "---\nlabel: restricted\n---\n# Salary bands\n\nThe engineering salary band L5 pays 180000 to 210000 dollars.",
}




class Running:
    """A uvicorn server on a loopback port in a thread, with the keys it was given."""

    def __init__(self, tmp: Path, location: str | None = None, **overrides) -> None:
        corpus = self.corpus = tmp / "corpus"
        corpus.mkdir(exist_ok=True)
        for name, text in HANDBOOK.items():
            (corpus / name).write_text(text)
        store = open_store(location or tmp / "ix")
        if not store.documents():
            ingest_paths(store, [corpus], preset("default"), collection="")
        keys = self.keystore = KeyStore(tmp / "srv" / "keys.sqlite")
        self.key = {
            "admin": keys.add(f"root{len(keys.list())}", "admin", ["public", "internal", "restricted"]),
            "reader": keys.add(f"rita{len(keys.list())}", "reader", ["public"]),
            "contrib": keys.add(f"bob{len(keys.list())}", "contributor", ["public", "internal"]),
            "trusted": keys.add(f"tess{len(keys.list())}", "contributor", ["public"], trusted=True),
        }
        self.names = {k: next(r["name"] for r in keys.list() if r["name"].startswith(p))
                      for k, p in (("contrib", "bob"), ("trusted", "tess"))}
        settings = overrides.pop("settings", preset("default"))
        cfg = ServerConfig(store=store, settings=settings, keys=keys, state=ServerState(tmp / "srv" / "server.sqlite"),
                           corpus=[str(corpus)], **overrides)
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(create_app(cfg), host="127.0.0.1", port=self.port, log_level="info"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started and time.time() < deadline:
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"

    def call(self, method: str, path: str, who: str | None = None, headers: dict | None = None, **kw) -> httpx.Response:
        headers = {**({"Authorization": f"Bearer {self.key[who]}"} if who else {}), **(headers or {})}
        return httpx.request(method, self.url + path, headers=headers, timeout=60, **kw)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
