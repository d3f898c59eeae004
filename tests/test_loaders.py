from pathlib import Path
from typing import Any

import pytest

from isotope import loaders
from isotope.errors import LoaderError, UnsupportedFile
from isotope.loaders import load, supported_extensions

from pdfmaker import make_pdf

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_every_documented_extension_has_a_loader() -> None:
    assert {".txt", ".md", ".markdown", ".html", ".htm", ".pdf", ".eml", ".tex",
            ".docx"} <= set(supported_extensions())


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
    path = tmp_path / "x.pptx"
    path.write_bytes(b"PK")
    with pytest.raises(UnsupportedFile, match="supported: "):
        load(path)


def test_utf16_and_bom_are_decoded(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes("\ufeffHello there, world.".encode())
    (tmp_path / "b.txt").write_bytes("Hello there, world.".encode("utf-16"))
    assert load(tmp_path / "a.txt")[0].text == "Hello there, world."
    assert load(tmp_path / "b.txt")[0].text == "Hello there, world."


FORMATS = EXAMPLES / "formats"


def test_email_keeps_what_the_sender_wrote_and_its_headers() -> None:
    document, loader = load(FORMATS / "offsite-planning.eml")
    assert loader.name == "email"
    assert document.metadata == {
        "from": "alice@example.com", "from_name": "Alice Martin",
        "to": ["bob@example.com", "team@example.com"], "cc": ["carol@example.com"],
        "subject": "Re: Team offsite in Lisbon", "date": "2024-05-14T09:12:00+02:00",
        "message_id": "<offsite-2@example.com>", "in_reply_to": "<offsite-1@example.com>",
        "thread": "<offsite-1@example.com>", "attachments": ["agenda.txt"],
        "type": "email", "title": "Re: Team offsite in Lisbon"}
    text = document.text
    assert text.startswith("Re: Team offsite in Lisbon\n\nHi Bob,")
    assert "150 euros per day" in text
    # the quoted question, the "On ... wrote:" line and the signature are left out
    assert "daily budget" not in text and "wrote:" not in text
    assert "Operations" not in text and "hackathon" not in text
    assert document.warnings == []


def test_email_in_broken_encodings_is_read_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "broken.eml"
    path.write_bytes(b"From: =?utf-8?B?!!!notbase64?= <x@example.com>\n"
                     b"Subject: =?unknown-9?Q?caf=E9?=\nDate: not a date\n"
                     b"Content-Type: text/html; charset=utf-8\n\n"
                     b"<p>The ferry leaves at nine \xff\xfe sharp.</p>")
    document, _ = load(path)
    assert "The ferry leaves at nine" in document.text
    assert document.metadata["from"] == "x@example.com"
    assert any("unknown charset" in w for w in document.warnings)
    assert any("not valid" in w for w in document.warnings)
    assert any("Date" in w for w in document.warnings)
    (tmp_path / "nothing.eml").write_bytes(b"just some words without headers\n")
    with pytest.raises(LoaderError, match=r"nothing\.eml: not an email message"):
        load(tmp_path / "nothing.eml")


def test_latex_keeps_math_sections_and_readable_citations() -> None:
    document, loader = load(FORMATS / "robot-navigation.tex", root=FORMATS)
    assert loader.name == "latex" and document.warnings == []
    assert document.metadata["title"] == "Battery-Aware Navigation for Warehouse Robots"
    assert document.metadata["author"] == "Ada Lovelace and Alan Turing"
    text = document.text
    assert "$c(e) = d(e) + \\lambda \\, E(e)$" in text  # math as its LaTeX source
    assert "\\begin{equation}" in text and "\\tfrac{1}{2} m v^2" in text
    assert "(Okafor and Müller 2021, Lithium-Ion Ageing in Warehouse Fleets)" in text
    assert "(Hart et al. 1968, A Formal Basis" in text
    assert "\\section" not in text and "\\label" not in text and "plain" not in text
    assert "12% of their shift" in text
    headings = [s.metadata["headings"] for s in document.sections if "headings" in s.metadata]
    assert headings == [["Introduction"], ["Method"], ["Method", "Charging"], ["Results"]]
    cites = [s.metadata["cites"][0] for s in document.sections if "cites" in s.metadata]
    assert cites[0] == {"key": "dijkstra1959", "authors": ["Dijkstra, Edsger W."],
                        "year": "1959", "doi": "10.1007/BF01386390",
                        "title": "A Note on Two Problems in Connexion with Graphs"}


def test_latex_inputs_stay_inside_the_root_and_bad_input_warns(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "paper" / "parts").mkdir(parents=True)
    (tmp_path / "secret.tex").write_text("TOP SECRET outside the root")
    (root / "paper" / "parts" / "intro.tex").write_text("The intro part is included.")
    main = root / "paper" / "main.tex"
    main.write_text("\\documentclass{article}\\begin{document}\n\\input{parts/intro}\n"
                    "% \\input{commented/out}\n\\input{../../secret}\n\\input{/etc/passwd}\n"
                    "\\input{missing}\n\\myunknown{kept text} and \\cite{ghost}.\n"
                    "\\end{document}\n")
    document, _ = load(main, root=root)
    assert "The intro part is included." in document.text
    assert "TOP SECRET" not in document.text and "root:x" not in document.text
    assert "kept text" in document.text and "(ghost)" in document.text
    joined = "\n".join(document.warnings)
    assert joined.count("outside the folder being ingested") == 2
    assert "\\input{missing}: cannot read it" in joined
    assert "unknown macros kept as the text of their arguments: \\myunknown" in joined
    assert "no .bib file is beside it" in joined
    assert "commented" not in joined
    broken = root / "paper" / "broken.tex"
    broken.write_text("\\section{Open\nText that is still read.")
    document, _ = load(broken, root=root)
    assert "Text that is still read." in document.text
    assert any("unbalanced braces" in w for w in document.warnings)


def test_docx_headings_tables_and_properties() -> None:
    document, loader = load(FORMATS / "visitor-policy.docx")
    assert loader.name == "docx" and document.warnings == []
    assert document.metadata == {"type": "docx", "title": "Visitor Policy",
                                 "author": "Facilities Team",
                                 "created": "2024-03-01T09:00:00+00:00"}
    assert "Monday to Friday | 07:00 to 19:00" in document.text
    assert "first three hours are free" in document.text
    headings = [s.metadata["headings"] for s in document.sections]
    assert headings == [["Visitor Policy"], ["Visitor Policy", "Parking"],
                        ["Visitor Policy", "Opening hours"]]
    start = next(s.start for s in document.sections if s.metadata["headings"][-1] == "Parking")
    assert document.text[start:].startswith("Parking\n\nVisitor parking")


def test_docx_that_is_not_a_zip_or_a_bomb_is_refused(tmp_path: Path) -> None:
    import io
    import zipfile

    (tmp_path / "text.docx").write_text("just text")
    with pytest.raises(LoaderError, match=r"text\.docx: not a Word document: not a zip"):
        load(tmp_path / "text.docx")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b" " * 30_000_000)
    (tmp_path / "bomb.docx").write_bytes(out.getvalue())
    with pytest.raises(LoaderError, match=r"bomb.docx: refused: .*\(a zip bomb\?\)"):
        load(tmp_path / "bomb.docx")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("other.txt", "x")
    (tmp_path / "other.docx").write_bytes(out.getvalue())
    with pytest.raises(LoaderError, match=r"no word/document\.xml"):
        load(tmp_path / "other.docx")


