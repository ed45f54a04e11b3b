"""``microrag verify`` - check an answer's sentences against context chunks (NLI).

Context is given as chunks, one per paragraph; each answer sentence gets a
verdict (supported / unsupported / contradicted), its probability and the
chunk that decided it; with ``--question``, also whether the supported sentences
answer that question (a grounded quote about something else does not). The checking itself is ``verify/``; this module only
parses arguments and prints. ``ask --verify`` prints verdicts with ``verdict_line``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from ..errors import MicroRAGError
from ..generate import Relevance, relevance
from ..index.embed import make_embedder
from ..verify import SentenceVerdict, verify_with
from .options import add_output, add_verification, settings_for


def register(sub: argparse._SubParsersAction) -> None:
    v = sub.add_parser("verify", help="check an answer's sentences against context chunks (NLI)")
    v.add_argument("--context", required=True, metavar="FILE",
                   help="the chunks, one per paragraph (blank-line separated); '-' for stdin")
    v.add_argument("--answer", required=True, metavar="TEXT", help="the answer to check; '-' for stdin")
    v.add_argument("--question", metavar="TEXT",
                   help="the question it answers: also check that the supported sentences answer it")
    add_verification(v)
    add_output(v)
    v.set_defaults(run=cmd_verify)


MARKS = {"entailed": "✓ supported   ", "neutral": "? unsupported ", "contradicted": "✗ contradicted"}
OFF_MARK = "~ off-question"  # grounded, but not about what was asked: not counted as support


def verdict_line(v: SentenceVerdict) -> str:
    """One sentence's verdict for a terminal: mark, probability, deciding chunk, sentence."""
    where = f" [{v.chunk}]" if v.chunk is not None else ""
    missing = f"  (not in the sources: {', '.join(v.missing)})" if v.missing else ""
    off = "  (does not address the question)" if v.on_question is False else ""
    mark = OFF_MARK if v.verdict == "entailed" and v.on_question is False else MARKS[v.verdict]
    return f"{mark} {v.probability:.2f}{where}  {v.sentence}{missing}{off}"


def _read_arg(value: str, what: str) -> str:
    if value == "-":
        return sys.stdin.read()
    if what == "context":
        try:
            return Path(value).read_text(encoding="utf-8")
        except OSError as e:
            raise MicroRAGError(f"cannot read --context {value}: {e.strerror}; give a text file with one chunk per paragraph") from None
        except UnicodeDecodeError:
            raise MicroRAGError(f"--context {value} is not UTF-8 text; convert it (e.g. iconv -t UTF-8)") from None
    return value


def cmd_verify(args: argparse.Namespace) -> int:
    if args.context == "-" and args.answer == "-":
        raise MicroRAGError("only one of --context and --answer can be read from stdin")
    context, answer = _read_arg(args.context, "context"), _read_arg(args.answer, "answer")
    chunks = [p.strip() for p in re.split(r"\n\s*\n", context) if p.strip()]
    if not chunks:
        raise MicroRAGError("--context holds no text; give one chunk per paragraph")
    if not answer.strip():
        raise MicroRAGError("--answer is empty")
    s = settings_for(args, "default")
    if args.question is not None and not args.question.strip():
        raise MicroRAGError("--question is empty")

    def relevance_of(question: str, texts: list[str], sources: list[str]) -> Relevance:
        embedder = make_embedder(s.embedder)
        return relevance(question, texts, sources, embedder, common=embedder.vocabulary())

    result = verify_with(s, answer, [(str(i + 1), c) for i, c in enumerate(chunks)], question=args.question,
                         relevance_of=relevance_of)
    if args.json:
        rows = [{"sentence": v.sentence, "verdict": v.verdict, "probability": v.probability,
                 "chunk": int(v.chunk) if v.chunk else None, "on_question": v.on_question} for v in result.sentences]
        json.dump(rows, sys.stdout, ensure_ascii=False, indent=1)
        print()
    else:
        for v in result.sentences:
            print(verdict_line(v))
        print(result.summary())
        if result.text != answer:
            print("\nAnswer after policy:\n" + result.text)
    return 0 if result.supported or s.verify_policy == "flag" else 1
