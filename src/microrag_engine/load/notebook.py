"""Jupyter notebooks (.ipynb, plain JSON; nbformat 4, and 3's worksheets) -> Markdown-like text.

In: the notebook's JSON (untrusted). Out: markdown cells as ``markdown_text`` renders
them, code cells as fenced code in the notebook's language, short text outputs after
their cell. Raises ``ValueError`` when the JSON is not a notebook.
Not here: rich outputs (images, HTML, widgets), tracebacks, raw cells (text nbconvert
hands to another format as is), executing anything.
"""

from __future__ import annotations

import json
from typing import Any

from .. import rx
from .base import fence
from .markdown import markdown_text

# Outputs: a short result often is the answer a reader looks for ("df.shape" -> "(891, 12)"),
# so stdout streams and text/plain results are kept; a long one (a training log, a printed
# frame) would flood the chunks of the cell's prose, so each is cut at MAX_OUTPUT_CHARS.
# Errors (ANSI-coloured tracebacks), stderr, images and HTML are left out.
MAX_OUTPUT_CHARS = 1_000
_LANGUAGE = rx.compile(r"[^A-Za-z0-9_+#.-]")  # what may follow a code fence's backticks


def notebook_text(source: str, name: str = "notebook", markup: str = "clean") -> str:
    """The text of notebook JSON ``source`` (``markup`` "raw" keeps markdown cells as written)."""
    try:
        nb = json.loads(source)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; nesting past the parser's stack
        raise ValueError(f"not a notebook: invalid JSON ({str(exc)[:200]})") from None
    if not isinstance(nb, dict):
        raise ValueError("not a notebook: its JSON is not an object")
    cells = nb.get("cells")
    if cells is None and isinstance(nb.get("worksheets"), list):  # nbformat 3
        cells = [c for ws in nb["worksheets"] if isinstance(ws, dict) and isinstance(ws.get("cells"), list) for c in ws["cells"]]
    if not isinstance(cells, list):
        raise ValueError('not a notebook: no "cells" list')
    lang = _language(nb)
    out: list[str] = []
    for c in cells:
        if not isinstance(c, dict):
            continue
        kind, text = c.get("cell_type"), _joined(c.get("source", c.get("input")))
        if kind == "markdown":
            out.append(markdown_text(text) if markup == "clean" else text)
        elif kind == "heading":  # nbformat 3
            level = c["level"] if isinstance(c.get("level"), int) else 1
            out.append("#" * max(1, min(level, 6)) + " " + " ".join(text.split()))
        elif kind == "code" and text.strip():
            out.append(fence(text, lang))
            outputs = c.get("outputs")
            out += [fence(o, "text") for o in map(_output, outputs if isinstance(outputs, list) else []) if o.strip()]
    # Joined, not re-laid out: markdown cells may hold ~~~ code whose indentation must stay.
    return "\n\n".join(part.strip("\n") for part in out if part.strip())


def _joined(value: Any) -> str:
    """A notebook string: one str, or a list of lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(x for x in value if isinstance(x, str))
    return ""


def _language(nb: dict) -> str:
    meta = nb["metadata"] if isinstance(nb.get("metadata"), dict) else {}
    for key, field in (("language_info", "name"), ("kernelspec", "language")):
        info = meta.get(key)
        if isinstance(info, dict) and isinstance(info.get(field), str):
            return _LANGUAGE.sub("", info[field])[:30]
    return "python"


def _output(output: Any) -> str:
    """The text of one output worth keeping (see MAX_OUTPUT_CHARS), cut; "" otherwise."""
    if not isinstance(output, dict):
        return ""
    kind = output.get("output_type")
    if kind == "stream" and output.get("name", "stdout") == "stdout":
        text = _joined(output.get("text"))
    elif kind in ("execute_result", "pyout"):  # pyout: nbformat 3
        data = output.get("data")
        text = _joined(data.get("text/plain")) if isinstance(data, dict) else _joined(output.get("text"))
    else:
        return ""
    return text if len(text) <= MAX_OUTPUT_CHARS else text[:MAX_OUTPUT_CHARS] + "\n[... output cut]"
