"""reStructuredText -> Markdown-like text, read from docutils' doctree (never rendered to HTML).

In: .rst source (untrusted). Out: "#" headings by section depth, "- " items, " | " cells,
fenced code (``code``/``code-block`` with its language), backticked literals.
Security: parsed with file insertion and ``raw`` disabled (no ``include``, no
``literalinclude``, no raw HTML), no report ever halts or prints, comments dropped (a
reader of the rendered page never sees them), docutils' global role table restored
after each parse (a document's ``.. role::`` must not outlive it).
Sphinx markup that plain docutils does not know keeps its text: a role such as
``:func:`os.walk``` reads `os.walk`, ``:ref:`Title <label>``` reads Title; a directive
(``versionadded``, ``seealso``, ``function``, ``code-block`` with Sphinx options...) keeps
its argument line and its content, parsed again, code as fenced code.
Not here: transforms (substitutions defined outside the file, footnote numbering,
tables of contents), Sphinx's cross-reference resolution.
"""

from __future__ import annotations

import copy
import functools
import re
import textwrap
from typing import Any

from .. import rx
from .base import cell, fence, layout, needs

# A Sphinx directive reported as unknown or as misused by plain docutils: its first line.
_DIRECTIVE = rx.compile(r"^\.\.[ \t]+([A-Za-z0-9_:.+-]+)[ \t]*::(.*)$")
_TITLED = rx.compile(r"(?s)^(.*?)[ \t\n]*<([^<>]*)>$")  # "Title <target>" in a role or link
_CODE_DIRECTIVES = {"code", "code-block", "sourcecode", "testcode", "testsetup", "testcleanup", "testoutput", "doctest",
                    "productionlist", "ipython", "jupyter-execute", "prompt"}
# Directives whose text a reader never sees on the page, or that would read other files.
_DROPPED_DIRECTIVES = {"raw", "include", "literalinclude", "toctree", "index", "highlight", "currentmodule", "tabularcolumns",
                       "module", "sectionauthor", "moduleauthor", "codeauthor", "contents", "meta", "role", "default-role", "image"}
_LABELS = {"versionadded": "Added in version", "versionchanged": "Changed in version", "deprecated": "Deprecated since version",
           "versionremoved": "Removed in version", "seealso": "See also"}
# Sphinx roles whose text is prose (the rest name code: :func:, :class:, :envvar:...).
_PROSE_ROLES = {"ref", "doc", "term", "numref", "abbr", "dfn", "guilabel", "menuselection", "download", "manpage",
                "index", "keyword", "pep", "rfc", "title"}
MAX_RST_DEPTH = 3  # directive content parsed again at most this deep; deeper, kept as plain text
LINE_LENGTH_LIMIT = 10_000  # docutils' own default: a longer line is refused, not parsed
MAX_INLINE_CHARS = 2_000  # a paragraph's inline markup is read in pieces this long (see parse below)
# docutils spends up to ~0.1 ms a character on hostile nesting (a list in a list in a list...,
# 50x a real page): a bigger source is refused rather than left to hold a worker for minutes.
MAX_RST_CHARS = 1_000_000


def rst_text(source: str, name: str = "document") -> str:
    """The text of reStructuredText ``source``; raises ``ValueError`` when docutils cannot
    read it (``name`` labels the error)."""
    return layout(_parse_and_render(source, name, 0))


def _parse_and_render(source: str, name: str, depth: int) -> str:
    with needs("formats"):
        from docutils.parsers.rst import Parser, roles
        from docutils.utils import SystemMessage, new_document

    if len(source) > MAX_RST_CHARS:
        raise ValueError(f"{len(source):,} characters is more reStructuredText than we parse (limit {MAX_RST_CHARS:,})")
    long = next((i for i, line in enumerate(source.splitlines(), 1) if len(line) > LINE_LENGTH_LIMIT), 0)
    if long:
        raise ValueError(f"line {long} is longer than {LINE_LENGTH_LIMIT:,} characters; not reStructuredText we can read")
    source = _defuse_quoted_literals(source)
    document = new_document(name, copy.copy(_settings()))  # a copy: a document may change its settings
    saved = dict(roles._roles)  # ".. role::" and ".. default-role::" register globally
    try:
        Parser(inliner=_inliner_class()()).parse(source, document)
    except RecursionError:
        raise ValueError("nested too deeply to parse") from None
    except SystemMessage as exc:  # only at halt_level, which no report reaches; kept as a guard
        raise ValueError(f"docutils stopped: {exc}") from None
    finally:
        roles._roles.clear()
        roles._roles.update(saved)
    return _render(document, depth)


# "para::", a blank line, then a line not indented: docutils tries a "quoted literal block"
# and copies the rest of the enclosing block to do so, so n of them take time quadratic in n.
# Real pages hold a few; past MAX_QUOTED_LITERALS, "::" ends such paragraphs as ":" (what
# docutils shows for it anyway) and the lines after read as ordinary text.
MAX_QUOTED_LITERALS = 64


