"""present.py: numbered citations, the cited-sources list as CommonMark, and its escaping
of document-supplied titles, sections and names (rendered by markdown-it, a CommonMark parser)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from microrag_engine.present import NOT_RETRIEVED, Numberer, Ref, Shown, numbered, printable, section_of

markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py (dev extra) renders the CommonMark")

LEAVE = Ref("hr/leave.md", 0, 0, "Leave and holidays", "# Leave and holidays\n\n## Carry-over\n\nUp to 5 days carry over.")
VPN = Ref("it/vpn.md", 2, 3, "VPN", "WireGuard on UDP port 51820.")
ANSWER = ("Up to 5 days carry over. [source: hr/leave.md · chunk 0]\nThe VPN uses port 51820. "
          "[source: it/vpn.md · chunk 2 · p. 3] Again [source: hr/leave.md · chunk 0].")


def _tokens(text: str):
    return markdown_it.MarkdownIt("commonmark").parse(text)


def test_tags_are_numbered_in_order_of_first_use_and_only_cited_sources_are_listed():
    unused = Ref("misc/other.md", 1, 0, "Other", "Nothing cited here.")
    shown = numbered(ANSWER, [VPN, unused, LEAVE])
    assert shown.text == "Up to 5 days carry over. [1]\nThe VPN uses port 51820. [2] Again [1]."
    assert shown.cited == [LEAVE, VPN]
    assert shown.sources() == ("Sources:\n\n1. Leave and holidays, “Carry\\-over” — `hr/leave.md · chunk 0`\n"
                               "2. VPN — `it/vpn.md · chunk 2 · p. 3`")
    assert shown.sources(markdown=False) == ("Sources:\n  1. Leave and holidays, “Carry-over” — hr/leave.md · chunk 0\n"
                                             "  2. VPN — it/vpn.md · chunk 2 · p. 3")
    assert [e["n"] for e in shown.entries()] == [1, 2] and shown.entries()[0]["section"] == "Carry-over"


def test_the_list_renders_as_a_commonmark_list_after_the_answer():
    doc = numbered(ANSWER, [LEAVE, VPN]).markdown()
    kinds = [t.type for t in _tokens(doc)]
    assert kinds.count("list_item_open") == 2 and kinds.count("ordered_list_open") == 1
    # "Sources:" is a paragraph of its own, not run into the list or the answer.
    assert "Sources:" in [t.content for t in _tokens(doc) if t.type == "inline"]


def test_a_tag_naming_no_passage_given_is_kept_as_written():
    shown = numbered("Made up. [source: nowhere.md · chunk 9]", [LEAVE])
    assert shown.text == "Made up. [source: nowhere.md · chunk 9]" and shown.cited == [] and shown.markdown() == shown.text


def test_a_refusal_or_an_uncited_answer_lists_nothing():
    assert Shown("The indexed documents don't cover that.", []).markdown() == "The indexed documents don't cover that."


def test_numbering_before_the_passages_are_known_then_looked_up():
    n = Numberer(None)
    text = n.feed(ANSWER[:30]) + n.feed(ANSWER[30:]) + n.feed(" [source: ghost.md · chunk 4]") + n.flush()
    assert text.endswith("Again [1]. [3]")
    shown = Shown(text, n.cited).among([LEAVE, VPN])
    assert shown.cited[:2] == [LEAVE, VPN] and shown.cited[2].title == NOT_RETRIEVED
    assert "3. (not among the passages retrieved) — ghost.md · chunk 4" in shown.sources(markdown=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(ANSWER)), max_size=8))
def test_a_stream_numbers_as_the_whole_text_does_however_it_is_split(cuts):
    n = Numberer([LEAVE, VPN])
    edges = [0, *sorted(cuts), len(ANSWER)]
    streamed = "".join(n.feed(ANSWER[a:b]) for a, b in zip(edges, edges[1:])) + n.flush()
    assert streamed == numbered(ANSWER, [LEAVE, VPN]).text


HOSTILE = st.lists(st.sampled_from([*"![]()<>`*_#-+=|~&\\:/.1 \nahttpsx", "http://", "<img src=x>", "![a](b)", "&amp;"]),
                   max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(title=HOSTILE, heading=HOSTILE, doc=HOSTILE.filter(lambda d: d.strip() and "\n" not in d))
def test_a_documents_title_heading_or_name_never_becomes_a_link_an_image_or_html(title, heading, doc):
    """Titles, headings and names are written by whoever wrote the document: in a chat UI an
    image is a beacon and a link a lure, so each entry must stay text."""
    ref = Ref(doc, 0, 0, title, f"## {heading}\n\nbody")
    shown = numbered(f"Said. [source: {doc} · chunk 0]", [ref])
    tokens = _tokens(shown.markdown())
    assert sum(t.type == "list_item_open" for t in tokens) == 1
    children = [c for t in tokens if t.type == "inline" for c in t.children or []]
    assert not [c.type for c in children if c.type in ("link_open", "image", "html_inline")]
    assert not [t.type for t in tokens if t.type in ("html_block", "heading_open", "bullet_list_open", "blockquote_open")]


def test_section_is_the_first_heading_other_than_the_title():
    assert section_of("# Guide\n\n## 2.1. Checkpointing ##\ntext", "Guide") == "2.1. Checkpointing"
    assert section_of("no heading at all") == ""
    assert section_of("# Guide\ntext", "Guide") == ""


def test_section_skips_a_comment_in_a_code_fence():
    text = "```bash\n# install the tools first\npip install x\n```\n\n## Installing\ntext"
    assert section_of(text) == "Installing"
    assert section_of("~~~\n# only a comment\n~~~\n") == ""


def test_a_name_holding_brackets_or_the_tag_separator_is_matched_exactly():
    odd = Ref("notes [draft] · v2].md", 4, 0, "Draft", "text")
    shown = numbered("Said. [source: notes [draft] · v2].md · chunk 4] And [source: it/vpn.md · chunk 2].", [odd, VPN])
    # VPN is paged (p. 3): a model that drops the page still cites it.
    assert shown.text == "Said. [1] And [2]." and shown.cited == [odd, VPN]


NAMES = st.lists(st.sampled_from([*"[]·: ab/.", " · chunk 1]", "[source: ", "]"]), min_size=1, max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(names=st.lists(NAMES.filter(lambda d: d.strip()), min_size=1, max_size=3, unique=True),
       cuts=st.lists(st.integers(0, 400), max_size=10))
def test_a_stream_of_hostile_names_numbers_as_the_whole_text_does(names, cuts):
    refs = [Ref(d, i, i % 2, f"T{i}") for i, d in enumerate(names)]
    text = " then ".join(f"fact {i} [source: {d} · chunk {i}{' · p. 1' if i % 2 else ''}]" for i, d in enumerate(names))
    whole = numbered(text, refs)
    n = Numberer(refs)
    edges = [0, *sorted(c for c in cuts if c <= len(text)), len(text)]
    assert "".join(n.feed(text[a:b]) for a, b in zip(edges, edges[1:])) + n.flush() == whole.text
    assert n.cited == whole.cited


def test_printable_drops_c0_and_c1_controls_and_keeps_lines():
    hostile = "a\x1b]0;owned\x07b\x9b2Jc\x7fd\tE\nF\x00"
    assert printable(hostile) == "a]0;ownedb2Jcd\tE\nF"
