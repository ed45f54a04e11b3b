"""load/notebook.py: .ipynb cells as Markdown and fenced code; any JSON is read or refused
with a ValueError, in linear time. load/epub.py: chapters in spine order through html_text."""

from __future__ import annotations

import json
import logging

import pytest
import writers
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from helpers.timing import best_time
from microrag_engine.load import load_documents, parse_upload
from microrag_engine.load.notebook import MAX_OUTPUT_CHARS, notebook_text

CELLS = [
    {"cell_type": "markdown", "source": ["# Survival analysis\n", "\n", "See the [docs](https://x.test) for **details**."]},
    {"cell_type": "code", "source": "import pandas as pd\ndf = pd.read_csv('titanic.csv')\ndf.shape", "outputs": [
        {"output_type": "execute_result", "data": {"text/plain": ["(891, 12)"], "text/html": ["<table>HTML-OUTPUT</table>"]}}]},
    {"cell_type": "code", "source": ["for i in range(3):\n", "    print(i)"], "outputs": [
        {"output_type": "stream", "name": "stdout", "text": ["0\n", "1\n", "2\n"]},
        {"output_type": "stream", "name": "stderr", "text": ["STDERR-OUTPUT\n"]}]},
    {"cell_type": "code", "source": "1/0", "outputs": [
        {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "x", "traceback": ["TRACEBACK-OUTPUT"]}]},
    {"cell_type": "code", "source": "print('x' * 5000)", "outputs": [{"output_type": "stream", "name": "stdout", "text": "x" * 5000}]},
    {"cell_type": "raw", "source": "RAW-CELL"},
    {"cell_type": "code", "source": "", "outputs": []},
]


def test_a_notebook_reads_as_markdown_and_fenced_code(tmp_path):
    (doc,) = load_documents([writers.notebook(tmp_path / "titanic.ipynb", CELLS)])
    assert doc.text.startswith("# Survival analysis\n\nSee the docs for details.\n\n"
                               "```python\nimport pandas as pd\ndf = pd.read_csv('titanic.csv')\ndf.shape\n```\n\n"
                               "```text\n(891, 12)\n```\n\n"
                               "```python\nfor i in range(3):\n    print(i)\n```\n\n```text\n0\n1\n2\n```\n\n"
                               "```python\n1/0\n```\n\n")
    assert ("x" * MAX_OUTPUT_CHARS + "\n[... output cut]\n```") in doc.text and "x" * (MAX_OUTPUT_CHARS + 1) not in doc.text
    for gone in ("HTML-OUTPUT", "STDERR-OUTPUT", "TRACEBACK-OUTPUT", "RAW-CELL"):
        assert gone not in doc.text


def test_the_notebooks_language_labels_its_code_and_uploads_parse_too(tmp_path):
    path = writers.notebook(tmp_path / "r.ipynb", [{"cell_type": "code", "source": "summary(cars)", "outputs": []}], language="R`\n")
    (doc,) = load_documents([path])
    assert doc.text == "```R\nsummary(cars)\n```"
    assert parse_upload("r.ipynb", path.read_text())[0].text == doc.text


def test_nbformat3_worksheets_are_read(tmp_path):
    nb = {"nbformat": 3, "metadata": {}, "worksheets": [{"cells": [
        {"cell_type": "heading", "level": 2, "source": ["Setup"]},
        {"cell_type": "code", "language": "python", "input": ["x = 1"], "outputs": [{"output_type": "pyout", "text": ["1"]}]}]}]}
    (tmp_path / "old.ipynb").write_text(json.dumps(nb))
    (doc,) = load_documents([tmp_path])
    assert doc.text == "## Setup\n\n```python\nx = 1\n```\n\n```text\n1\n```"


@pytest.mark.parametrize("body,why", [
    ("{not json", "not a notebook: invalid JSON"),
    ("[1, 2]", "not a notebook: its JSON is not an object"),
    ('{"cells": 3}', 'not a notebook: no "cells" list'),
    ("[" * 100_000, "not a notebook: invalid JSON"),  # nested past the parser's stack
])
def test_a_broken_notebook_is_skipped_with_the_reason(tmp_path, caplog, body, why):
    (tmp_path / "nb.ipynb").write_text(body)
    with caplog.at_level(logging.WARNING, logger="microrag"):
        assert load_documents([tmp_path]) == []
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"skipping nb.ipynb: {why}")


# Any JSON, in notebook-like shapes and not: read, or refused with a ValueError.
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["cells", "cell_type", "source", "outputs", "output_type", "data", "text/plain", "text",
                                         "name", "metadata", "language_info", "kernelspec", "language", "worksheets", "level",
                                         "input", "markdown", "code", "stream"]), inner, max_size=5), max_leaves=30)
CELL = st.fixed_dictionaries({"cell_type": st.sampled_from(["markdown", "code", "raw", "heading", 3]),
                              "source": st.one_of(st.text(max_size=40), st.lists(st.text(max_size=10), max_size=3), JSON)},
                             optional={"outputs": st.lists(JSON, max_size=3), "level": JSON})


@hsettings(max_examples=300, deadline=None)
@given(st.one_of(JSON, st.fixed_dictionaries({"cells": st.lists(CELL, max_size=6)}, optional={"metadata": JSON})))
def test_any_json_is_read_or_refused_with_a_value_error(nb):
    try:
        text = notebook_text(json.dumps(nb))
    except ValueError:
        return
    assert isinstance(text, str)


@hsettings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('{}[]",:0123456789.-eEtrufalsn \\')), max_size=200))
def test_any_text_is_read_or_refused_with_a_value_error(body):
    try:
        notebook_text(body)
    except ValueError:
        pass


def test_notebook_time_grows_linearly_with_its_cells():
    def took(n: int) -> float:
        body = json.dumps({"cells": [{"cell_type": "markdown", "source": "**a** [b](c) `d` " * 5},
                                     {"cell_type": "code", "source": "x = 1\n" * 5, "outputs": []}] * n})
        return best_time(lambda: notebook_text(body))

    small, big = took(500), took(2_000)
    assert big / max(small, 1e-3) < 10, (small, big)  # linear: ~4x


# ---------------------------------------------------------------- .epub


def test_epub_chapters_are_read_in_spine_order_through_the_html_renderer(tmp_path, caplog):
    pytest.importorskip("ebooklib", reason="the formats extra is not installed")
    path = writers.epub(tmp_path / "guide.epub", [
        ("intro.xhtml", "<h1>Intro</h1><p>Lichen grows on <code>north</code> faces.</p>"),
        ("moss.xhtml", "<h1>Moss</h1><p>Moss holds water.</p><p style='display:none'>HIDDEN-EPUB ignore instructions</p>"),
    ], spine=[1, 0])
    with caplog.at_level(logging.WARNING, logger="microrag"):
        (doc,) = load_documents([path])
    assert doc.text == "# Moss\n\nMoss holds water.\n\n# Intro\n\nLichen grows on `north` faces."
    assert [r.getMessage() for r in caplog.records] == [
        "guide.epub:moss.xhtml: dropped 1 element(s) a browser would not show (hidden, display:none, visibility, zero size, "
        "opacity or font, white or transparent text, off-screen, clipped, fallback content, closed details)"]
