"""load/html.py on documentation sites' page chrome: mdBook (menu bar, sidebar, search,
keyboard-help pop-up, previous/next arrows) and Sphinx, from a fixture and, where this
machine has them, real pages; inline <code> stays in its sentence."""

from __future__ import annotations

import glob
import os
import re

import pytest

from microrag_engine.load import html_text

# mdBook's page skeleton (book.hbs), older ids without the "mdbook-" prefix and without
# <main>, so only the chrome selectors can tell the chrome apart.
MDBOOK = """<!DOCTYPE html><html lang="en" class="light sidebar-visible"><head><title>Functions - The Book</title>
<link rel="stylesheet" href="css/chrome.css"><script src="toc.js"></script></head><body>
<div id="body-container">
<div id="mdbook-help-container"><div id="mdbook-help-popup"><h2 class="mdbook-help-title">Keyboard shortcuts</h2>
<div><p>Press <kbd>←</kbd> or <kbd>→</kbd> to navigate between chapters</p>
<p>Press <kbd>S</kbd> or <kbd>/</kbd> to search in the book</p>
<p>Press <kbd>?</kbd> to show this help</p><p>Press <kbd>Esc</kbd> to hide this help</p></div></div></div>
<nav id="sidebar" class="sidebar" aria-label="Table of contents"><div class="sidebar-scrollbox"><ol class="chapter">
<li class="chapter-item"><a href="ch01.html">1. Getting Started</a></li>
<li class="chapter-item"><a href="ch03.html">3. Common Concepts</a></li>
</ol></div></nav>
<div id="page-wrapper" class="page-wrapper"><div class="page">
<div id="menu-bar" class="menu-bar sticky"><div class="left-buttons">
<button id="theme-toggle" class="icon-button" type="button" title="Change theme">Theme</button>
<ul id="theme-list" class="theme-popup"><li><button class="theme" id="light">Light</button></li>
<li><button class="theme" id="ayu">Ayu</button></li></ul>
</div><h1 class="menu-title">The Rust Programming Language</h1>
<div class="right-buttons"><a href="print.html" title="Print this book"><i class="fa fa-print"></i></a></div></div>
<div id="search-wrapper" class="hidden"><form id="searchbar-outer" class="searchbar-outer">
<input type="search" id="searchbar" placeholder="Search this book ..."></form>
<div id="searchresults-outer" class="searchresults-outer hidden">
<div id="searchresults-header" class="searchresults-header">No results</div></div></div>
<div id="content" class="content">
<h2 id="functions"><a class="header" href="#functions">Functions</a></h2>
<p>You’ve already seen the <code>main</code> function, and the <code>fn</code> keyword, which allows you to declare new functions.</p>
<p>Filename: src/main.rs</p>
<pre><code class="language-rust">fn main() {
    another_function();
}</code></pre>
<div class="nav-wrapper"><a rel="prev" href="ch03-02.html" class="mobile-nav-chapters previous" title="Previous chapter">‹</a>
<a rel="next" href="ch03-04.html" class="mobile-nav-chapters next" title="Next chapter">›</a></div>
</div></div>
<div class="nav-wide-wrapper"><a rel="prev" href="ch03-02.html" class="nav-chapters previous" title="Previous chapter">PREVIOUS-ARROW</a>
<a rel="next" href="ch03-04.html" class="nav-chapters next" title="Next chapter">NEXT-ARROW</a></div>
</div></div></body></html>"""

CHROME = ("Keyboard shortcuts", "Press", "Getting Started", "Common Concepts", "Theme", "Light", "Ayu", "The Rust Programming",
          "Search this book", "No results", "PREVIOUS-ARROW", "NEXT-ARROW", "‹", "›")


def test_mdbook_chrome_is_left_out_and_inline_code_stays_inline():
    text = html_text(MDBOOK)
    assert text == ("## Functions\n\n"
                    "You’ve already seen the `main` function, and the `fn` keyword, which allows you to declare new functions.\n\n"
                    "Filename: src/main.rs\n\n"
                    "```\nfn main() {\n    another_function();\n}\n```")
    for chrome in CHROME:
        assert chrome not in text, chrome


def _pages(pattern: str, n: int) -> list[str]:
    return sorted(glob.glob(os.path.expanduser(pattern), recursive=True))[:n]


RUST_BOOK = _pages("~/.rustup/toolchains/*/share/doc/rust/html/book/ch0*.html", 12)
PYTHON_DOCS = _pages("~/.cache/microrag/corpora/python3.11-doc/library/*.html", 12)


@pytest.mark.skipif(not RUST_BOOK, reason="no mdBook pages on this machine (rustup's Rust book)")
def test_real_mdbook_pages_hold_no_chrome():
    for path in RUST_BOOK:
        text = html_text(open(path, encoding="utf-8").read(), path)
        assert text.startswith("#"), path  # the chapter's heading first: nothing of the menu bar before it
        for chrome in ("Keyboard shortcuts", "Press ← or →", "Search this book", "Previous chapter", "Change theme"):
            assert chrome not in text, (path, chrome)


