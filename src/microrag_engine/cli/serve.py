"""``microrag serve`` - the HTTP API over an index, hardened by default.

Every defence of ``server/defences.py`` is on; ``--profile lab-baseline`` turns them
all off (loopback only, with a banner) as a target for ``microrag redteam``. The
server extra (fastapi, uvicorn) is imported only when the command runs.
``add_server_options`` and ``server_config`` are what every door of the server shares
(``microrag mcp`` serves the same index and policy over stdio).
"""

from __future__ import annotations

import argparse
import logging.config
from pathlib import Path
from typing import Any

from ..config import LLMConfig, otel_environment, override
from ..errors import MicroRAGError
from ..ingest import ingest_paths
from ..runtime import tracing
from ..server.auth import KeyStore
from ..server.config import ServerConfig
from ..server.defences import HARDENED, LAB, PROFILES, Profile
from ..server.state import ServerState
from ..server.tables import PostgresTables, adopt
from ..store import default_location, open_store
from ..store.postgres import PostgresStore
from .keys import server_dir
from .options import (
    add_conversation,
    add_corpus,
    add_dlp,
    add_index,
    add_output,
    add_preset,
    add_retrieval,
    add_verification,
    diag,
    diag_to,
    preset_for,
    settings_for,
)


def register(sub: argparse._SubParsersAction) -> None:
    sv = sub.add_parser("serve", help="run the HTTP API (hardened defaults)")
    sv.add_argument("--host", default="127.0.0.1", help="interface to bind (default: %(default)s)")
    sv.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    sv.add_argument("--allowed-host", action="append", metavar="NAME",
                    help="a Host header to serve (repeatable; default: the loopback names and --host); "
                         "'*' serves any, for use behind a proxy that checks it")
    sv.add_argument("--trusted-proxy", action="append", metavar="IP",
                    help="honour X-Forwarded-For/-Proto only from this proxy address (repeatable; default: never)")
    sv.add_argument("--profile", choices=sorted(PROFILES), default="hardened",
                    help="lab-baseline = the naive server: every defence of server/defences.py off, no DLP, no "
                         "diversity cap; loopback only, a target for `microrag redteam`")
    sv.add_argument("--log-format", choices=("text", "json"), default="text",
                    help="json: one JSON object per line (time, level, logger, message, request_id) (default: %(default)s)")
    sv.add_argument("--grace-seconds", type=float, default=30.0, metavar="S",
                    help="on SIGTERM/SIGINT: stop accepting, let answers and uploads in flight finish this long, "
                         "then exit (default: %(default)s)")
    sv.add_argument("--trace", action="store_true",
                    help="OpenTelemetry spans per request and pipeline step (the otel extra), exported as "
                         "OTEL_TRACES_EXPORTER says: console (the default without an OTLP endpoint) or otlp")
    add_server_options(sv)
    sv.set_defaults(run=cmd_serve)


def add_server_options(p: argparse.ArgumentParser) -> None:
    """The options of every door of the server (``serve``, ``mcp``): the index, how it is
    built, and the policy every call goes through."""
    p.add_argument("--no-anonymous", action="store_true", help="require an API key for every call")
    p.add_argument("--input-guard", choices=("flag", "block", "off"), default="flag",
                   help="injection-looking questions: flag in the audit trail (default) or block")
    p.add_argument("--no-verify", action="store_true",
                   help="do not NLI-check answers by default (a request can still ask with \"verify\": true)")
    p.add_argument("--tools-dir", metavar="DIR", help="enable the file-read tool, confined to DIR (default: off)")
    p.add_argument("--request-seconds", type=float, default=60.0, metavar="S",
                   help="wall-clock budget of one request; the model's answer is cut there (default: %(default)s)")
    p.add_argument("--rate-per-minute", type=int, default=120, metavar="N",
                   help="requests one key (or anonymous address) may make per minute; more get 429 (default: %(default)s)")
    add_index(p)
    p.add_argument("--standby", metavar="URI",
                   help="with a postgresql:// index: read from this hot standby (libpq URI; several hosts allowed), "
                        "write to the index's primary; a caller's own uploads are read from the primary until replayed")
    add_corpus(p)
    add_preset(p)
    add_dlp(p)
    add_retrieval(p, labels=False)  # a caller's labels come from their key
    add_conversation(p)
    add_verification(p)
    add_output(p, json=False)


