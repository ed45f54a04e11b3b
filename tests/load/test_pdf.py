"""load/pdf.py: where each page starts, table-of-contents leaders and running headers
dropped, pages without a text layer read by OCR or named in one warning."""

from __future__ import annotations

import logging
import shutil
import sys
import types
from bisect import bisect_right

import pytest
import writers

from microrag_engine.load import load_documents
from microrag_engine.load.pdf import drop_leaders, drop_running_lines, join_pages


def _starts(doc) -> list[int]:
    return [int(x) for x in dict(doc.meta)["pages"].split(",")]


def test_pdf_pages_carry_their_start_offsets(tmp_path):
    path = writers.pdf(tmp_path / "guide.pdf", [["First page about okapis."], [], ["Third page", "about narwhals."]])
    (doc,) = load_documents([path])
    assert doc.text == "First page about okapis.\n\nThird page\nabout narwhals."
    starts = _starts(doc)
    assert starts == [0, 26, 26]  # page 2 holds no text: it starts (and ends) where page 3 starts
    assert doc.text[starts[2]:].startswith("Third page")
    page_of = lambda offset: bisect_right(starts, offset)  # noqa: E731 - how the chunker maps an offset to its page
    assert page_of(0) == 1 and page_of(25) == 1 and page_of(26) == 3 and page_of(len(doc.text) - 1) == 3


def test_join_pages_offsets_for_empty_pages_at_either_end():
    assert join_pages(["", "a", "", "bc", ""]) == ("a\n\nbc", [0, 0, 3, 3, 5])
    assert join_pages([]) == ("", [])


def test_table_of_contents_leaders_are_dropped_and_titles_kept():
    toc = ("Contents\nasn1_der_decoding . . . . . . 20\nIntro ........ 3\n1.2 Scope ....... xii\nPreface · · · · · 7\n"
           "Wait... 3 dots are prose\nTotal: 40 items")
    assert drop_leaders(toc) == ("Contents\nasn1_der_decoding\nIntro\n1.2 Scope\nPreface\n"
                                 "Wait... 3 dots are prose\nTotal: 40 items")


def test_running_headers_and_footers_are_dropped(tmp_path):
    pages = [["ACME Employee Handbook", "Welcome to ACME.", "Page 1 of 4"],
             ["ACME Employee Handbook", "Leave is 25 days a year.", "Page 2 of 4"],
             ["ACME Employee Handbook", "Expenses are paid monthly.", "Page 3 of 4"],
             ["ACME Employee Handbook", "Contacts: hr@acme.test", "Page 4 of 4"]]
    (doc,) = load_documents([writers.pdf(tmp_path / "handbook.pdf", pages)])
    assert doc.text == ("ACME Employee Handbook\nWelcome to ACME.\n\nLeave is 25 days a year.\n\n"
                        "Expenses are paid monthly.\n\nContacts: hr@acme.test")  # the title stays once, on page 1


def test_running_lines_need_three_pages_and_half_of_them():
    two = ["Title\nbody one", "Title\nbody two"]
    assert drop_running_lines(two) == two
    rare = ["Note\na", "b\nc", "d\ne", "f\ng", "h\ni"]  # "Note" tops 1 page of 5
    assert drop_running_lines(rare) == rare
    counters = ["a\n- 1 -", "b\n- 2 -", "c\nno counter", "d\n- 4 -"]
    assert drop_running_lines(counters) == ["a", "b", "c\nno counter", "d"]


def test_a_page_without_text_layer_is_named_in_one_warning(tmp_path, caplog, monkeypatch):
    import microrag_engine.load.pdf as pdf

    monkeypatch.setattr(pdf, "ocr_available", lambda: False)
    path = writers.pdf(tmp_path / "scan.pdf", [["A typed cover page."], None, None])
    with caplog.at_level(logging.WARNING, logger="microrag"):
        (doc,) = load_documents([path])
    assert doc.text == "A typed cover page." and _starts(doc) == [0, 19, 19]
    assert [r.getMessage() for r in caplog.records] == [
        "scan.pdf: 2 page(s) have no text layer (scanned?); install microrag-engine[ocr] and Debian's tesseract-ocr to read them"]


def test_the_ocr_path_renders_scanned_pages_for_tesseract(tmp_path, monkeypatch):
    """The plumbing, with a stand-in for Tesseract: scanned pages only, rendered by pypdfium2
    at the OCR resolution, their text placed at their page."""
    pytest.importorskip("pypdfium2", reason="the ocr extra is not installed")
    import microrag_engine.load.pdf as pdf

    seen = []

    def image_to_string(image, timeout=None):
        seen.append(image.size)
        return ["Scanned page one.\n", "Scanned page two.\n"][len(seen) - 1]

    monkeypatch.setitem(sys.modules, "pytesseract", types.SimpleNamespace(image_to_string=image_to_string))
    monkeypatch.setattr(pdf, "ocr_available", lambda: True)
    (doc,) = load_documents([writers.pdf(tmp_path / "scan.pdf", [["Typed page."], None, ["Typed again."], None])])
    assert doc.text == "Typed page.\n\nScanned page one.\n\nTyped again.\n\nScanned page two."
    assert seen == [(1700, 2200)] * 2  # US Letter at 200 dpi


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="Tesseract is not installed (Debian: apt install tesseract-ocr)")
def test_a_scanned_page_is_read_by_tesseract(tmp_path):
    pytest.importorskip("pytesseract", reason="the ocr extra is not installed")
    from PIL import Image, ImageDraw, ImageFont

    page = Image.new("L", (1700, 2200), 255)
    ImageDraw.Draw(page).text((150, 300), "Invoices are paid within thirty days.", fill=0, font=ImageFont.load_default(size=60))
    page.save(tmp_path / "scan.pdf", "PDF", resolution=200)  # an image, no text layer
    (doc,) = load_documents([tmp_path / "scan.pdf"])
    assert "paid within thirty days" in doc.text


def test_bare_page_numbers_at_the_top_or_bottom_are_dropped():
    pages = ["5\n3 Utilities\nThe asn1Parser tool reads definitions.", "Concept Index\nasn1 parser\n32"]
    assert drop_running_lines(pages + ["x\ny"]) [:2] == ["3 Utilities\nThe asn1Parser tool reads definitions.",
                                                          "Concept Index\nasn1 parser"]
