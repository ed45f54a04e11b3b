"""How an answer is shown to a person: numbered citations and the list of what it cited.

In:  an answer as the engine makes it (passages cited as ``[source: <doc> · chunk <k>]``,
     the form the model is prompted with and verification reads) and the passages it
     was given, as ``Ref``s (from ``Retrieval.passages``, or a server's wire rows, whose
     names and text have been through its output guard), each with its document's title.
Out: the same answer with ``[1]``, ``[2]`` ... in place of those tags, numbered in order of
     first use, and a CommonMark list of the cited sources only (title, section, document,
     chunk), which any chat UI renders as a list and a terminal shows as is.

A chat UI renders the answer as Markdown, and a title, a heading or a path comes from a
document anyone may have written: every piece of one is escaped, so a source entry can
never become a link, an image (a beacon that would leak the conversation) or HTML.
``Numberer`` does the same on a stream, piece by piece, so a terminal can show a model's
answer as it arrives. Tags that name no passage given (a model's invention) are kept as
written: they are the verifier's to flag, not ours to hide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from . import rx
from .augment import citation_of
from .types import Hit


@dataclass(frozen=True)
class Ref:
    """A passage an answer may cite: its document, chunk number, page, title and text."""

    doc: str
    chunk: int
    page: int = 0
    title: str = ""
    text: str = ""

    @classmethod
    def of(cls, hit: Hit, title: str = "") -> Ref:
        return cls(hit.chunk.doc, hit.chunk.index, hit.chunk.page, title, hit.chunk.text)

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> Ref:
        """A server's wire row (``sources``/``context`` of ``/query`` and ``/v1``'s ``microrag`` field)."""
        return cls(str(row.get("doc", "")), int(row.get("chunk", 0)), int(row.get("page") or 0),
                   str(row.get("title", "")), str(row.get("text", "")))

# The prompt's tag, and a page for paged sources: "[source: a/b.md · chunk 3 · p. 2]". Read
# by pattern only where the passages are not known yet; otherwise each passage's own tag is
# looked for as written, so a name holding "]" or " · " still matches exactly.
_TAG = rx.compile(r"\[source: ([^\]\n]{1,500}?) · chunk (\d{1,7})(?: · p\. (\d{1,7}))?\]")
_OPEN = "[source: "
_END = rx.compile(r" · chunk \d{1,7}(?: · p\. \d{1,7})?\]")
_MAX_TAG = 540  # a "[" that has not closed within this many characters is not a tag
# Every ASCII punctuation character, which CommonMark lets one backslash-escape.
_ESCAPES = str.maketrans({c: "\\" + c for c in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"})
_HEADING = rx.compile(r"^#{1,6}[ \t]+(\S.*)$")
_FENCE = ("```", "~~~")
_CLOSING = rx.compile(r"[ \t]+#+[ \t]*$")
_TICKS = rx.compile(r"`+")
NOT_RETRIEVED = "(not among the passages retrieved)"


def tags_of(ref: Ref) -> list[str]:
    """The tags that cite ``ref``: as the prompt wrote it, and without its page (a model may drop it)."""
    tags = [f"[source: {citation_of(ref.doc, ref.chunk, ref.page)}]"]
    return tags + [f"[source: {citation_of(ref.doc, ref.chunk)}]"] if ref.page else tags


# C0 and C1 control characters other than newline and tab: a document (the loaders keep ESC)
# or a model could otherwise send terminal escape sequences (retitle, rewrite the screen, links).
_CONTROL = str.maketrans(dict.fromkeys([*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)]))


def printable(text: str) -> str:
    """``text`` as a terminal may show it: without control characters."""
    return text.translate(_CONTROL)


def escape(text: str) -> str:
    """``text`` as literal CommonMark inline text: punctuation backslash-escaped, lines joined."""
    return " ".join(text.split()).translate(_ESCAPES)


def section_of(text: str, title: str = "") -> str:
    """The first heading in a chunk other than its document's title ("" when it has none):
    what a reader looks for on the page. A "# ..." line inside a code fence is a comment
    (a shell's, Python's), not a heading."""
    fenced = False
    for line in text[:2000].splitlines():
        if line.lstrip().startswith(_FENCE):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.search(line)
        if m is None:
            continue
        # "2.1. Checkpointing" reads as such; a trailing "#" run is closing syntax, not words.
        heading = _CLOSING.sub("", m.group(1)).strip()[:120]
        if heading and heading != title:
            return heading
    return ""


@dataclass
class Numberer:
    """Replaces citation tags with ``[n]`` as text arrives: ``feed`` each piece, ``flush`` at
    the end. ``cited`` is what the numbers stand for, in number order. ``passages`` None: not
    known yet (a terminal printing a model's answer before the engine returns): every tag is
    numbered, and :meth:`Shown.among` fills in titles once they are known."""

    passages: Sequence[Ref] | None
    cited: list[Ref] = field(default_factory=list)
    _held: str = ""
    _numbers: dict[tuple[str, int], int] = field(default_factory=dict)
    _tags: dict[str, Ref] = field(default_factory=dict)
    _prefixes: set[str] = field(default_factory=set)  # every beginning of a known tag short of the whole
    _longest: int = 0

    def __post_init__(self) -> None:
        for ref in self.passages or ():
            for tag in tags_of(ref):
                self._tags.setdefault(tag, ref)
                self._prefixes.update(tag[:k] for k in range(1, len(tag)))
        self._longest = max(map(len, self._tags), default=0)

    def feed(self, piece: str) -> str:
        text = self._held + piece
        cut = self._unfinished(text)
        text, self._held = (text[:cut], text[cut:]) if cut != -1 else (text, "")
        return self._number(text)

    def flush(self) -> str:
        text, self._held = self._held, ""
        return self._number(text)

    def _unfinished(self, text: str) -> int:
        """Where a tag that may still be completing begins at the end of ``text`` (-1: none),
        held back until it completes or cannot."""
        if self.passages is not None:  # the earliest tail that is the beginning of a known tag
            i = text.find("[", max(0, len(text) - self._longest))
            while i != -1 and text[i:] not in self._prefixes:
                i = text.find("[", i + 1)
            return i
        # Not known yet: the last "[source: " not closed by a tag's end, or a tail that could begin one ("[sou").
        cut = text.rfind(_OPEN, max(0, len(text) - _MAX_TAG))
        if cut != -1 and "\n" not in text[cut:] and _END.search(text[cut:]) is None:
            return cut
        return next((len(text) - k for k in range(min(len(_OPEN), len(text)), 0, -1) if text.endswith(_OPEN[:k])), -1)

    def _number(self, text: str) -> str:
        if self.passages is None:
            return _TAG.sub(self._one, text)
        # Each known tag where it stands, leftmost first (the longer at one place): one
        # pass of str.find per tag, so the time is linear in the text for a fixed context.
        spots = sorted((i, -len(tag), ref) for tag, ref in self._tags.items() for i in _finds(text, tag))
        out, pos = [], 0
        for i, minus, ref in spots:
            if i >= pos:
                out += [text[pos:i], self._mark(ref)]
                pos = i - minus
        return "".join(out) + text[pos:]

    def _one(self, m) -> str:  # an RE2 match, passages unknown
        page = m.group(3)
        return self._mark(Ref(m.group(1), int(m.group(2)), int(page) if page else 0))

    def _mark(self, ref: Ref) -> str:
        key = (ref.doc, ref.chunk)
        if key not in self._numbers:
            self.cited.append(ref)
            self._numbers[key] = len(self.cited)
        return f"[{self._numbers[key]}]"


def _finds(text: str, needle: str) -> list[int]:
    out, i = [], text.find(needle)
    while i != -1:
        out.append(i)
        i = text.find(needle, i + len(needle))
    return out


@dataclass(frozen=True)
class Shown:
    """An answer for a person: ``text`` with numbered markers, the ``cited`` passages in number order."""

    text: str
    cited: list[Ref]

    def sources(self, markdown: bool = True) -> str:
        """The cited sources as a CommonMark ordered list under a "Sources:" line ("" when none);
        ``markdown=False``: the same lines for a terminal, nothing escaped."""
        if not self.cited:
            return ""
        lines = [f"{n}. {source_line(r, markdown)}" for n, r in enumerate(self.cited, 1)]
        return "Sources:\n\n" + "\n".join(lines) if markdown else "Sources:\n" + "\n".join("  " + x for x in lines)

    def among(self, passages: Sequence[Ref]) -> Shown:
        """The cited refs looked up in ``passages`` (title, text); one not there is kept, marked
        in the listing as not retrieved (a model's invention, for the reader to see)."""
        known = {(r.doc, r.chunk): r for r in passages}
        return Shown(self.text, [known.get((r.doc, r.chunk), replace(r, title=NOT_RETRIEVED)) for r in self.cited])

    def entries(self) -> list[dict[str, object]]:
        """What each number stands for, as JSON rows (``n``, ``doc``, ``chunk``, ``page``, ``title``, ``section``)."""
        return [{"n": n, "doc": r.doc, "chunk": r.chunk, "page": r.page, "title": r.title,
                 "section": section_of(r.text, r.title)} for n, r in enumerate(self.cited, 1)]

    def markdown(self) -> str:
        """The answer, then its sources, as one CommonMark document."""
        listed = self.sources()
        return self.text + (f"\n\n{listed}" if listed else "")


def source_line(ref: Ref, markdown: bool = True) -> str:
    """One entry: ``Title, “Section” — doc · chunk k`` (for Markdown: title and section
    escaped, the name a code span)."""
    lit = escape if markdown else (lambda t: " ".join(t.split()))
    head = lit(ref.title) if ref.title else ""
    section = section_of(ref.text, ref.title)
    if section:
        head += (", " if head else "") + "“" + lit(section) + "”"
    name = citation_of(ref.doc, ref.chunk, ref.page)
    return (f"{head} — " if head else "") + (code_span(name) if markdown else name)


def code_span(text: str) -> str:
    """``text`` as a CommonMark code span: fenced by a backtick run longer than any inside it."""
    text = " ".join(text.split())
    run = max((len(r) for r in _TICKS.findall(text)), default=0) + 1
    pad = " " if text.startswith("`") or text.endswith("`") or text.startswith(" ") else ""
    return f"{'`' * run}{pad}{text}{pad}{'`' * run}"


def numbered(text: str, passages: Sequence[Ref]) -> Shown:
    """``text`` with its citation tags numbered, and the passages they name."""
    n = Numberer(passages)
    out = n.feed(text) + n.flush()
    return Shown(out, n.cited)
