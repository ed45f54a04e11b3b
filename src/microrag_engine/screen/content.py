"""Everything a document's own text says before it goes live (no index needed).

One list of reasons, each starting with its kind (``hidden text:``, ``stuffing:``,
``solicitation:``, ``injection:``), from: hidden text (``screen.hidden``), shape
(``screen.shape``) and the trained injection classifier (``screen.injection``) where
the flagged window speaks to a model. The server adds the checks that
need the index (copies, the collision probe: ``server.screening``); ``microrag ingest``
runs these alone.
"""

from __future__ import annotations

from .. import guard, rx
from . import injection
from .hidden import hidden_reasons
from .shape import solicitation, stuffed

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
    r"|your (?:instructions|rules|guidelines|programming|prompt|system|restrictions|filters|policies))\b")


def injections(stored: str) -> list[injection.Flagged]:
    """The classifier's windows that hold a document: flagged, and addressed to a model."""
    return [f for f in injection.flagged(stored) if ADDRESSES_MODEL.search(guard.canonical(f.text))]


def content_reasons(name: str, raw: str, stored: str) -> list[str]:
    """Why the document ``name`` (sent as ``raw``, to be indexed as ``stored``) should be held.
    The phrase heuristics of ``guard.injection_check`` are not among them: they flag about half
    of the Python docs' pages (a flag for the reviewer, not a reason to hold)."""
    reasons = hidden_reasons(name, raw, stored)
    reasons += [r for r in (stuffed(stored), solicitation(stored)) if r]
    found = injections(stored)
    if found:
        reasons.append(f"injection: {len(found)} passage(s) read as instructions to a model "
                       f"(p={found[0].p:.3f}: {found[0].text[:100]!r})")
    return reasons
