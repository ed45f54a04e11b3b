"""load/office.py: .docx, .pptx and .xlsx files written by their own libraries, read back in
document order; hidden content dropped; bounded work; corrupt files and zip bombs refused."""

from __future__ import annotations

import logging
import re
import zipfile

import pytest
import writers

from microrag_engine.load import load_documents

pytest.importorskip("docx", reason="the formats extra is not installed")


def _load(path, caplog) -> tuple[str, list[str]]:
    with caplog.at_level(logging.WARNING, logger="microrag"):
        (doc,) = load_documents([path])
    return doc.text, [r.getMessage() for r in caplog.records if r.name == "microrag"]


def test_docx_keeps_headings_lists_and_tables_in_document_order(tmp_path, caplog):
    text, warned = _load(writers.docx(tmp_path / "policy.docx"), caplog)
    assert text == ("# Travel policy\n\n"
                    "Book trains when the trip takes under four hours.\n\n"
                    "- Economy class on every flight\n"
                    "- Receipts within 30 days\n\n"
                    "City | Hotel limit\nBerlin | 140 EUR\nParis | 180 EUR\n\n"
                    "## Per diem\n\n"
                    "Meals are paid at 40 EUR a day. Alcohol is not.")
    assert warned == ["policy.docx: dropped 3 run(s) of text a reader would not see (hidden, white or under 2 pt)"]


def test_docx_merged_cells_are_read_once(tmp_path, caplog):
    import docx

    d = docx.Document()
    table = d.add_table(rows=2, cols=3)
    table.cell(0, 0).merge(table.cell(0, 2)).text = "Quarterly totals"
    for c, text in enumerate(["Q1", "Q2", "Q3"]):
        table.cell(1, c).text = text
    d.save(str(tmp_path / "t.docx"))
    text, _ = _load(tmp_path / "t.docx", caplog)
    assert text == "Quarterly totals\nQ1 | Q2 | Q3"



@pytest.mark.parametrize("style_id", ['A" and "1"="2', "say \"hi\"", "it's"])
def test_a_docx_style_id_is_matched_exactly_never_read_as_xpath(tmp_path, caplog, style_id):
    """#34 review: a style id is untrusted text. A hidden style under a quote-laden id hides its
    paragraph (as Word matches ids exactly); an id that reads as an XPath condition never picks
    another style; a '"' in an id does not fail the file."""
    import docx
    from docx.enum.style import WD_STYLE_TYPE
    from docx.oxml.ns import qn

    d = docx.Document()
    hidden = d.styles.add_style("Sneaky", WD_STYLE_TYPE.PARAGRAPH)
    hidden.font.hidden = True
    d.styles.add_style("HiddenPara", WD_STYLE_TYPE.PARAGRAPH).font.hidden = True
    hidden.element.set(qn("w:styleId"), style_id)
    d.add_paragraph("Shown before.")
    d.add_paragraph("Planted under the hidden style.")._p.get_or_add_pPr().get_or_add_pStyle().set(qn("w:val"), style_id)
    d.add_paragraph("No such style: shown.")._p.get_or_add_pPr().get_or_add_pStyle().set(
        qn("w:val"), 'Nope" or @w:styleId="HiddenPara')
    d.save(str(tmp_path / "s.docx"))
    text, _ = _load(tmp_path / "s.docx", caplog)
    assert text == "Shown before.\n\nNo such style: shown."

def test_pptx_has_a_section_a_slide_with_tables_and_speaker_notes(tmp_path, caplog):
    text, warned = _load(writers.pptx(tmp_path / "deck.pptx"), caplog)
    assert text == ("# Slide 1: Quarterly results\n\n"
                    "- Revenue grew 12%\n- Costs fell in every region\n\n"
                    "Notes: Mention the new Lisbon office.\n\n"
                    "# Slide 2: Regions\n\n"
                    "Region | Growth\nEMEA | 9%\n\n"
                    "Source: finance team")
    assert warned == ["deck.pptx: dropped 1 hidden slide(s) and 0 hidden shape(s)"]


