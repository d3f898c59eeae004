from pathlib import Path

import pytest

from isotope.errors import LoaderError, UnsupportedFile
from isotope.loaders import load, supported_extensions

from pdfmaker import make_pdf

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_every_documented_extension_has_a_loader() -> None:
    assert {".txt", ".md", ".markdown", ".html", ".htm", ".pdf"} <= set(supported_extensions())


def test_markdown_keeps_the_file_offsets_and_heading_paths() -> None:
    path = EXAMPLES / "handbook.md"
    document, loader = load(path)
    raw = path.read_text()
    assert loader.name == "markdown"
    assert len(document.text) == len(raw)  # front matter blanked, not removed
    assert document.metadata["title"] == "Northwind Robotics employee handbook"
    start = document.text.index("New employees receive")
    section = next(s for s in document.sections if s.start <= start < s.end)
    assert section.metadata["headings"] == ["Employee handbook", "Time off"]
    assert document.text[start:start + 20] == raw[start:start + 20]


def test_html_keeps_the_main_text_and_title_only() -> None:
    document, _ = load(EXAMPLES / "faq.html")
    assert document.metadata["title"] == "Orbit R2 vacuum robot: frequently asked questions"
    assert "lasts about 140 minutes" in document.text
    for junk in ("Home", "Support", "tracking", "font-family", "Copyright"):
        assert junk not in document.text
    start = document.text.index("Replace the HEPA")
    section = next(s for s in document.sections if s.start <= start < s.end)
    assert section.metadata["headings"] == ["Orbit R2 FAQ", "Maintenance"]


def test_deeply_nested_html_loads(tmp_path: Path) -> None:
    path = tmp_path / "deep.html"
    path.write_text("<div>" * 20000 + "Deep text is here." + "</div>" * 20000)
    document, _ = load(path)
    assert document.text == "Deep text is here."


def test_pdf_pages_become_sections() -> None:
    document, loader = load(EXAMPLES / "battery-safety.pdf")
    assert loader.name == "pdf"
    start = document.text.index("Damaged batteries")
    section = next(s for s in document.sections if s.start <= start < s.end)
    assert section.metadata == {"page": 2}


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("empty.txt", b"", "file is empty"),
        ("blank.md", b"  \n\n \t", "file is empty"),
        ("image.txt", bytes(range(256)) * 40, "binary"),
        ("latin1.txt", "café crème".encode("latin-1"), "not valid UTF-8"),
        ("broken.pdf", make_pdf(["Some text here."])[:200], "PDF"),
        ("notpdf.pdf", b"hello, I am not a PDF", "not a PDF"),
        ("scan.pdf", make_pdf([""]), "no extractable text"),
        ("data.csv", b"a,b\n1,2\n", "unsupported file type"),
    ],
)
def test_bad_files_raise_one_clear_error_naming_the_file(
    tmp_path: Path, name: str, data: bytes, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(LoaderError) as caught:
        load(path)
    text = str(caught.value)
    assert text.startswith(str(path))
    assert message in text
    assert "\n" not in text


def test_unsupported_file_is_its_own_error(tmp_path: Path) -> None:
    path = tmp_path / "x.docx"
    path.write_bytes(b"PK")
    with pytest.raises(UnsupportedFile, match="supported: "):
        load(path)


def test_utf16_and_bom_are_decoded(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes("\ufeffHello there, world.".encode())
    (tmp_path / "b.txt").write_bytes("Hello there, world.".encode("utf-16"))
    assert load(tmp_path / "a.txt")[0].text == "Hello there, world."
    assert load(tmp_path / "b.txt")[0].text == "Hello there, world."
