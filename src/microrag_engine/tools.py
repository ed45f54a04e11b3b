"""Step 5b - tools: the file-read tool, and when a call the model makes may run.

Off by default. When enabled it reads only inside one allowlisted directory:
the requested path is NFKC-normalised, stripped of invisible characters,
resolved (``..`` and symlinks included) and must still lie inside the
directory; files carry a label (``<name>.label`` beside them, default
``internal``) checked against the caller's clearance. A call is executed only
if it appears in the model's own output and the same call text does not occur
in the retrieved context - so an instruction planted in a document never runs,
even when a compliant model repeats it.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from . import rx
from .guard import canonical

# RE2 (``rx``): with ``re`` a long run of "read_file(" with no ")" restarted the path's scan at
# every occurrence: 48 s of CPU for 200,000 characters (#33 finding 9).
CALL = rx.compile(r"read_file\(\s*[\"'`]?(?P<path>[^\"'`)]*)[\"'`]?\s*\)")


@dataclass(frozen=True)
class FileTool:
    """The file tool as one caller may use it: ``root`` (``None``: disabled, every call is
    reported as refused), the caller's ``clearance``, and ``confined=False`` for the lab
    baseline's naive tool."""

    root: Path | None
    clearance: frozenset[str]
    confined: bool = True
    max_bytes: int = 4096

    def run(self, answer: str, context: list[str], asked: str) -> list[ToolResult]:
        """The calls in ``answer`` that may run: named by the user's own message ``asked``,
        not planted in ``context``, inside the tool directory, within the caller's clearance."""
        return run_tool_calls(answer, context, self.root, self.clearance, self.max_bytes, self.confined, asked)


@dataclass
class ToolResult:
    call: str
    ran: bool
    output: str = ""
    refused: str = ""  # why not, when it did not run


def _norm_path(path: str) -> str:
    """The file a call names, however it is spelled: canonical form, no quotes or spaces,
    no ./ or ../ detours - so read_file("a.txt") in a document and read_file(a.txt) in an answer
    are one call."""
    return posixpath.normpath(re.sub(r"[\s\"'`]", "", canonical(path)).replace("\\", "/")).lstrip("/").lower()


# A file name as a user writes it in a question: "notes.txt", "docs/roster.csv" (linear time:
# the question is the caller's text).
_FILE_NAME = rx.compile(r"[\w./-]*\w\.\w+")


def run_tool_calls(answer: str, context: list[str], root: Path | None, clearance: frozenset[str],
                   max_bytes: int = 4096, confined: bool = True, asked: str | None = None) -> list[ToolResult]:
    """Find ``read_file(...)`` calls in ``answer`` and run the ones that are allowed.

    With ``asked`` (the user's own message of this turn), a call runs only for a file that
    message names: a call the model makes because a document, an earlier answer or a forged
    assistant turn put it there is refused, whatever turn it came from.
    ``confined=False`` is the lab baseline's naive tool: any path, any caller, any origin.
    """
    if not confined:
        return [_read_anything(m.group(0), m.group("path"), root) for m in CALL.finditer(answer)]
    results = []
    named = [m.group("path") for text in context for m in CALL.finditer(canonical(text))]
    planted = {_norm_path(p) for p in named} | ({_target(root, p) for p in named} - {None} if root else set())
    said = canonical(asked or "")
    wanted = {_norm_path(p) for p in [m.group("path") for m in CALL.finditer(said)] + _FILE_NAME.findall(said)}
    for m in CALL.finditer(canonical(answer)):
        call = m.group(0)
        if root is None:
            results.append(ToolResult(call, False, refused="the file tool is disabled"))
        elif _norm_path(m.group("path")) in planted or (_target(root, m.group("path")) or "") in planted:
            results.append(ToolResult(call, False, refused="the call text comes from retrieved documents"))
        elif asked is not None and _norm_path(m.group("path")) not in wanted:
            results.append(ToolResult(call, False, refused="the user's message did not ask for this file"))
        else:
            results.append(_read(call, m.group("path"), root, clearance, max_bytes))
    return results


def _target(root: Path, path: str) -> str | None:
    """The file ``path`` names under ``root`` once resolved (a detour out through the root's own
    name and back in names the same file), or None."""
    try:
        return str((root.resolve() / canonical(path).strip().strip("\"'`")).resolve())
    except (OSError, RuntimeError, ValueError):
        return None


def _read(call: str, requested: str, root: Path, clearance: frozenset[str], max_bytes: int) -> ToolResult:
    name = canonical(requested).strip()
    base = root.resolve()
    try:
        target = (base / name).resolve(strict=True)  # absolute paths replace base and are caught below
    except (OSError, RuntimeError, ValueError):  # ValueError: a NUL byte in the path
        return ToolResult(call, False, refused="no such file in the tool directory")
    if os.path.commonpath([base, target]) != str(base) or not target.is_file():
        return ToolResult(call, False, refused="path is outside the tool directory")
    label_file = target.with_name(target.name + ".label")
    label = label_file.read_text().strip() if label_file.exists() else "internal"
    if label not in clearance:
        return ToolResult(call, False, refused=f"the caller may not read {label!r} files")
    return ToolResult(call, True, output=target.read_bytes()[:max_bytes].decode("utf-8", "replace"))


def _read_anything(call: str, path: str, root: Path | None) -> ToolResult:
    # The naive tool of the lab baseline: any path (relative to the tool directory, if
    # any), any caller, and a NUL byte in the path is its caller's problem (red team #11).
    try:
        return ToolResult(call, True, output=((root or Path(".")) / canonical(path).strip().strip("\"'`")).read_text(
            errors="replace")[:4096])
    except OSError as exc:
        return ToolResult(call, False, refused=type(exc).__name__)