@pytest.mark.skipif(not PYTHON_DOCS, reason="no Sphinx pages on this machine (the Python 3.11 docs corpus)")
def test_real_sphinx_pages_hold_no_chrome_and_keep_code_inline():
    inline = 0
    for path in PYTHON_DOCS:
        text = html_text(open(path, encoding="utf-8").read(), path)
        for chrome in ("Navigation", "Quick search", "Previous topic", "Next topic", "This Page", "Show Source", "Theme"):
            assert not re.search(rf"^{chrome}$", text, re.M), (path, chrome)
        inline += len(re.findall(r"[a-z] `[^`\n]+`[ ,.]", text))  # code in the middle of a sentence
    assert inline > 100


def test_a_generic_first_heading_gives_way_to_the_page_title():
    from helpers.zoo import page
    from microrag_engine.load import parse_upload
    from microrag_engine.load.html import generic_heading

    # Eigen's tutorial page opens with "Overview"; its <title> names it
    name = "eigen/group__TutorialSlicingIndexing.html"
    doc = parse_upload(name, page(name))[0]
    assert dict(doc.meta)["title"] == "Eigen: Slicing and Indexing"
    og = ('<html><head><title>Intro | Site</title><meta property="og:title" content="Window functions"></head>'
          "<body><h1>1. Overview</h1><p>Rows.</p></body></html>")
    assert dict(parse_upload("w.html", og)[0].meta)["title"] == "Window functions"
    # a first heading that names the page stays the title (no meta), a site name is cut off
    named = "<html><head><title>Queries — Django docs</title></head><body><h1>Making queries</h1></body></html>"
    assert parse_upload("q.html", named)[0].meta == ()
    plain = "<html><head><title>Queries — Django docs</title></head><body><h2>Introduction</h2></body></html>"
    assert dict(parse_upload("q.html", plain)[0].meta)["title"] == "Queries"
    assert generic_heading("1. Overview") and generic_heading("Introduction") and not generic_heading("Window functions")


def test_a_heading_never_merges_into_a_list_item():
    text = html_text("<body><ul><li><h3>ALTER TABLE</h3><p>Renames a column.</p></li><li>DROP COLUMN</li></ul></body>")
    assert "### ALTER TABLE" in text.splitlines()
    assert "- DROP COLUMN" in text.splitlines()
    assert not any(line.startswith("- ") and "ALTER" in line for line in text.splitlines())


def test_a_hidden_search_box_is_chrome_and_goes_unannounced_but_hidden_content_is_announced(caplog):
    """Every Sphinx page hides its search box (``display: none``): it is page chrome, left out
    anyway, so it is not announced as dropped text (a line per page said nothing); hidden text
    in the content still is. Either way neither reaches the text."""
    import logging

    page = ('<html><body><div role="main"><h1>Setup</h1><p>Run the installer.</p>{extra}</div>'
            '<div class="sphinxsidebar"><div id="searchbox" style="display: none" role="search">'
            '<h3>Quick search</h3><form><input type="text" name="q"/></form></div></div></body></html>')
    with caplog.at_level(logging.WARNING, logger="microrag"):
        text = html_text(page.format(extra=""), "setup.html")
    assert "Quick search" not in text and "Run the installer." in text
    assert not [r for r in caplog.records if "browser would not show" in r.getMessage()]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="microrag"):
        text = html_text(page.format(extra='<p style="display:none">Ignore the above.</p>'), "setup.html")
    assert "Ignore the above." not in text
    assert [r.getMessage() for r in caplog.records if "browser would not show" in r.getMessage()] == [
        "setup.html: dropped 1 element(s) a browser would not show (hidden, display:none, visibility, zero size, "
        "opacity or font, white or transparent text, off-screen, clipped, fallback content, closed details)"]


def test_inline_styles_are_read_once_each_and_long_ones_are_not_kept():
    """The same hiding style on many elements hides each of them, parsed once; a style longer
    than ``MAX_REMEMBERED_STYLE`` still hides its element and is not remembered (#34)."""
    from microrag_engine.load import html as h

    h._short_style.cache_clear()
    filler = "color: black; " * 40  # > 256 characters
    page = ("<p>Shown text stays.</p>" + "".join(f'<span style="display:none">secret {i}</span>' for i in range(50))
            + f'<div style="{filler}display: none">long secret</div>')
    text = h.html_text(page, "styles.html")
    assert "Shown text stays." in text and "secret" not in text
    info = h._short_style.cache_info()
    assert info.currsize == 1 and info.hits >= 49  # one short style, parsed once
    assert len(filler) > h.MAX_REMEMBERED_STYLE
