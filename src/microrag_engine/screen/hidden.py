"""Hidden text: what an upload says to the model and not to the person reading it.

The loaders already keep hidden text out of the index (``load.html`` drops what a
browser would not show; ``guard.visible`` removes invisible characters), so it
never reaches a model. What it says can still be evidence: a page whose author hid
an order to a model from its readers wanted a machine to obey it. But most hidden text
on real documentation is content - collapsed sections, tabs, tooltips, syntax diagrams
shown on a click, Markdown comments with build metadata (``<!-- introduced_in=v8.5.0 -->``):
on the public-docs zoo, holding every page with hidden text held 17 of the sqlite3 docs'
core SQL pages and most of Node.js's API pages. So this module only *finds* it:

* ``hidden_pieces``: the text of elements a browser would not show (``display:none``,
  zero size, white on white, off-screen, ...) and of comments, in HTML and in Markdown's
  inline HTML (not inside its code, which is shown), when together they carry at least
  ``MIN_WORDS`` words that the visible text does not also say (a responsive menu that
  repeats the page, or a "skip to content" link, does not count). ``screen.content``
  holds the page only when that text is itself an attack (instructions to a model, a
  planted tool call, stuffing, a request for credentials).

``unicode_reasons`` holds outright, because nothing but hiding spells text this way:
* text spelled in Unicode tag characters (U+E0020-E007E, invisible everywhere), other than
  the emoji flag sequences that use them (U+1F3F4, tags, U+E007F);
* bidi overrides (U+202D, U+202E), which display text in another order than it is read;
* a document in which invisible characters (format characters, default-ignorable code
  points) are many: at least ``MIN_INVISIBLE`` and 1% of its characters.
"""

from __future__ import annotations

from .. import guard, rx
from ..load.html import hidden_texts
from ..text import WORD_TOKEN

MIN_WORDS = 12  # hidden words not also visible: a sentence or more
MIN_INVISIBLE = 20
MARKUP = (".html", ".htm", ".xhtml", ".md", ".markdown")  # files whose markup can hide text
_OVERRIDES = ("\u202d", "\u202e")


def _words(text: str) -> list[str]:
    return [w.lower() for w in WORD_TOKEN.findall(text)]


_FENCES = (rx.compile(r"(?ms)^[ \t]*```.*?^[ \t]*```[ \t]*$"), rx.compile(r"(?ms)^[ \t]*~~~.*?^[ \t]*~~~[ \t]*$"))
_INLINE_CODE = rx.compile(r"`[^`\n]+`")
_FLAG = rx.compile("\U0001F3F4[\U000E0020-\U000E007E]{1,8}\U000E007F")


def _shown_markup(name: str, raw: str) -> str:
    """``raw`` without what a Markdown reader is shown as code (HTML in a code block is shown)."""
    if not name.lower().endswith((".md", ".markdown")) or "`" not in raw and "~~~" not in raw:
        return raw
    for fence in _FENCES:
        raw = fence.sub("\n", raw)
    return _INLINE_CODE.sub(" ", raw)


def hidden_pieces(name: str, raw: str, stored: str) -> list[str]:
    """The hidden texts of ``raw`` (the upload as sent, named ``name``) that say something the
    indexed text ``stored`` does not, when together they carry ``MIN_WORDS`` such words."""
    if not name.lower().endswith(MARKUP) or "<" not in raw:
        return []
    seen = set(_words(stored))
    pieces = [t for t in hidden_texts(_shown_markup(name, raw)) if any(w not in seen for w in _words(t))]
    unseen = sum(1 for t in pieces for w in _words(t) if w not in seen)
    return pieces if unseen >= MIN_WORDS else []


def unicode_reasons(raw: str) -> list[str]:
    """Text spelled or ordered invisibly: tag characters, bidi overrides, floods of invisible characters."""
    if raw.isascii():
        return []
    reasons = []
    tags = sum(1 for c in raw if 0xE0000 <= ord(c) <= 0xE007F) - sum(len(m.group(0)) - 1 for m in _FLAG.finditer(raw))
    if tags >= 4:
        reasons.append(f"hidden text: {tags} Unicode tag characters (text spelled invisibly)")
    overrides = sum(raw.count(c) for c in _OVERRIDES)
    if overrides:
        reasons.append(f"hidden text: {overrides} bidi override(s) (text shown in another order than it is read)")
    # The soft hyphen is hyphenation, not hiding; tags were counted above.
    invisible = guard.count_hidden(raw) - raw.count("\xad") - max(tags, 0)
    if invisible >= MIN_INVISIBLE and invisible >= 0.01 * len(raw):
        reasons.append(f"hidden text: {invisible} invisible characters")
    return reasons
