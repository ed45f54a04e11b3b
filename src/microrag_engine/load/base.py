"""What every reader shares: bytes -> text, front matter, guards on extras and zips, line layout.

* ``decode_bytes`` - UTF-8 (a BOM stripped), UTF-16/32 with a BOM, else the encoding
  charset-normalizer finds; binary junk raises ``ValueError``.
* ``split_front_matter`` - ``key: value`` lines between leading ``---`` fences.
* ``needs`` - wraps the lazy import of an optional extra: a missing package raises
  ``MissingExtraError`` naming the extra to install.
* ``check_zip`` - refuses an office or e-book archive before it is parsed when it would
  expand past ``MAX_ZIP_BYTES`` (a zip bomb) or is no zip at all.
* ``layout`` - the line conventions every reader's output ends with.

Not here: any format's own parsing (one module per format beside this one).
"""

from __future__ import annotations

import codecs
import logging
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import ModelMissingError

log = logging.getLogger("microrag")


# ---------------------------------------------------------------- bytes -> text

# Checked longest first: the UTF-32 LE mark begins with the UTF-16 LE one.
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
# Short legacy text fits many 8-bit code pages equally well ("caf\xe9" is as coherent in
# Urdu's cp1006 as in cp1252); when cp1252 (Windows' superset of Latin-1's printable range,
# by far the likeliest for a document corpus) is among those tied best, it is chosen.
_WESTERN = ("cp1252", "latin_1", "iso8859_15")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]")  # C0 controls no text file holds (not \t\n\v\f\r, ESC)


_WESTERN_MARKS = frozenset("\u2018\u2019\u201c\u201d\u2013\u2014\u2026\u20ac\u00a0\u00ab\u00bb\u00b0\u00a3\u00a7")


def _plain_western(text: str) -> bool:
    """Read as cp1252, every non-ASCII character is a West European letter or common mark
    (é, ü, ç, ’, “, –, €): short texts give charset-normalizer too little to tell cp1252 from
    cp1250/cp1257, and West European text is by far the commonest legacy case."""
    rest = [c for c in text if not c.isascii()]
    return bool(rest) and all(("\u00c0" <= c <= "\u00ff" and c not in "\u00d7\u00f7") or c in _WESTERN_MARKS for c in rest)


def decode_bytes(raw: bytes, name: str = "file") -> str:
    """The text of ``raw``; raises ``ValueError`` when it is not text in any encoding we
    recognise (``name`` only labels the log line saying which encoding was guessed)."""
    for bom, codec in _BOMS:
        if raw.startswith(bom):
            return raw.decode(codec)  # the codec drops the BOM; a bad sequence is a ValueError
    if b"\x00" in raw[:8192]:
        raise ValueError("binary, not text (NUL bytes)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes  # core dependency; only files that are not UTF-8 need it

    results = from_bytes(raw)
    best = results.best()
    if best is None:
        raise ValueError("binary or of an unknown encoding (not UTF-8, and no text encoding fits)")
    tied = [r for r in results if r.chaos == best.chaos and r.coherence == best.coherence]
    encoding, text = best.encoding, str(best)
    try:
        western = raw.decode("cp1252")
    except UnicodeDecodeError:  # one of the five bytes cp1252 leaves undefined
        western = None
    # charset-normalizer lists one of several code pages that decode alike ("cp1250" for "caf\xe9").
    if western is not None and (any(r.encoding in _WESTERN or str(r) == western for r in tied) or _plain_western(western)):
        encoding, text = "cp1252", western
    sample = text[:65536]
    if len(_CONTROL.findall(sample)) > len(sample) // 100:
        raise ValueError(f"binary, not text (control characters even when read as {encoding})")
    log.info("%s: not UTF-8; read as %s", name, encoding)
    return text


def read_text(path: Path) -> str:
    """A text file's content, whatever its encoding (``decode_bytes``)."""
    return decode_bytes(path.read_bytes(), path.name)


_FRONT = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*(?:\n|\Z)", re.S)


MAX_FRONT_MATTER_KEYS = 64  # read of a file's front matter; the rest of its lines are skipped


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """``key: value`` lines between leading ``---`` fences (the first ``MAX_FRONT_MATTER_KEYS``
    keys: whoever wrote the file chose how many), and the text after them."""
    m = _FRONT.match(text)
    if not m:
        return {}, text
    meta: dict[str, str] = {}
    for line in m.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and (key.strip().lower() in meta or len(meta) < MAX_FRONT_MATTER_KEYS):
            meta[key.strip().lower()] = value.strip().strip("'\"")
    return meta, text[m.end() :]


# ---------------------------------------------------------------- optional extras


class MissingExtraError(ModelMissingError):
    """A reader's optional package is not installed; ``extra`` names the install extra."""

    def __init__(self, extra: str, module: str | None):
        super().__init__(f"{module or 'a package'} is not installed: install microrag-engine[{extra}]")
        self.extra = extra


@contextmanager
def needs(extra: str) -> Iterator[None]:
    """Around a reader's lazy imports: ``with needs("formats"): import docx``."""
    try:
        yield
    except ImportError as exc:
        raise MissingExtraError(extra, exc.name) from None


# ---------------------------------------------------------------- zip archives (docx, pptx, xlsx, epub)

# An office file or e-book is a zip; its parser inflates members in memory. A bomb of a
# few kB can claim gigabytes, so the sizes its directory declares are summed first
# (zipfile also stops reading a member at its declared size, so the sum is a bound).
MAX_ZIP_BYTES = 300_000_000
MAX_ZIP_MEMBERS = 20_000


def check_zip(path: Path) -> None:
    """Raise ``ValueError`` unless ``path`` is a zip that expands to a bounded size."""
    try:
        with zipfile.ZipFile(path) as z:
            members = z.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise ValueError(f"not a valid {path.suffix} file ({exc})") from None
    size = sum(m.file_size for m in members)
    if len(members) > MAX_ZIP_MEMBERS or size > MAX_ZIP_BYTES:
        raise ValueError(f"its archive expands to {size:,} bytes in {len(members):,} member(s) "
                         f"(limits {MAX_ZIP_BYTES:,} bytes, {MAX_ZIP_MEMBERS:,} members): a zip bomb?")


# ---------------------------------------------------------------- output layout


def layout(text: str) -> str:
    """Trimmed lines, at most one blank line in a row, code blocks as they were."""
    lines: list[str] = []
    open_fence = ""  # the backticks that opened the code block we are in
    for line in text.split("\n"):
        if open_fence:
            lines.append(line)
            if line.strip() == open_fence:
                open_fence = ""
        elif line.startswith("```"):
            open_fence = line[: len(line) - len(line.lstrip("`"))]
            lines.append(line)
        else:
            stripped = re.sub(r"[ \t]+", " ", line).strip()
            if stripped or (lines and lines[-1]):
                lines.append(stripped)
    return "\n".join(lines).strip()


def fence(code: str, lang: str = "") -> str:
    """A fenced code block on lines of its own (a longer fence when the code holds one)."""
    ticks = "```"
    while ticks in code:
        ticks += "`"
    return f"\n\n{ticks}{lang}\n{code.strip(chr(10))}\n{ticks}\n\n"


def cell(text: str) -> str:
    """A table cell or list item's text on one line."""
    return " ".join(text.split())