def test_mbox_members_are_streamed_one_message_at_a_time(tmp_path: Path) -> None:
    from isotope.loaders import loader_for
    from isotope.loaders.mail import mbox_members

    members = list(mbox_members(FORMATS / "support.mbox", 1_000_000))
    assert [m.name for m in members] == ["dock-1@example.com", "dock-2@example.com",
                                         "dock-3@example.com"]
    assert all(m.loader == "email" for m in members)
    assert b"\nFrom now on we keep the area clear." in members[2].data  # >From unescaped
    box = tmp_path / "big.mbox"
    box.write_bytes(b"From a@x Mon Jun  3 10:00:00 2024\nSubject: one\n\nsmall\n\n"
                    b"From b@x Mon Jun  3 10:00:00 2024\nSubject: two\n\n" + b"x" * 5000
                    + b"\n\nFrom c@x Mon Jun  3 10:00:00 2024\nMessage-ID: <one@x>\n\nc\n\n"
                    b"From d@x Mon Jun  3 10:00:00 2024\nMessage-ID: <one@x>\n\nd\n")
    found = list(mbox_members(box, 1000))
    assert [m.name for m in found] == ["message-1", "message-2", "one@x", "one@x-2"]
    assert found[1].data == b""  # over the limit: yielded empty, for the caller to report
    loader = loader_for(box)
    assert loader is not None and loader.members is not None
    (tmp_path / "not.mbox").write_text("Subject: no separator line\n\nbody\n")
    with pytest.raises(LoaderError, match="not an mbox mailbox"):
        list(mbox_members(tmp_path / "not.mbox", 1000))