def test_xlsx_has_a_section_a_visible_sheet_and_a_line_a_row(tmp_path, caplog):
    text, warned = _load(writers.xlsx(tmp_path / "budget.xlsx"), caplog)
    assert text == ("# Sheet: Budget\n\n"
                    "Item | Cost | Approved\nLaptop 0 | 1200 | True\nLaptop 1 | 1201 | True\nLaptop 2 | 1202 | True\n\n"
                    "# Sheet: Notes\n\n"
                    "Ask finance | | before March")
    assert warned == ["budget.xlsx: dropped 1 hidden sheet(s): 'Secret'"]


def test_a_huge_sheet_is_read_bounded_with_a_warning(tmp_path, caplog, monkeypatch):
    import microrag_engine.load.office as office

    monkeypatch.setattr(office, "MAX_XLSX_ROWS", 50)
    monkeypatch.setattr(office, "MAX_XLSX_CELLS", 90)
    text, warned = _load(writers.xlsx(tmp_path / "big.xlsx", rows=200), caplog)
    assert "Laptop 28" in text and "Laptop 29 " not in text and "# Sheet: Notes" not in text  # 3 cells a row: cut past 90
    assert warned[0] == "big.xlsx: cut at 90 cells (sheet 'Budget', row 31)"
    monkeypatch.setattr(office, "MAX_XLSX_CELLS", 10_000)
    caplog.clear()
    text, warned = _load(tmp_path / "big.xlsx", caplog)
    assert "Laptop 48" in text and "Laptop 49" not in text and "# Sheet: Notes" in text
    assert warned[0] == "big.xlsx: sheet 'Budget': rows past 50 not read"


def test_a_sheet_declaring_a_huge_size_costs_only_what_it_holds(tmp_path, caplog):
    """A sheet's <dimension> says A1:XFD1048576: read-only openpyxl would pad every row to
    16,384 cells and yield a million empty rows; the declared size is not trusted."""
    path = writers.xlsx(tmp_path / "liar.xlsx", rows=1)
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    sheet = members["xl/worksheets/sheet1.xml"]
    members["xl/worksheets/sheet1.xml"] = sheet.replace(b'<dimension ref="A1:C2"/>', b'<dimension ref="A1:XFD1048576"/>')
    assert members["xl/worksheets/sheet1.xml"] != sheet
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    text, warned = _load(path, caplog)
    assert "Laptop 0 | 1200 | True" in text
    assert "liar.xlsx: sheet 'Budget': columns past 256 not read" in warned


@pytest.mark.parametrize("suffix", [".docx", ".pptx", ".xlsx", ".epub"])
def test_corrupt_office_files_are_skipped_with_one_warning_naming_them(tmp_path, caplog, suffix):
    (tmp_path / f"junk{suffix}").write_bytes(b"PK\x03\x04 this is no zip at all")
    with zipfile.ZipFile(tmp_path / f"empty{suffix}", "w") as z:  # a zip, but not the format
        z.writestr("hello.txt", "hi")
    with caplog.at_level(logging.WARNING, logger="microrag"):
        assert load_documents([tmp_path]) == []
    warned = sorted(r.getMessage() for r in caplog.records if r.name == "microrag")
    assert len(warned) == 2 and warned[0].startswith(f"skipping empty{suffix}: ") and "\n" not in warned[0]
    assert warned[1] == f"skipping junk{suffix}: not a valid {suffix} file (File is not a zip file)"


def test_a_zip_bomb_is_refused_before_it_is_inflated(tmp_path, caplog, monkeypatch):
    import microrag_engine.load.base as base

    monkeypatch.setattr(base, "MAX_ZIP_BYTES", 20_000_000)
    path = writers.docx(tmp_path / "bomb.docx")
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/media/padding.bin", b"\0" * 30_000_000)  # 30 MB of zeros: ~30 kB compressed
    assert path.stat().st_size < 200_000
    with caplog.at_level(logging.WARNING, logger="microrag"):
        assert load_documents([path]) == []
    (warning,) = [r.getMessage() for r in caplog.records]
    assert re.fullmatch(r"skipping bomb\.docx: its archive expands to 30,\d{3},\d{3} bytes in \d+ member\(s\) "
                        r"\(limits 20,000,000 bytes, 20,000 members\): a zip bomb\?", warning), warning
