"""Markdown -> the text a reader sees.

In: Markdown source (str). Out: the same lines with links reduced to their words,
emphasis, inline tags and doc-generator directives gone; headings, list items and
fenced code kept verbatim. Line-based, linear-time (RE2) and never fails: it does
not build a Markdown tree, so it does not resolve reference links or nested blocks.
"""

from __future__ import annotations

import re

from .. import rx

# ---------------------------------------------------------------- markup rendered to clean text
# What an answer quotes is the text a reader sees: links keep their words, emphasis and
# tags go, directives of doc generators (MkDocs includes and admonitions, mkdocstrings,
# MyST roles) go, code stays verbatim in fences. Headings stay "#" lines and list items
# "- " lines, because the chunker and the answerer read them as structure.

_MD_FENCE = rx.compile(r"^[ \t]*(```|~~~)")  # indented too: admonition and list bodies hold code
_MD_DROP_LINE = rx.compile(r"^[ \t]*(?:\{\*.*\*\}|\{%.*%\}|:::[ \t].*|-{2,}8<-{2,}.*|\[[^\]]+\]:[ \t]+\S.*|"
                           r"\|?[ \t]*:?-+:?[ \t]*\|[ \t|:-]*|[-=*_](?:[ \t]*[-=*_]){2,}|<!--.*-->)[ \t]*$")
_MD_ADMONITION = rx.compile(r"^[ \t]*(?:///|!!!|\?\?\?\+?)[ \t]*([A-Za-z]*)[ \t]*(?:\|[ \t]*(.*?)|\"(.*?)\")?[ \t]*$")
_MD_CODE_SPAN = rx.compile(r"`[^`]*`")
_MD_INLINE = [
    (rx.compile(r"\{[\w:-]+\}(`[^`]*`)"), r"\1"),  # MyST role {func}`name`
    (rx.compile(r"!\[([^\]]*)\]\([^)]*\)"), r"\1"),  # image -> its alt text
    (rx.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),  # link -> its words
    (rx.compile(r"\[([^\]]+)\]\[[^\]]*\]"), r"\1"),  # reference link
    (rx.compile(r"<br[ \t]*/?>"), " "),
    (rx.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:[ \t][^<>]*)?/?>"), ""),  # inline HTML tags (their text stays)
    (rx.compile(r"\*\*([^*]+)\*\*"), r"\1"),
    (rx.compile(r"(^|[^\pL\pN_])__([^_]+)__"), r"\1\2"),
    (rx.compile(r"(^|[ \t(\[])\*([^* \t][^*]*)\*"), r"\1\2"),
    (rx.compile(r"[ \t]*\{[ \t]*#[\w-]+[^}]*\}[ \t]*$"), ""),  # heading anchor { #id }
    (rx.compile(r"\\([\\`*_{}\[\]()#+.!|-])"), r"\1"),  # backslash escapes
]


def _md_inline(line: str) -> str:
    out, pos = [], 0
    for m in _MD_CODE_SPAN.finditer(line):  # code spans stay as written
        out.append(_md_prose(line[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_md_prose(line[pos:]))
    return "".join(out)


def _md_prose(text: str) -> str:
    import html  # the standard library's (imports are absolute)

    for pattern, repl in _MD_INLINE:
        text = pattern.sub(repl, text)
    return html.unescape(text) if "&" in text else text


def markdown_text(text: str) -> str:
    """Markdown as a reader sees it; fenced code blocks are kept verbatim."""
    out: list[str] = []
    fence = ""  # the open fence's characters: only a fence of the same kind closes it
    for line in text.split("\n"):
        m = _MD_FENCE.match(line)
        if m and (not fence or m.group(1) == fence):
            fence = "" if fence else m.group(1)
            out.append(line.strip())
            continue
        if fence:
            out.append(line)
            continue
        if _MD_DROP_LINE.match(line):
            continue
        adm = _MD_ADMONITION.match(line)
        if adm:  # "/// tip | Title" -> "Tip: Title"; a closing "///" -> nothing
            kind, title = adm.group(1), adm.group(2) or adm.group(3) or ""
            out.append(f"{kind.capitalize()}: {title}".rstrip(": ") if kind else title)
            continue
        out.append(_md_inline(line))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out))
