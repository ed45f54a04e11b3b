"""``microrag mcp`` - the index as an MCP server on stdin/stdout, for an MCP client to launch.

Tools: ``search``, ``fetch``, ``answer``, ``list_collections`` (``server/mcp.py``), through
the same policy as ``microrag serve``: the same index, keys, clearance, guards and audit
trail (beside the index, where ``serve`` keeps them), and the same options (``serve.py``'s
``add_server_options`` / ``server_config``). Every call is made as the key of ``--key`` or
``$MICRORAG_API_KEY`` (better: a client's config passes it in the server's environment,
where other users cannot read it); without one, as ``serve``'s anonymous caller: a reader
of ``public`` documents (``--no-anonymous`` refuses to start instead). The same index over
HTTP is ``microrag serve``'s ``/mcp``. Needs the ``mcp`` extra, imported only when the
command runs; stdout carries the protocol, diagnostics go to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util

from ..config import api_key
from ..errors import MicroRAGError
from ..server.defences import HARDENED
from ..store import default_location, store_exists
from .options import diag
from .serve import add_server_options, server_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mcp", help="serve the index to an MCP client over stdio (search, fetch, answer, list_collections)")
    p.add_argument("--key", metavar="KEY",
                   help="the API key every call is made as (default: $MICRORAG_API_KEY; none: an anonymous reader "
                        "of public documents, as `serve` treats a caller without one)")
    add_server_options(p)
    p.set_defaults(run=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("fastapi") is None:
        raise MicroRAGError("microrag mcp needs its extras: pip install 'microrag-engine[mcp,server]'")
    from ..server.app import mcp_sdk

    if not mcp_sdk():  # absent, or the 1.x SDK (FastMCP) another package brought
        raise MicroRAGError("microrag mcp needs its extras: pip install -U 'microrag-engine[mcp,server]' (the MCP SDK 2.x)")
    from ..server.context import ServerContext
    from ..server.mcp import serve_stdio

    location = args.index or default_location()
    if not args.corpus and not store_exists(location):
        # A client may launch us in any directory: never leave an empty index behind there.
        raise MicroRAGError(f"no index at {location}; build one with: microrag ingest PATH --index {location} "
                            "(or pass --corpus PATH); give MCP clients an absolute --index")
    key = args.key or api_key()
    cfg = server_config(args, HARDENED)
    # Refuse a bad start before the engine loads; every call checks the key again.
    who = cfg.keys.resolve(key) if key else None
    if key and who is None:
        raise MicroRAGError("invalid or revoked API key (--key or $MICRORAG_API_KEY); see: microrag keys list")
    if not key and not cfg.allow_anonymous:
        raise MicroRAGError("--no-anonymous: give an API key with --key or $MICRORAG_API_KEY")
    ctx = ServerContext(cfg)
    if not args.quiet:
        caller = f"{who.name} ({who.role}; reads {', '.join(sorted(who.clearance))})" if who else "anonymous (reads public)"
        diag(f"MCP over stdio: {location} as {caller}; "
             f"answers by {'the LLM' if cfg.llm else 'the extractive answerer'}")
    serve_stdio(ctx, key)
    return 0
