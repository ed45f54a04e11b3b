"""``microrag`` - the command line: one module per group of commands.

  query.py   retrieve QUERY · ask QUERY · rank (queries on stdin)
  chat.py    chat (a conversation in the terminal: local index or --target server)
  index.py   ingest PATH... · delete DOC... · check · documents
  eval.py    eval --dataset DIR
  verify.py  verify --context FILE --answer TEXT
  serve.py   serve
  mcp.py     mcp (the index as an MCP server over stdio; serve has it over HTTP at /mcp)
  keys.py    keys add | list | revoke
  backup.py  backup DEST · restore SRC (a folder index, copied while it is live)
  config.py  config show [COMMAND] (microrag.toml: a [command] table of options per command)
  lab.py     compliant-llm · local-llm · redteam
Each command declares only the options it uses (``options.py`` holds the groups),
so a flag that would do nothing there is an error. Results go to stdout,
diagnostics to stderr. A user mistake prints one line ``microrag: error: ...`` and
exits non-zero; it never prints a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..config import single_threaded_blas
from ..errors import MicroRAGError

log = logging.getLogger("microrag")

# Command -> the module that declares it. A run imports only its command's module (a query
# does not load the server, the evaluator or the red-team lab: part of a fast start);
# help, and anything unrecognised, loads them all.
GROUPS = ("query", "chat", "verify", "index", "review", "serve", "mcp", "keys", "backup", "config", "lab", "eval")
COMMANDS = {"retrieve": "query", "ask": "query", "rank": "query", "chat": "chat", "verify": "verify",
            "ingest": "index", "delete": "index", "check": "index", "documents": "index", "index": "index",
            "review": "review", "serve": "serve", "mcp": "mcp", "keys": "keys", "backup": "backup", "restore": "backup",
            "compliant-llm": "lab", "local-llm": "lab", "redteam": "lab", "eval": "eval", "config": "config"}


# Commands that answer one question and exit. Each makes a few small BLAS calls, after which
# OpenBLAS's idle worker threads spin for about 0.1 s of CPU each (its thread timeout): for these
# a BLAS thread pool costs more CPU than the whole query. Set before numpy loads (the command's
# module imports it); a user's own OPENBLAS_NUM_THREADS wins.
ONE_SHOT = frozenset({"retrieve", "ask", "verify"})


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv`` naming a command, only that command's group is declared."""
    parser = argparse.ArgumentParser(
        prog="microrag",
        description="microRAG: chunk -> index (keyword + embedding) -> hybrid retrieve -> augment -> generate.",
        epilog="Examples:\n"
               "  microrag ingest my-docs/\n"
               "  microrag retrieve \"how do I reset my password?\"\n"
               "  microrag ask \"how many vacation days do I get?\"\n"
               "  microrag chat                        (or: microrag chat --target http://127.0.0.1:8000)\n"
               "  printf 'vpn access\\n' | microrag rank --corpus chunks.jsonl\n"
               "Set LLM_BASE_URL (and LLM_API_KEY, LLM_MODEL) to answer with an OpenAI-compatible model.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"microrag {__version__}")
    parser.add_argument("--config", metavar="FILE",
                        help="options file (default: $MICRORAG_CONFIG, else ./microrag.toml if present): "
                             "one [command] table of long options each; the command line wins")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    first = command_of(argv or ())
    needed = GROUPS if argv is None or first not in COMMANDS else (COMMANDS[first],)
    if first in ONE_SHOT:
        single_threaded_blas()
    for group in needed:
        importlib.import_module(f"{__package__}.{group}").register(sub)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The command named in ``argv`` (the first word that is not an option or --config's value)."""
    words = iter(argv)
    for word in words:
        if word == "--config":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser | None:
    """The sub-parser of ``command`` in ``parser`` (None: no such command)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(command)
    return None


class _StderrFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"microrag: {record.levelname.lower()}: {record.getMessage()}"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    command = command_of(argv)
    try:
        if command is not None and command != "config" and (sub := command_parser(parser, command)) is not None:
            from .config import load_into

            named = argparse.ArgumentParser(add_help=False)
            named.add_argument("--config")
            load_into(sub, command, named.parse_known_args(argv)[0].config)
    except MicroRAGError as exc:
        print(f"microrag: error: {exc}", file=sys.stderr)
        return exc.exit_code
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StderrFormatter())
    log.handlers[:] = [handler]
    log.setLevel(logging.ERROR if vars(args).get("quiet") else logging.WARNING)
    log.propagate = False
    try:
        return args.run(args)
    except MicroRAGError as exc:
        print(f"microrag: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `microrag retrieve ... | head` is fine
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