def _defuse_quoted_literals(source: str) -> str:
    lines = source.split("\n")
    triggers: list[int] = []  # lines ending a paragraph with "::" that no indented block follows
    pending, blank = -1, False  # a line ending in "::" and whether a blank line came after it
    for i, line in enumerate(lines):
        if not line.strip():
            blank = pending >= 0
            continue
        indent = len(line) - len(line.lstrip())
        if pending >= 0 and blank and indent <= len(lines[pending]) - len(lines[pending].lstrip()):
            triggers.append(pending)
        pending, blank = (i if line.rstrip().endswith("::") else -1), False
    if len(triggers) <= MAX_QUOTED_LITERALS:
        return source
    for i in triggers[MAX_QUOTED_LITERALS:]:
        lines[i] = lines[i].rstrip()[:-1]
    return "\n".join(lines)


@functools.cache
def _settings() -> Any:
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser

    settings = get_default_settings(Parser)
    settings.file_insertion_enabled = False  # no include, no csv-table :file:/:url:
    settings.raw_enabled = False
    settings.report_level = 5  # report nothing ...
    settings.halt_level = 5  # ... and never stop: a malformed document still yields its text
    settings.warning_stream = False  # docutils' null sink
    settings.syntax_highlight = "none"  # code stays one text node; pygments is not needed
    settings.line_length_limit = LINE_LENGTH_LIMIT
    settings.language_code = "en"
    return settings


@functools.cache
def _inliner_class() -> type:
    """docutils' inliner, reading a role it does not know as Sphinx would show it."""
    from docutils import nodes
    from docutils.parsers.rst import roles, states
    from docutils.utils import unescape

    def interpreted(self: Any, rawsource: str, text: str, role: str, lineno: int) -> tuple[list, list]:
        role_fn, messages = roles.role(role, self.language, lineno, self.reporter)
        base = role_fn
        while isinstance(base, roles.CustomRole):  # ".. role:: html(raw)", and roles built on that one
            base = base.base_role
        if base is roles.raw_role:
            return [], messages  # markup for another format, like the raw directive: never text
        if role_fn:
            return states.Inliner.interpreted(self, rawsource, text, role, lineno)
        shown = unescape(text)
        titled = _TITLED.search(shown)
        if titled:  # "Title <target>": the title; "<target>" alone: the target
            shown = titled.group(1).strip() or titled.group(2)
        if shown.startswith("~"):  # "~a.b.c" shows "c"
            shown = shown[1:].rsplit(".", 1)[-1]
        shown = shown.lstrip("!")  # "!name": no link, same text
        if role.split(":")[-1] in _PROSE_ROLES:
            return [nodes.Text(shown)], messages
        return [nodes.literal(rawsource, shown)], messages

    def parse(self: Any, text: str, lineno: int, memo: Any, parent: Any) -> tuple[list, list]:
        # docutils reads a paragraph's inline markup in time quadratic in its length (each
        # unmatched start-string searches the rest); a long paragraph is read in pieces cut
        # at spaces. Markup spanning a cut stays as written, which only a hostile or
        # generated file would have: real paragraphs are far shorter.
        found: tuple[list, list] = ([], [])
        for piece in _pieces(text, MAX_INLINE_CHARS):
            nodes_, messages = states.Inliner.parse(self, piece, lineno, memo, parent)
            found[0].extend(nodes_)
            found[1].extend(messages)
        return found

    # docutils builds its patterns from vars(self.__class__), the class's own attributes
    # only: a subclass must carry the pattern pieces itself.
    pieces = {k: v for k, v in vars(states.Inliner).items() if not k.startswith("__") and isinstance(v, str)}
    return type("SphinxTolerantInliner", (states.Inliner,), {**pieces, "interpreted": interpreted, "parse": parse})


