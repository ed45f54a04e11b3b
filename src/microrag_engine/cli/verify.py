"""``microrag verify`` and the verification flags ``ask`` shares with it.

Context is given as chunks, one per paragraph; each answer sentence gets a
verdict (supported / unsupported / contradicted), its probability and the
chunk that decided it. The checking itself is ``verify.py``; this module only
parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from ..config import VERIFY_POLICIES
from ..errors import MicroRAGError


def unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}")
    return value


def verify_flags() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("verification")
    g.add_argument("--policy", choices=VERIFY_POLICIES,
                   help="unsupported sentences: flag them (default), drop them, or refuse the answer")
    g.add_argument("--nli", metavar="MODEL",
                   help="'shipped' (default), 'llm' (LLM_BASE_URL as judge), or a Hugging Face model folder")
    g.add_argument("--min-entail", type=unit_float, metavar="P",
                   help="entailment probability a sentence needs (default: the model's calibrated value)")
    return p



MARKS = {"entailed": "✓ supported   ", "neutral": "? unsupported ", "contradicted": "✗ contradicted"}


def verdict_line(v) -> str:
    """One sentence's verdict for a terminal: mark, probability, deciding chunk, sentence."""
    where = f" [{v.chunk}]" if v.chunk is not None else ""
    missing = f"  (not in the sources: {', '.join(v.missing)})" if v.missing else ""
    return f"{MARKS[v.verdict]} {v.probability:.2f}{where}  {v.sentence}{missing}"


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
    from ..verify import verify
    from ..verify.nli import load_nli

    if args.context == "-" and args.answer == "-":
        raise MicroRAGError("only one of --context and --answer can be read from stdin")
    context, answer = _read_arg(args.context, "context"), _read_arg(args.answer, "answer")
    chunks = [p.strip() for p in re.split(r"\n\s*\n", context) if p.strip()]
    if not chunks:
        raise MicroRAGError("--context holds no text; give one chunk per paragraph")
    if not answer.strip():
        raise MicroRAGError("--answer is empty")
    from .main import _settings

    s = _settings(args, args.preset or "default")
    result = verify(answer, [(str(i + 1), c) for i, c in enumerate(chunks)], load_nli(s.nli),
                    policy=s.verify_policy, min_entail=s.min_entail, min_contra=s.min_contra,
                    fact_check=s.verify_facts)
    if args.json:
        rows = [{"sentence": v.sentence, "verdict": v.verdict, "probability": v.probability,
                 "chunk": int(v.chunk) if v.chunk else None} for v in result.sentences]
        json.dump(rows, sys.stdout, ensure_ascii=False, indent=1)
        print()
    else:
        for v in result.sentences:
            print(verdict_line(v))
        print(result.summary())
        if result.text != answer:
            print("\nAnswer after policy:\n" + result.text)
    return 0 if result.grounded or s.verify_policy == "flag" else 1