def test_latex_limits_and_offsets(tmp_path: Path) -> None:
    import os

    from isotope.loaders import load_member

    root = tmp_path / "paper"
    (root / "parts").mkdir(parents=True)
    (root / "parts" / "a.tex").write_text("Part A text.")
    (root / "refs.bib").write_text("@article{smith, author={Smith, Ann}, title={Cats}, "
                                   "year={2020}}\n")
    main = root / "main.tex"
    main.write_text("\\documentclass{article}\\begin{document}\n\\begin{itemize}\\item x"
                    "\\end{itemize}\n\n\n\\section{Intro}   \nSee \\parencite{smith} and "
                    "\\includegraphics{fig}.\n\\input{parts/a}\n\\section{Methods}\nText."
                    "\\end{document}\n")
    # the file itself named as what is ingested: its folder is the root
    document, _ = load(main, root=main)
    text = document.text
    assert "Part A text." in text and "(Smith 2020, Cats)" in text
    assert "fig" not in text and "graphics" not in " ".join(document.warnings)
    for section in document.sections:  # offsets point at what they describe
        if "headings" in section.metadata:
            title = section.metadata["headings"][-1]
            assert text[section.start:].startswith(title), (title, text[section.start:][:20])
        else:
            assert text[section.start:section.end] == "(Smith 2020, Cats)"
    # an attachment (a member) reads no other file
    member = load_member("latex", tmp_path / "mail.eml#main.tex", main.read_bytes())
    assert "Part A text." not in member.text and "(smith)" in member.text
    assert any("not followed" in w for w in member.warnings)
    # amplification: each file inputs the next ten times
    for n in range(6):
        body = "leaf" if n == 5 else f"\\input{{l{n + 1}}}" * 10
        (root / f"l{n}.tex").write_text(body)
    (root / "amp.tex").write_text("\\input{l0}")
    amplified, _ = load(root / "amp.tex", root=root)
    assert amplified.text.count("leaf") <= 200
    assert any("past the 200 inputs" in w for w in amplified.warnings)
    # a FIFO and a link loop are left out with a warning, never read
    os.mkfifo(root / "pipe.tex")
    (root / "loop.tex").symlink_to(root / "loop.tex")
    (root / "odd.tex").write_text("Odd. \\input{pipe} \\input{loop}")
    odd, _ = load(root / "odd.tex", root=root)
    assert "Odd." in odd.text and len(odd.warnings) == 2


