"""Fixture files for the loader tests, written by each format's own writer library (or
pypdf for PDFs), so no binary fixture is shipped and each test shows what its file holds."""

from __future__ import annotations

import json
from pathlib import Path


def pdf(path: Path, pages: list[list[str] | None]) -> Path:
    """A PDF whose pages show these lines in Helvetica; ``None``: a page holding only an
    image (a scan without a text layer)."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject, NumberObject

    w = PdfWriter()
    font = w._add_object(DictionaryObject({NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
                                           NameObject("/BaseFont"): NameObject("/Helvetica")}))
    for lines in pages:
        page = w.add_blank_page(612, 792)
        stream = DecodedStreamObject()
        if lines is None:
            image = DecodedStreamObject()
            image.set_data(bytes([0, 255] * 32))  # 8 x 8 grey pixels
            image.update({NameObject("/Type"): NameObject("/XObject"), NameObject("/Subtype"): NameObject("/Image"),
                          NameObject("/Width"): NumberObject(8), NameObject("/Height"): NumberObject(8),
                          NameObject("/ColorSpace"): NameObject("/DeviceGray"), NameObject("/BitsPerComponent"): NumberObject(8)})
            xobjects = DictionaryObject({NameObject("/Im1"): w._add_object(image)})
            page[NameObject("/Resources")] = DictionaryObject({NameObject("/XObject"): xobjects})
            stream.set_data(b"q 400 0 0 400 100 200 cm /Im1 Do Q")
        else:
            page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})
            stream.set_data(b"".join(b"BT /F1 12 Tf 72 %d Td (%s) Tj ET\n" % (740 - 14 * i, s.encode()) for i, s in enumerate(lines)))
        page[NameObject("/Contents")] = w._add_object(stream)
    with open(path, "wb") as f:
        w.write(f)
    return path


def notebook(path: Path, cells: list[dict], language: str = "python") -> Path:
    nb = {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
          "metadata": {"kernelspec": {"name": "k", "language": language}, "language_info": {"name": language}}}
    path.write_text(json.dumps(nb))
    return path


def docx(path: Path) -> Path:
    """A policy with headings, a numbered and a bulleted list, a table between two sections,
    and runs a reader would not see (hidden, white, 1 pt)."""
    import docx as python_docx
    from docx.shared import Pt, RGBColor

    d = python_docx.Document()
    d.add_heading("Travel policy", level=1)
    d.add_paragraph("Book trains when the trip takes under four hours.")
    d.add_paragraph("Economy class on every flight", style="List Bullet")
    d.add_paragraph("Receipts within 30 days", style="List Number")
    table = d.add_table(rows=3, cols=2)
    for r, (city, limit) in enumerate([("City", "Hotel limit"), ("Berlin", "140 EUR"), ("Paris", "180 EUR")]):
        table.cell(r, 0).text, table.cell(r, 1).text = city, limit
    d.add_heading("Per diem", level=2)
    p = d.add_paragraph("Meals are paid at 40 EUR a day.")
    p.add_run(" HIDDEN-VANISH").font.hidden = True
    p.add_run(" WHITE-RUN").font.color.rgb = RGBColor(0xFF, 0xFF, 0xFF)
    p.add_run(" TINY-RUN").font.size = Pt(1)
    p.add_run(" Alcohol is not.")
    d.save(str(path))
    return path


def pptx(path: Path) -> Path:
    """Three slides: title and bullets with speaker notes; a table and a text box; a hidden slide."""
    from pptx import Presentation
    from pptx.util import Inches

    prs = Presentation()
    s1 = prs.slides.add_slide(prs.slide_layouts[1])  # title and content
    s1.shapes.title.text = "Quarterly results"
    body = s1.placeholders[1].text_frame
    body.text = "Revenue grew 12%"
    more = body.add_paragraph()
    more.text, more.level = "Costs fell in every region", 1
    s1.notes_slide.notes_text_frame.text = "Mention the new Lisbon office."
    s2 = prs.slides.add_slide(prs.slide_layouts[5])  # title only
    s2.shapes.title.text = "Regions"
    table = s2.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(6), Inches(1)).table
    for r, row in enumerate([("Region", "Growth"), ("EMEA", "9%")]):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    s2.shapes.add_textbox(Inches(1), Inches(5), Inches(6), Inches(1)).text_frame.text = "Source: finance team"
    s3 = prs.slides.add_slide(prs.slide_layouts[5])
    s3.shapes.title.text = "HIDDEN-SLIDE"
    s3._element.set("show", "0")
    prs.save(str(path))
    return path


def xlsx(path: Path, rows: int = 3) -> Path:
    """Two visible sheets (the first with ``rows`` data rows) and a hidden one."""
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "Budget"
    ws.append(["Item", "Cost", "Approved"])
    for k in range(rows):
        ws.append([f"Laptop {k}", 1200.0 + k, True])
    ws2 = wb.create_sheet("Notes")
    ws2["A1"], ws2["C1"] = "Ask finance", "before March"  # B1 empty: kept as an empty cell
    secret = wb.create_sheet("Secret")
    secret["A1"] = "HIDDEN-SHEET"
    secret.sheet_state = "hidden"
    wb.save(str(path))
    return path


def epub(path: Path, chapters: list[tuple[str, str]], spine: list[int]) -> Path:
    """An EPUB 3 with these (file name, XHTML body) chapters, read in ``spine`` order."""
    from ebooklib import epub as ebook

    book = ebook.EpubBook()
    book.set_identifier("microrag-test")
    book.set_title("Field guide")
    book.set_language("en")
    items = []
    for name, body in chapters:
        item = ebook.EpubHtml(title=name, file_name=name, lang="en")
        item.content = f"<html><body>{body}</body></html>"
        book.add_item(item)
        items.append(item)
    book.toc = tuple(items)
    book.add_item(ebook.EpubNcx())
    book.add_item(ebook.EpubNav())
    book.spine = ["nav", *(items[k] for k in spine)]
    ebook.write_epub(str(path), book)
    return path
