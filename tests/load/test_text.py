"""load/base.py and the folder walk: encodings, .jsonl records one by one, one warning per
extension for unsupported files and missing extras, a core that imports without extras."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
import writers

from microrag_engine.load import decode_bytes, jsonl_documents, load_documents

# ---------------------------------------------------------------- encodings


@pytest.mark.parametrize("text,encoding", [
    ("Le café est très bon, à la française.", "latin-1"),
    ("Größe und Maße: naïve “quotes” – dash €", "cp1252"),
    ("Short: café", "latin-1"),  # too short for a confident guess: the Western code page wins the tie
    ("Привет мир, как дела? Всё хорошо.", "cp1251"),
    ("Ünïcödé text, UTF-16 with its BOM", "utf-16"),
    ("UTF-32 too", "utf-32"),
])
def test_text_that_is_not_utf8_is_decoded(tmp_path, text, encoding):
    (tmp_path / "notes.txt").write_bytes(text.encode(encoding))
    (doc,) = load_documents([tmp_path])
    assert doc.text == text


def test_a_utf8_bom_is_stripped_and_front_matter_still_read(tmp_path):
    (tmp_path / "a.md").write_bytes(b"\xef\xbb\xbf---\nlabel: restricted\n---\n# Title\n")
    (doc,) = load_documents([tmp_path])
    assert doc.text == "# Title\n" and dict(doc.meta) == {"label": "restricted"}


@pytest.mark.parametrize("raw", [
    b"\x00\x01\x02binary",
    b"\x89PNG\r\n\x1a\n" + bytes(range(1, 256)) * 20,
    bytes((k * 7919 + 13) % 255 + 1 for k in range(5000)),  # no NUL, no encoding fits
])
def test_binary_junk_is_still_skipped_with_a_clear_warning(tmp_path, caplog, raw):
    (tmp_path / "junk.txt").write_bytes(raw)
    with caplog.at_level(logging.WARNING, logger="microrag"):
        assert load_documents([tmp_path]) == []
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith("skipping junk.txt: binary")


def test_decode_bytes_keeps_utf8_as_is():
    assert decode_bytes("naïve ✓".encode()) == "naïve ✓"


# ---------------------------------------------------------------- .jsonl, line by line


def test_bad_jsonl_lines_are_named_and_good_ones_kept(tmp_path, caplog):
    lines = [{"id": "n#0", "doc": "n", "text": "first"}, {"id": "n#1", "doc": "n", "text": "second"}, "{broken",
             {"id": "n#2", "doc": "n", "text": "third"}, [1, 2], "", {"doc": "n", "title": "no text"},
             {"id": "n#0", "text": "again", "doc": "n"}]
    (tmp_path / "notes.jsonl").write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="microrag"):
        (doc,) = load_documents([tmp_path])
    assert [c.text for c in doc.prechunked] == ["first", "second", "third"]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith('notes.jsonl: skipped 4 bad line(s): 3 (not JSON), 5 (not a JSON object), 7 (no "text" field), '
                              "8 (repeats chunk 0 of 'n'")


def test_jsonl_bad_lines_listed_are_bounded_and_deep_nesting_is_just_a_bad_line(tmp_path, caplog):
    good = json.dumps({"text": "kept"})
    (tmp_path / "many.jsonl").write_text("\n".join(["[" * 100_000] + ["nope"] * 30 + [good]) + "\n")
    with caplog.at_level(logging.WARNING, logger="microrag"):
        (doc,) = load_documents([tmp_path])
    assert doc.text == "kept"
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "skipped 31 bad line(s): 1 (not JSON), 2 (not JSON)" in warning and warning.endswith("10 (not JSON), ...")


def test_an_uploaded_jsonl_is_still_refused_at_its_first_bad_line():
    with pytest.raises(ValueError, match="line 2 .*not JSON"):
        jsonl_documents('{"text": "ok"}\n{oops\n', "up.jsonl")


# ---------------------------------------------------------------- one warning per extension


def test_unsupported_files_are_summarised_per_extension(tmp_path, caplog):
    for k in range(5):
        (tmp_path / f"img{k}.png").write_bytes(b"\x89PNG")
    (tmp_path / "Makefile").write_text("all:\n")
    (tmp_path / "LICENSE").write_text("MIT")
    (tmp_path / "a.md").write_text("Kept.")
    with caplog.at_level(logging.WARNING, logger="microrag"):
        assert [d.path for d in load_documents([tmp_path])] == ["a.md"]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2, warned
    assert warned[0].startswith("skipped 2 file(s) without an extension: unsupported type (supported: .docx .epub")
    assert warned[1].startswith("skipped 5 .png file(s): unsupported type")
    assert warned[1].endswith("img0.png, img1.png, img2.png, ...")


def test_a_missing_extra_skips_its_files_with_one_warning_per_extension(tmp_path, caplog, monkeypatch):
    for name in ("a.docx", "b.docx", "c.docx"):
        writers.docx(tmp_path / name)
    (tmp_path / "d.rst").write_text("Title\n=====\n\nText.\n")
    (tmp_path / "e.md").write_text("Kept.")
    for name in [m for m in sys.modules if m.split(".")[0] in ("docx", "docutils")] + ["docx", "docutils"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if python-docx and docutils were not installed
    with caplog.at_level(logging.WARNING, logger="microrag"):
        assert [d.path for d in load_documents([tmp_path])] == ["e.md"]
    assert [r.getMessage() for r in caplog.records] == [
        "skipping 3 .docx file(s): install microrag-engine[formats] to read them",
        "skipping 1 .rst file(s): install microrag-engine[formats] to read them"]


def test_the_core_imports_and_loads_without_any_extra(tmp_path):
    """The extras are imported lazily, inside the readers: none is needed to import the
    package or to read the core formats."""
    (tmp_path / "a.md").write_text("Plain Markdown.")
    (tmp_path / "b.xlsx").write_bytes(b"PK\x05\x06" + b"\x00" * 18)
    code = ("import sys\n"
            "extras = ('docutils', 'docx', 'pptx', 'openpyxl', 'ebooklib', 'pytesseract', 'pypdfium2')\n"
            "sys.modules.update(dict.fromkeys(extras))\n"
            "import microrag_engine.engine, microrag_engine.load as L\n"
            f"docs = L.load_documents([{str(tmp_path)!r}])\n"
            "print([d.path for d in docs])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['a.md']"
    assert "install microrag-engine[formats]" in proc.stderr and "Traceback" not in proc.stderr


def test_a_short_latin1_text_reads_as_west_european():
    """An outside review: a one-line Latin-1 file came out as 'Café crčme' (charset-normalizer's cp1250 guess)."""
    from microrag_engine.load.base import decode_bytes

    assert decode_bytes(b"Caf\xe9 cr\xe8me br\xfbl\xe9e na\xefve \xe0 la fran\xe7aise") == "Café crème brûlée naïve à la française"
    polish = "Zażółć gęślą jaźń, to jest polski tekst o długości wystarczającej do rozpoznania kodowania znaków."
    assert decode_bytes(polish.encode("cp1250")) == polish  # a Central European file still reads as such