def test_email_keeps_interleaved_answers_and_survives_odd_headers(tmp_path: Path) -> None:
    path = tmp_path / "inline.eml"
    path.write_bytes((
        "From: Bob <bob@example.com>\nSubject: Gr\u00fc\u00dfe aus K\u00f6ln\n"
        "Content-Type: text/plain; charset=undefined\n\n"
        "On Mon, Ann wrote:\n> Does X work on ARM?\nYes, X works on ARM since 2.0.\n"
        "> And Y?\nNo, Y needs x86.\n\nOn page 3 the reviewer wrote:\n\nThe proof is wrong.\n"
        "--\nnot a signature: more text follows here\n" + "line\n" * 15 +
        "-- \nBob, the signature\n").encode("utf-8"))
    document, _ = load(path)
    text = document.text
    assert "Yes, X works on ARM since 2.0." in text and "No, Y needs x86." in text
    assert "Does X work" not in text and "Ann wrote" not in text
    assert "On page 3 the reviewer wrote:" in text and "The proof is wrong." in text
    assert "more text follows here" in text and "the signature" not in text
    assert document.metadata["subject"] == "Gr\u00fc\u00dfe aus K\u00f6ln"
    assert any("unknown charset 'undefined'" in w for w in document.warnings)
    weird = tmp_path / "weird.eml"
    weird.write_bytes(b"From: a@example.com\nSubject: s\nMIME-Version: 1.0\n"
                      b"Content-Type: multipart/mixed; boundary=b\n\n--b\n"
                      b"Content-Type: text/plain\n\nThe body.\n--b\n"
                      b"Content-Disposition: attachment; filename=\"B\xc3\xbccher.txt\"\n"
                      b"Content-Type: text/plain\n\nA list of books.\n--b--\n")
    document, _ = load(weird)
    assert "The body." in document.text and document.metadata["attachments"]
    assert [m.loader for m in document.members] == ["text"]


def test_docx_reads_nested_tables_and_content_controls(tmp_path: Path) -> None:
    import docx
    from docx.oxml import parse_xml

    made = docx.Document()
    made.add_paragraph("Intro paragraph.")
    table = made.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Outer A"
    inner = table.cell(0, 1).add_table(rows=1, cols=2)
    inner.cell(0, 0).text = "Nested one"
    inner.cell(0, 1).text = "Nested two"
    made.element.body.append(parse_xml(
        '<w:sdt xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        '<w:sdtContent><w:p><w:r><w:t>Inside a content control.</w:t></w:r></w:p>'
        '</w:sdtContent></w:sdt>'))
    made.save(str(tmp_path / "n.docx"))
    text = load(tmp_path / "n.docx")[0].text
    assert "Outer A | Nested one / Nested two" in text
    assert "Inside a content control." in text


def test_a_container_registered_without_a_handle_still_reads_its_members(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: the ingest began handing a container's members function the file
    it opened (``handle=``); one registered without that argument raised TypeError and
    the whole ingest stopped. A function without it opens the file by its path, as
    before; the mailbox's takes the handle."""
    from isotope import Isotope
    from isotope.loaders import Member, handle_for, loader_named, register_container
    from isotope.loaders.mail import mbox_members

    from conftest import FakeLLM

    def lines(path: Path, max_bytes: int, grouping: str = "message") -> Any:
        for n, line in enumerate(path.read_text().splitlines()):
            yield Member(f"line-{n}", line.encode(), "text")

    monkeypatch.setattr(loaders, "_REGISTRY", dict(loaders._REGISTRY))
    monkeypatch.setattr(loaders, "_NAMED", dict(loaders._NAMED))
    register_container("lines", (".lines",), lines)
    assert handle_for(loader_named("lines").members, object()) == {}  # type: ignore[arg-type]
    assert "handle" in handle_for(mbox_members, object())
    (tmp_path / "notes.lines").write_text("The okapi eats leaves.\nThe tapir swims well.\n")
    with Isotope.open(tmp_path / "index", llm=FakeLLM(), cache=False) as iso:
        report = iso.ingest(tmp_path / "notes.lines", questions="later")
        assert report.ok and len(report.added) == 2
