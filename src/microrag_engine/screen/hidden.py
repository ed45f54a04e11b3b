"""Hidden text: what an upload says to the model and not to the person reading it.

The loaders already keep hidden text out of the index (``load.html`` drops what a
browser would not show; ``guard.visible`` removes invisible characters), so it
never reaches a model. Its *presence* is still evidence: a page whose author hid
a paragraph from readers wanted something read by a machine. This module says
so, with the reason, and the upload is held for review:

* elements a browser would not show (``display:none``, zero size, white on white,
  off-screen, ...) and comments, in HTML and in Markdown's inline HTML, carrying at
  least ``MIN_WORDS`` words that the visible text does not also say (a responsive
  menu that repeats the page, or a "skip to content" link, does not count);
* text spelled in Unicode tag characters (U+E0020-E007E, invisible everywhere);
* bidi overrides (U+202D, U+202E), which display text in another order than it is read;
* a document in which invisible characters (format characters, default-ignorable code
  points) are many: at least ``MIN_INVISIBLE`` and 1% of its characters.
"""

from __future__ import annotations

from ..guard import hides
from ..load.html import hidden_texts
from ..text import WORD_TOKEN

MIN_WORDS = 12  # hidden words not also visible: a sentence or more
MIN_INVISIBLE = 20
MARKUP = (".html", ".htm", ".xhtml", ".md", ".markdown")  # files whose markup can hide text
_OVERRIDES = ("\u202d", "\u202e")


def _words(text: str) -> list[str]:
    return [w.lower() for w in WORD_TOKEN.findall(text)]


def hidden_reasons(name: str, raw: str, stored: str) -> list[str]:
    """Why ``raw`` (the upload as sent, named ``name``) hides text from its reader; ``stored``
    is the text that will be indexed. Empty when nothing is hidden."""
    reasons = []
    if name.lower().endswith(MARKUP) and "<" in raw:
        seen = set(_words(stored))
        pieces = hidden_texts(raw)
        unseen = [w for t in pieces for w in _words(t) if w not in seen]
        if len(unseen) >= MIN_WORDS:
            first = next(t for t in pieces if any(w not in seen for w in _words(t)))
            reasons.append(f"hidden text: {len(pieces)} element(s) or comment(s) a reader would not see carry "
                           f"{len(unseen)} word(s) the page does not show, e.g. {first[:80]!r}")
    tags = sum(1 for c in raw if 0xE0000 <= ord(c) <= 0xE007F)
    if tags >= 4:
        reasons.append(f"hidden text: {tags} Unicode tag characters (text spelled invisibly)")
    overrides = sum(raw.count(c) for c in _OVERRIDES)
    if overrides:
        reasons.append(f"hidden text: {overrides} bidi override(s) (text shown in another order than it is read)")
    # The soft hyphen is hyphenation, not hiding; tags were counted above.
    invisible = 0 if raw.isascii() else sum(1 for c in raw if c != "\xad" and hides(c)) - tags
    if invisible >= MIN_INVISIBLE and invisible >= 0.01 * len(raw):
        reasons.append(f"hidden text: {invisible} invisible characters")
    return reasons
