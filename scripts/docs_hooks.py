"""MkDocs hooks for the documentation site (``mkdocs.yml``: ``hooks``).

Two jobs, both so that docs/ pages stay plain Markdown that also reads on GitHub:

* Repository files the pages link to (``../../SECURITY.md``, ``../../benchmarks/results/*.md``)
  become pages of the site. MkDocs knows only files under docs/, and under ``--strict`` a
  link outside it fails the build; ``MOUNTED`` lists what is mounted, under ``repo/`` in the
  site. A link to any other file outside docs/ still fails the build.
* ``docs/reference/cli.md`` gets every command's ``--help``, generated from the parser at
  build time (the marker ``<!-- cli-help -->``), so the reference cannot drift from the CLI.

What it does not do: fetch anything, or rewrite links (a mounted file keeps its repository
path, relative to docs/, as its source name, so MkDocs resolves the pages' links itself).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page

# Repository files (globs, relative to the repository root) the docs pages may link to.
MOUNTED = (
    "SECURITY.md",
    "benchmarks/results/*.md",
    "benchmarks/results/*.png",
    "src/microrag_engine/models/MODEL_CARD.md",
    "training/RERANKER.md",
    "training/ANSWER_MODEL.md",
    "benchmarks/results/answer-model.json",
)
CLI_MARKER = "<!-- cli-help -->"
HELP_WIDTH = "100"  # argparse wraps at $COLUMNS: fixed, so the page does not depend on the terminal


def on_files(files: Files, config: MkDocsConfig) -> Files:
    docs = Path(config.docs_dir)
    root = docs.parent
    for pattern in MOUNTED:
        for path in sorted(root.glob(pattern)):
            rel = path.relative_to(root).as_posix()
            # Source name "../SECURITY.md": what a page's relative link resolves to. Included
            # explicitly (the default exclude_docs pattern ".*" would match its ".."); out of
            # the nav without a notice, since the pages link to them.
            site = File(f"repo/{rel}", None, config.site_dir, config.use_directory_urls)
            files.append(File(f"../{rel}", str(docs), config.site_dir, config.use_directory_urls,
                              dest_uri=site.dest_uri, inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if CLI_MARKER not in markdown:
        return markdown
    return markdown.replace(CLI_MARKER, cli_help())


def cli_help() -> str:
    """Every command's ``--help`` (groups' subcommands included), as Markdown sections."""
    os.environ["COLUMNS"] = HELP_WIDTH
    src = str(Path(__file__).resolve().parents[1] / "src")  # this checkout's CLI, not an installed one
    if src not in sys.path:
        sys.path.insert(0, src)
    from microrag_engine.cli.main import build_parser

    out: list[str] = []

    def walk(parser: argparse.ArgumentParser, depth: int) -> None:
        out.extend([f"{'#' * depth} `{parser.prog}`", "", "```text", parser.format_help().rstrip(), "```", ""])
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in dict.fromkeys(action.choices.values()):  # aliases map to one parser
                    walk(sub, min(depth + 1, 4))

    walk(build_parser(), 2)
    return "\n".join(out)