def _pieces(text: str, size: int) -> list[str]:
    """``text`` cut into pieces of at most about ``size`` characters, each cut just before a space."""
    out, start = [], 0
    while len(text) - start > size:
        cut = text.rfind(" ", start + size // 2, start + size)
        cut = cut if cut > start else start + size
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


# ---------------------------------------------------------------- doctree -> lines


def _render(document: Any, depth: int) -> str:
    """The doctree as Markdown-like text. Iterative: nesting depth is the document's choice."""
    from docutils import nodes

    out: list[str] = []
    # (node or literal text, section level, inside one item/row/field line)
    stack: list[tuple[Any, int, bool]] = [(document, 0, False)]
    while stack:
        node, level, on_line = stack.pop()
        if isinstance(node, nodes.Text):  # before str: a docutils Text is a str
            out.append(re.sub(r"\s+", " ", node.astext()))
            continue
        if isinstance(node, str):
            out.append(node)
            continue
        tag = node.tagname
        if isinstance(node, (nodes.comment, nodes.substitution_definition, nodes.colspec, nodes.raw, nodes.pending,
                             nodes.decoration, nodes.meta)) or "contents" in node.get("classes", ()):
            continue
        if isinstance(node, nodes.system_message):
            out.append(_directive_text(node, depth))
            continue
        if isinstance(node, (nodes.literal_block, nodes.doctest_block, nodes.math_block)):
            lang = "pycon" if tag == "doctest_block" else "math" if tag == "math_block" else \
                next((c for c in node.get("classes", ()) if c != "code"), "")
            out.append(fence(node.astext(), lang))
            continue
        if isinstance(node, nodes.literal):
            out.append(f"`{cell(node.astext())}`")
            continue
        if isinstance(node, nodes.substitution_reference):  # defined in this file: its text; else its name
            found = document.substitution_defs.get(node.get("refname", ""))
            out.append(cell(found.astext() if found is not None else node.astext()))
            continue
        if isinstance(node, nodes.image):
            out.append(node.get("alt", ""))
            continue
        if isinstance(node, (nodes.label, nodes.footnote_reference, nodes.citation_reference)):
            out.append(f"[{cell(node.astext())}] " if isinstance(node, nodes.label) else f"[{cell(node.astext())}]")
            continue
        children = list(node.children)
        if isinstance(node, nodes.section):
            level += 1
        if isinstance(node, nodes.Inline):
            pass  # flows into its line
        elif isinstance(node, nodes.list_item):
            out.append("\n- ")
            on_line = True
        elif isinstance(node, nodes.row):
            out.append("\n")
            children = [x for k, entry in enumerate(children) for x in ((" | ", entry) if k else (entry,))]
            on_line = True
        elif isinstance(node, (nodes.field, nodes.option_list_item)):
            out.append(" " if on_line else "\n\n")
            on_line = True
        elif isinstance(node, (nodes.field_name, nodes.option_group)):
            stack.append((": ", level, on_line))
        elif isinstance(node, nodes.line):
            out.append("\n")
        elif not isinstance(node, (nodes.tgroup, nodes.thead, nodes.tbody, nodes.entry, nodes.field_body, nodes.description,
                                   nodes.document)):
            prefix = "#" * min(level, 6) + " " if isinstance(node, nodes.title) and isinstance(node.parent, nodes.section) else ""
            if isinstance(node, nodes.Admonition) and tag != "admonition":
                prefix = tag.replace("_", " ").capitalize() + ": "
            out.append(" " if on_line else "\n\n" + prefix)
            stack.append((" " if on_line else "\n\n", level, on_line))
        stack.extend((child, level, on_line) for child in reversed(children))
    return "".join(out)


def _directive_text(message: Any, depth: int) -> str:
    """The text of a directive plain docutils does not know (a Sphinx one): its argument line
    and its content parsed again; a code directive, even one given Sphinx's options, as
    fenced code. Other reports (a disabled ``raw`` or ``include``, a misused directive, a
    markup error) show nothing."""
    from docutils import nodes

    blocks = [n for n in message.children if isinstance(n, nodes.literal_block)]
    lines = blocks[0].astext().split("\n") if blocks else []
    head = _DIRECTIVE.search(lines[0].strip()) if lines else None
    if head is None:
        return ""
    name = head.group(1).lower()
    kind = name.split(":")[-1]  # "py:function" -> "function"
    unknown = message.children[0].astext().startswith("Unknown directive type")
    code = name in _CODE_DIRECTIVES or kind in _CODE_DIRECTIVES  # "code-block" with Sphinx's options is misused
    if not (unknown or code) or name in _DROPPED_DIRECTIVES or kind.startswith("auto"):  # autodoc reads code, not this file
        return ""
    # After the directive line: argument lines and ":option:" lines, a blank line, the content.
    body = textwrap.dedent("\n".join(lines[1:]))
    header, _, content = ("", "", body[1:]) if body.startswith("\n") else body.partition("\n\n")
    more = [x.strip() for x in header.split("\n") if x.strip() and not x.strip().startswith(":")]
    label = _LABELS.get(kind)
    if label:  # ".. versionadded:: 3.2" + text on the next lines: that text is content
        argument, content = head.group(2).strip(), "\n".join(more) + "\n\n" + content
    else:  # ".. function:: f(a,\n   b)": a signature may run on
        argument = " ".join([head.group(2).strip()] + more).strip()
    if code:
        return fence(textwrap.dedent(content), argument.split()[0] if argument else "")
    line = f"{label} {argument}".strip() + ":" if label else argument
    inner = _parse_and_render(content, "directive", depth + 1) if depth < MAX_RST_DEPTH else content
    return f"\n\n{line}\n\n{inner}\n\n"
