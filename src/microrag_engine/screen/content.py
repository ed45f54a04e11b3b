"""Everything a document's own text says before it goes live (no index needed).

One list of reasons, each starting with its kind (``hidden text:``, ``stuffing:``,
``solicitation:``, ``injection:``, ``content:``), from: hidden text (``screen.hidden``),
shape (``screen.shape``), the trained injection classifier (``screen.injection``) and
the phrase heuristics of ``guard.injection_check``. The server adds the checks that
need the index (copies, the collision probe: ``server.screening``); ``microrag ingest``
runs these alone.
"""

from __future__ import annotations

from .. import guard
from . import injection
from .hidden import hidden_reasons
from .shape import solicitation, stuffed


def content_reasons(name: str, raw: str, stored: str) -> list[str]:
    """Why the document ``name`` (sent as ``raw``, to be indexed as ``stored``) should be held."""
    verdict = guard.injection_check(stored)
    reasons = [f"content: {r}" for r in verdict.reasons] if verdict.suspicious else []
    reasons += hidden_reasons(name, raw, stored)
    reasons += [r for r in (stuffed(stored), solicitation(stored)) if r]
    found = injection.flagged(stored)
    if found:
        reasons.append(f"injection: {len(found)} passage(s) read as instructions to a model "
                       f"(p={found[0].p:.3f}: {found[0].text[:100]!r})")
    return reasons