def server_config(args: argparse.Namespace, profile: Profile = HARDENED, **extra: Any) -> ServerConfig:
    """The server's configuration from ``add_server_options``' options: the store (created
    if absent, ``--corpus`` ingested into an empty one), the settings it was built with,
    keys and state beside it (``keys.server_dir``). ``extra`` goes to ``ServerConfig``."""
    store = open_store(args.index or default_location(), create=True, standby=args.standby)
    name = args.preset or preset_for(store.meta())
    settings = override(settings_for(args, name), dlp=args.dlp)
    settings = override(settings, **profile.settings)
    if args.corpus and not store.documents():
        report = ingest_paths(store, args.corpus, settings, collection="")  # ids as /reset and --corpus runs give them
        if not args.quiet:
            diag(f"indexed {', '.join(args.corpus)}: {report.summary()}")
    sdir = server_dir(args.index)
    # On PostgreSQL the keys, rate limits, review queue and audit trail live in the database,
    # shared by every replica; a server on a folder keeps them in SQLite files beside it.
    shared = PostgresTables(store) if isinstance(store, PostgresStore) else None
    keys = KeyStore(shared or sdir / "keys.sqlite")
    state = ServerState(shared or sdir / "server.sqlite")
    if shared is not None:  # a server of an older release kept them in files here: adopt them once
        adopted = adopt(shared, sdir / "keys.sqlite", sdir / "server.sqlite")
        if adopted and not args.quiet:
            diag(f"moved into the database from {sdir}/: {', '.join(adopted)} (those files are no longer read)")
    return ServerConfig(store=store, settings=settings, keys=keys,
                        state=state, corpus=list(args.corpus or []),
                        llm=LLMConfig.from_env(), allow_anonymous=not args.no_anonymous,
                        defences=profile.defences,
                        input_guard=args.input_guard, tools_dir=Path(args.tools_dir) if args.tools_dir else None,
                        verify=not args.no_verify and profile.verify, request_seconds=args.request_seconds,
                        rate_per_minute=args.rate_per_minute, **extra)


def cmd_serve(args: argparse.Namespace) -> int:
    try:  # the server extra: fastapi and uvicorn
        import uvicorn

        from ..server.app import create_app, mcp_sdk
        from ..server.logs import log_config
    except ImportError:
        raise MicroRAGError("the server needs its extra: pip install 'microrag-engine[server]'") from None
    logging_config = log_config(args.log_format, "warning" if args.quiet else "info")
    if args.log_format == "json":  # from the first line on, every stderr line is one JSON object
        logging.config.dictConfig(logging_config)
        diag_to(logging.getLogger("microrag"))
    loopback = args.host in ("127.0.0.1", "localhost", "::1")
    profile = PROFILES[args.profile]
    baseline = profile is LAB
    if baseline:
        if not loopback:
            raise MicroRAGError("the lab-baseline profile is deliberately vulnerable and binds to loopback only")
        diag("WARNING: lab-baseline profile - every defence off (" + ", ".join(LAB.defences.off()) + "), no DLP, "
              "no diversity cap. A demonstration target for `microrag redteam`; never expose it.")
    elif not loopback and not args.quiet:
        diag(f"warning: listening on {args.host}: put TLS and a firewall in front of it")
    if args.trace:  # before the index opens: its first ingest is traced too
        where = tracing.setup(otel_environment())
        if not args.quiet:
            diag(f"tracing: spans to {where} (no question or document text is recorded)")
    cfg = server_config(args, profile, allowed_hosts=_allowed_hosts(args))
    app = create_app(cfg)
    if not args.quiet:
        diag(f"serving {args.index or default_location()} on http://{args.host}:{args.port} "
              f"(OpenAPI schema at /openapi.json{'; MCP at /mcp' if mcp_sdk() else ''}; "
              f"answers by {'the LLM' if cfg.llm else 'the extractive answerer'})")
    # uvicorn's access log prints paths, never headers: keys stay out of logs.
    # Proxy headers are off unless a proxy is named: from anyone else X-Forwarded-For
    # would pick the rate-limit bucket (rotate it to evade; forge it to lock others out).
    # Every line carries its request's id (server/logs.py); the access line is the app's own.
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning" if args.quiet else "info",
                log_config=logging_config, access_log=False,
                proxy_headers=bool(args.trusted_proxy), forwarded_allow_ips=",".join(args.trusted_proxy or []) or None,
                timeout_graceful_shutdown=max(0.0, args.grace_seconds))
    return 0


def _allowed_hosts(args) -> tuple[str, ...] | None:
    names = list(args.allowed_host or [])
    if "*" in names:
        return None
    host = f"[{args.host}]" if ":" in args.host and not args.host.startswith("[") else args.host
    return tuple(dict.fromkeys(n.lower() for n in ["127.0.0.1", "localhost", "[::1]", *names,
                                                   *([host] if args.host not in ("0.0.0.0", "::") else [])]))
