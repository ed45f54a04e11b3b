"""The server's configuration: one ``ServerConfig``, hardened by default."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..config import LLMConfig, Settings
from ..store.base import Store
from .auth import KeyStore, Principal
from .defences import Defences
from .state import ServerState


@dataclass
class ServerConfig:
    """Everything the server needs; defaults are the hardened profile."""

    store: Store
    settings: Settings
    keys: KeyStore
    state: ServerState
    corpus: list[str] = field(default_factory=list)  # what /reset re-ingests
    llm: LLMConfig | None = None
    allow_anonymous: bool = True
    input_guard: str = "flag"  # flag | block | off
    output_guard: bool = True
    tools_dir: Path | None = None  # None = the file tool is off
    max_body: int = 1_000_000
    rate_per_minute: int = 120
    # Wrong keys a client address may send per minute before every key it sends is
    # refused (429) for the rest of that minute: a key cannot be guessed online.
    key_failures_per_minute: int = 10
    # Host headers served; others get 400 (a DNS-rebinding page cannot reach a
    # loopback server). None: any host (only behind a proxy that checks it).
    allowed_hosts: tuple[str, ...] | None = ("127.0.0.1", "localhost", "[::1]")
    verify: bool = True  # NLI-check every answer sentence (requests may turn it off)
    # Wall-clock seconds a request may take: checked between steps, and the model's
    # stream is cut at it (the answer so far is kept and flagged).
    request_seconds: float = 60.0
    # Every defence, on; defences.LAB_BASELINE turns them off for `microrag redteam`.
    defences: Defences = field(default_factory=Defences)


# The page runs only its own script and styles; nothing from a document can execute.
UI_HEADERS = {"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
              "object-src 'none'; frame-ancestors 'none'; base-uri 'none'",
              "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}

# Who every caller is when authentication is off (the lab baseline).
EVERYONE_ADMIN = Principal("anyone", "admin", frozenset({"public", "internal", "restricted"}), trusted=True)
