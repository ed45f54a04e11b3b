"""Every defence of the server, by name, and the lab baseline that turns them all off.

In:  nothing (a frozen record of switches). Out: ``Defences()`` - all on, what every
real server runs - and ``LAB_BASELINE`` - all off, the naive server that
``microrag redteam`` attacks to prove each attack real.

Each switch names the red-team finding it closes (SECURITY.md lists them with their
residual risk), so an auditor can read which line of the request path implements
which defence: the path tests ``cfg.defences.<name>``, never a profile string. A
defence that cannot be turned off (linear-time regexes, the body cap on bytes read,
the character limits of the DLP step) is still a switch here only where the
baseline needs a weakness to attack; the weakness itself lives in ``naive_*``
functions below, never reached while the switch is on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class Defences:
    # Keys, roles, clearance labels, quarantine of untrusted uploads, wrong-key throttling
    # (spec 1-2; red team #8, #9, #13). Off: every caller is a trusted admin.
    authentication: bool = True
    # Structural input and output guards on canonical text (spec 5). Off: a literal
    # blocklist on the query and a filter that drops answer lines saying "password".
    structural_guards: bool = True
    # The output guard on every channel: sources, stream events, verification (#10).
    guard_every_channel: bool = True
    # Retrieved text fenced as data in the prompt (spec 4).
    spotlight: bool = True
    # The file tool: one directory, caller's clearance, never a call planted in the
    # retrieved text however it is spelled (spec 4; #6, #11 NUL paths).
    confined_tool: bool = True
    # Only linear-time patterns see the query (#1). Off: a backtracking de-spacer too.
    linear_regex: bool = True
    # A request checks its wall-clock budget between steps and stops the model at it (#1).
    request_budget: bool = True
    # The body cap counts bytes as read, chunked bodies included (#2). Off: Content-Length only.
    streamed_body_cap: bool = True
    # Keyword statistics fitted over what the caller may read (#3).
    scoped_statistics: bool = True
    # /documents shows no hash of unredacted text, and server paths to admins only (#4).
    private_listing: bool = True
    # The audit row is written before any retrieved text leaves (#5). Off: after the answer.
    audit_first: bool = True
    # Stored text is the visible text the checks read: tag characters and variation
    # selectors are removed at ingest (#7). Off: stored as sent.
    visible_store: bool = True
    # Uploads live under the key's own namespace and only their owner replaces them (#9).
    # Off: the request's claimed source is the document name.
    namespaced_uploads: bool = True
    # Uploaded files are parsed with the operator's loader rules: .jsonl records stay in
    # their file, hidden HTML is dropped (#12). Off: records choose their document.
    confined_records: bool = True
    # Host allowlist, /health counts for admins only, no CDN-loading Swagger page (#13);
    # a stateless endpoint (/mcp) answers anything but POST with 405 (#33, 8).
    closed_surface: bool = True
    # Insider defences (#19), whoever uploads: every upload is screened before it goes live
    # (collision probe, injection classifier, hidden text) and held for review with the reasons.
    screening: bool = True
    # At answer time: passages that restate the question are held back from the answer, and
    # retrieved sources that contradict each other are shown as a conflict, never blended.
    answer_checks: bool = True
    # Provenance tiers as a ranking prior: operator > admin-approved > trusted contributor.
    provenance_prior: bool = True
    # Every part of a request is bounded before work is done on it: a message's text parts
    # count together against the message cap, not each on its own (#33, 5).
    bounded_parts: bool = True
    # A key name is never issued twice, so what a revoked key owned stays its own: a new key
    # named like it inherits nothing (#33, 6). Off: a revoked key's name can be reissued.
    stable_ownership: bool = True

    def off(self) -> list[str]:
        """The names of the defences turned off."""
        return [f.name for f in fields(self) if not getattr(self, f.name)]


LAB_BASELINE = Defences(**{f.name: False for f in fields(Defences)})

# Retrieval settings of the naive server: no DLP at ingest, no diversity cap, no grounding gate.
LAB_BASELINE_SETTINGS = {"dlp": "off", "max_per_source": 0, "w_kw": 0.6, "gate": "none"}



@dataclass(frozen=True)
class Profile:
    """A server's whole stance: its defences, the retrieval settings they go with (overrides
    on the preset) and whether answers are verified by default. There are two, defined
    here once; the CLI, the red-team lab and the tests all take them from here."""

    name: str
    defences: Defences
    settings: dict = field(default_factory=dict)
    verify: bool = True


HARDENED = Profile("hardened", Defences())
LAB = Profile("lab-baseline", LAB_BASELINE, LAB_BASELINE_SETTINGS, verify=False)
PROFILES = {p.name: p for p in (HARDENED, LAB)}

BLOCKLIST = ("ignore previous instructions", "password", "secret")  # the naive literal filter


def naive_blocked(query: str) -> bool:
    """The baseline's input filter: literal phrases, lower-cased - nothing more."""
    return any(w in query.lower() for w in BLOCKLIST)


def naive_output(text: str) -> str:
    """The baseline's output filter: drop lines that literally say "password"."""
    return "\n".join(line for line in text.splitlines() if "password" not in line)


# The de-spacer of version one (red team #1): "p a s s" -> "pass". ``_`` matches both the
# letter class and the separator class, so a run of underscores splits in exponentially
# many ways under a backtracking engine - and Python's ``re`` holds the GIL meanwhile.
# ("_"*44 + "aa": about 2 s here, each further character ~1.5x longer.)
_NAIVE_SPACED = re.compile(r"(?<![\w])(?:[\w@:=](?:[ ._-]{1,3}|\s{1,3})){3,}[\w@:=](?![\w])")


NAIVE_PATTERNS = (_NAIVE_SPACED,)  # exempt from tests/test_rx.py's growth check, by name


def naive_despace(text: str) -> str:
    return _NAIVE_SPACED.sub(lambda m: re.sub(r"[ ._-]|\s", "", m.group(0)), text)
