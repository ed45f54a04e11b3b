"""What a document's shape says about its purpose: stuffing, copies, and asking for secrets.

* **Stuffing.** A document written to match many queries repeats one template with
  other keywords ("vpn help: see this page. wifi help: see this page. ..."). Prose
  compresses to 25-50% of its size with zlib; a stuffed page to a few percent. Measured
  on the page's prose (``prose``: code blocks and table rows left out, since an API
  reference's tables repeat one shape by design), at least ``STUFFED_MIN_CHARS`` long
  and compressing below ``STUFFED_RATIO`` holds it.
* **Copies.** The same text under several names multiplies its slots past the
  per-source diversity cap: an upload whose words overlap one of the same uploader's
  live documents by ``COPY_JACCARD`` or more (word 3-shingles) is a copy.
* **Solicitation.** A sentence that tells the reader to send, upload or share *their*
  credential (password, PIN, MFA code, card number, ...) somewhere is phishing planted
  in the knowledge base; a model quotes it as policy. Documentation gives credentials to
  programs: a sentence that names a mechanism ("via the pserver method", "the PGPASSWORD
  variable", "views and forms") and no one to send to (an address, a host, a phone number, a
  desk or team, "us") is instructions, not a request; so is one about the reader's own use of
  their credential ("a link to reset their password"). Negated sentences ("never send your
  password") are advice, not a request.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from .. import rx
from ..guard import canonical
from ..text import WORD_TOKEN, sentence_spans

STUFFED_MIN_CHARS = 1500
STUFFED_RATIO = 0.12
COPY_JACCARD = 0.8

_SECRET = (r"(?:passwords?|pass ?codes?|passphrases?|pins?|mfa(?: codes?)?|2fa(?: codes?)?|otp|one[- ]time (?:codes?|passwords?)"
           r"|verification codes?|credentials?|login details|card numbers?|cvv|security codes?|social security numbers?"
           r"|ssn|private keys?|recovery (?:codes?|phrases?)|seed phrases?)")
_SEND = (r"(?:send|sent|e-?mail|mail|upload|forward|share|submit|provide|give|given|post|paste|text|dm|message"
         r"|reply with)(?:s|ed|ing)?")
_WHERE = r"(?:to|at|via|into|with)"
_GAP = r"(?:[^.!?\n]|[.][^\s.!?])"  # within the sentence: a dot only inside a name (portal.example)
_YOUR = r"\b(?:your|their|his|her|my|our|employees'|users')\b"  # the reader's own credential, not a topic
# "send your <secret> to X" or "upload to X ... your <secret>", within one sentence.
SOLICIT = rx.compile(rf"(?i)\b{_SEND}\b{_GAP}{{0,80}}(?:{_YOUR}{_GAP}{{0,30}}\b{_SECRET}\b{_GAP}{{0,80}}\b{_WHERE}\b"
                     rf"|\b(?:to|at|via|into)\b{_GAP}{{0,80}}{_YOUR}{_GAP}{{0,30}}\b{_SECRET}\b)")
# Where a solicited credential goes: an e-mail address, a URL or host name, a phone number, or
# someone to send it to.
_TLD = (r"(?:com|org|net|edu|gov|mil|int|io|co|us|uk|de|fr|nl|ru|cn|jp|in|br|au|ca|eu|info|biz|me|cc|tk|xyz|top|site"
        r"|online|app|dev|ai|cloud|example|invalid|test|local|localhost|corp|internal|lan|intranet)")
ADDRESS = rx.compile(
    rf"(?i)(?:[\w.+-]+@[\w-]+(?:\.[\w-]+)*|\bhttps?://|\bwww\.|\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.{_TLD}\b|\bdot com\b"
    r"|\+?\d[\d ().-]{6,}\d)")
RECIPIENT = rx.compile(
    r"(?i)\b(?:help ?desk|service ?desk|desk|support|administrators?|admins?|team|department|office"
    r"|hr|payroll|compliance|security|audit(?:or)?s?|managers?|supervisors?|boss|colleagues?|engineers?|technicians?"
    r"|agents?|representatives?|officers?|staff|portal|website|form|number|address|us|me|them|him|her|sender)\b"
    r"|\b(?-i:IT)\b")
# What documentation hands a credential to: a program's own ways of taking one.
MECHANISM = rx.compile(
    r"(?i)\b(?:methods?|options?|flags?|variables?|arguments?|parameters?|commands?|files?|clients?|views?|forms?"
    r"|fields?|prompts?|dialogs?|environment|keyrings?|settings?|functions?|headers?|apis?|library|libraries"
    r"|modules?|class(?:es)?|director(?:y|ies)|volumes?|plugins?|backends?|hooks?|scripts?|programs?|tools?)\b")
# ... or a reader's own use of their credential ("a link to reset their password", "users who
# have lost their password"): the credential is not what is sent.
SELF_SERVICE = rx.compile(
    rf"(?i)\b(?:reset|change|changed|update|set|recover|lost|forgot|forgotten|enter|entered|type|remember|choose|create"
    rf"|rotate|revoke)\s+(?:\w+\s+){{0,2}}{_YOUR}\s+(?:\w+\s+){{0,2}}{_SECRET}\b")
NEGATED = rx.compile(r"(?i)\b(?:never|not|don't|do not|no one|nobody|must not|should not|won't|will never|avoid"
                     r"|without (?:telling|sending|giving|sharing|typing|entering|revealing|disclosing))\b")


_FENCED = rx.compile(r"(?ms)^```.*?^```[ \t]*$")
_NOT_PROSE_LINE = rx.compile(r"(?m)^(?:[^\n]* \| [^\n]*|\|[^\n]*|    [^\n]*|\t[^\n]*)$")


def prose(text: str, once: bool = True) -> str:
    """``text`` (as stored: code in ``` fences, table rows as "a | b") without its code and tables,
    and (``once``) each paragraph once. Reference pages repeat their tables' and listings' shapes
    row after row, and whole paragraphs per entry (GNU Octave's twenty moving-window functions
    each describe the same options)."""
    cut = _NOT_PROSE_LINE.sub("", _FENCED.sub("", text))
    if not once:
        return cut
    seen: set[str] = set()
    kept = []
    for para in cut.split("\n\n"):
        key = " ".join(para.split())
        if key and key not in seen:
            seen.add(key)
            kept.append(para)
    return "\n\n".join(kept)


def stuffed_page(text: str) -> str:
    """``stuffed`` on the page's prose, each paragraph once; a page whose distinct prose is too
    short to judge (one templated paragraph repeated under every heading) is judged whole."""
    once = prose(text)
    return stuffed(once if len(once.encode("utf-8")) >= STUFFED_MIN_CHARS else prose(text, once=False))


def stuffed(text: str) -> str:
    """A reason when ``text`` is one template repeated (compresses too well), else ``""``."""
    raw = text.encode("utf-8")
    if len(raw) < STUFFED_MIN_CHARS:
        return ""
    ratio = len(zlib.compress(raw, 6)) / len(raw)
    if ratio >= STUFFED_RATIO:
        return ""
    return (f"stuffing: the text compresses to {ratio:.0%} of its size (prose and code: 25-50%), "
            "one template repeated with other keywords")


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = [w.lower() for w in WORD_TOKEN.findall(text)]
    return {tuple(words[i : i + 3]) for i in range(max(len(words) - 2, 1))} if words else set()


def copy_of(text: str, others: Iterable[tuple[str, str]]) -> str:
    """A reason when ``text`` is (nearly) the text of one of ``others`` ((name, text) pairs)."""
    mine = _shingles(text)
    if not mine:
        return ""
    for name, other in others:
        theirs = _shingles(other)
        if theirs and len(mine & theirs) / len(mine | theirs) >= COPY_JACCARD:
            return f"copy: the same text as {name}, live under the same uploader (a way past the per-source cap)"
    return ""


def solicitation(text: str) -> str:
    """A reason when a sentence of ``text`` asks the reader to send a credential somewhere."""
    for start, end in sentence_spans(text):
        # Read as written and canonical (homoglyphs undone); canonical alone would turn
        # "code at x.example" into "code@x.example" and lose the "at".
        said = (text[start:end], canonical(text[start:end]))
        if not any(SOLICIT.search(v) for v in said) or any(NEGATED.search(v) for v in said):
            continue
        # an address always counts; a person or desk unless the reader only uses their own
        # credential; with neither, a program's mechanism makes it instructions
        if any(ADDRESS.search(v) for v in said) or (
                not any(SELF_SERVICE.search(v) for v in said)
                and (any(RECIPIENT.search(v) for v in said) or not any(MECHANISM.search(v) for v in said))):
            return f"solicitation: asks readers to send a credential: {text[start:end].strip()[:100]!r}"
    return ""
