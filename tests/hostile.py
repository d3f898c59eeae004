"""A corpus of hostile files, built on demand, with the outcome each must have.

    python tests/hostile.py    # print the cases table of docs/operations/reliability.md

Outcomes: ``ingested`` (stored, searchable), ``error`` (a per-file error whose message
contains ``match``), ``skipped`` (left out of a folder walk, with a notice), ``walked``
(a folder structure that must not hang or repeat files), ``members`` (a mailbox: its
readable message ingested, its oversized one reported).
"""

from __future__ import annotations

import io
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pdfmaker import make_pdf

BIG_MB = 100


@dataclass
class Case:
    name: str
    """What the case is (the first column of the table in docs/operations/reliability.md)."""
    path: str
    """The file's path relative to the corpus folder."""
    outcome: str
    match: str = ""
    """A substring of the error message, or a phrase that must be searchable."""
    warning: str = ""
    """For ``ingested``: a substring of the warning the ingest must report."""


def _sentence(n: int) -> str:
    return (f"Hostile case {n} still carries a readable statement about the zebra number "
            f"{n} of the archive.")


def _pdf_bytes() -> bytes:
    return make_pdf(["The encrypted and truncated reports both cover the sales of 2019."])


def _encrypted_pdf() -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(_pdf_bytes())))
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def build(folder: Path) -> list[Case]:
    """Write the corpus into ``folder`` (created) and return its cases."""
    folder.mkdir(parents=True)
    cases: list[Case] = []
    rng = random.Random(0)

    def add(name: str, rel: str, outcome: str, match: str,
            write: Callable[[Path], object], warning: str = "") -> None:
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
        cases.append(Case(name, rel, outcome, match, warning))

    def data(content: bytes) -> Callable[[Path], object]:
        return lambda p: p.write_bytes(content)

    def text(content: str) -> Callable[[Path], object]:
        return lambda p: p.write_text(content, encoding="utf-8")

    add("empty file", "empty.txt", "error", "file is empty", data(b""))
    add("whitespace only", "blank.md", "error", "file is empty", data(b"  \n\n\t \n"))
    add("UTF-8 BOM only", "bom-only.txt", "error", "no text found", data(b"\xef\xbb\xbf"))
    add("binary data named .txt", "random.txt", "error", "binary",
        data(bytes(rng.randrange(256) for _ in range(4096))))
    add("PNG named .md", "image.md", "error", "binary",
        data(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200)))
    add("gzip named .html", "archive.html", "error", "binary",
        data(b"\x1f\x8b\x08\x00" + bytes(rng.randrange(256) for _ in range(512))))
    add("NUL byte inside text", "nul.txt", "error", "binary",
        data(b"Some text\x00with a NUL inside it, and more words after it."))
    add("Latin-1 text", "latin1.txt", "error", "not valid UTF-8",
        data("Caf\u00e9 cr\u00e8me: the r\u00e9sum\u00e9 of the zebra.".encode("latin-1")))
    add("mixed UTF-8 and Latin-1", "mixed.md", "error", "not valid UTF-8",
        data("Na\u00efve UTF-8 line.\n".encode() + "then caf\u00e9 in Latin-1.".encode(
            "latin-1")))
    add("UTF-16 without BOM", "utf16.txt", "error", "binary",
        data(_sentence(1).encode("utf-16-le")))
    add("UTF-16 with BOM", "utf16-bom.txt", "ingested", "zebra number 2",
        data(_sentence(2).encode("utf-16")))
    add("UTF-8 with BOM", "utf8-bom.md", "ingested", "zebra number 3",
        data(b"\xef\xbb\xbf" + _sentence(3).encode()))
    add("truncated PDF", "truncated.pdf", "error", "PDF", data(_pdf_bytes()[:300]))
    add("encrypted PDF", "encrypted.pdf", "error", "encrypted", data(_encrypted_pdf()))
    add("text named .pdf", "fake.pdf", "error", "not a PDF", text(_sentence(4)))
    add("PDF without text (scanned)", "scan.pdf", "error", "no extractable text",
        data(make_pdf([""])))
    add(f"{BIG_MB} MB text file", "huge.txt", "error", "max_file_mb",
        lambda p: _big_file(p, BIG_MB))
    add("a 60,000-character line", "long-line.txt", "ingested", "zebra number 5",
        text(" ".join(["word"] * 12_000) + " " + _sentence(5)))
    add("one 50,000-character sentence", "one-sentence.txt", "ingested", "zebra number 6",
        text(_sentence(6)[:-1] + " and" + " then more" * 5_000 + "."))
    add("50,000 characters without a space", "no-spaces.txt", "ingested", "",
        text("x" * 50_000))
    add("HTML nested 20,000 levels deep", "deep.html", "ingested", "zebra number 7",
        text("<div>" * 20_000 + _sentence(7) + "</div>" * 20_000))
    add("HTML with only a script", "script.html", "error", "no text found",
        text("<html><script>var x = 1;</script></html>"))
    add("Markdown with only front matter", "front.md", "error", "no text found",
        text("---\ntitle: nothing\n---\n"))
    add("Markdown with an unclosed code fence", "fence.md", "ingested", "zebra number 8",
        text(_sentence(8) + "\n\n```python\nprint('never closed')\n"))
    add("CRLF line endings", "crlf.md", "ingested", "zebra number 9",
        data(f"# Title\r\n\r\n{_sentence(9)}\r\n".encode()))
    add("control characters in text", "bells.txt", "ingested", "zebra number 10",
        text(_sentence(10) + "\x07\x1b[0m"))
    add("emoji and right-to-left text", "scripts.md", "ingested", "zebra number 11",
        text("\u05e9\u05dc\u05d5\u05dd \U0001f993 " + _sentence(11)))
    add("name with spaces", "name with spaces.md", "ingested", "zebra number 12",
        text(_sentence(12)))
    add("unicode name", "\u00fcn\u00efc\u00f8d\u00e9 \u6587\u6863.md", "ingested",
        "zebra number 13", text(_sentence(13)))
    add("newline in the name", "new\nline.txt", "ingested", "zebra number 14",
        text(_sentence(14)))
    add("a 240-character name", "n" * 237 + ".md", "ingested", "zebra number 15",
        text(_sentence(15)))
    add("upper-case extension", "NOTES.MD", "ingested", "zebra number 16",
        text(_sentence(16)))
    add("directory named like a file", "folder.md/inside.txt", "ingested",
        "zebra number 17", text(_sentence(17)))
    add("unsupported type", "slides.pptx", "skipped", "unsupported file type",
        data(b"PK\x03\x04"))
    add("a .docx that is not a zip", "not-a-zip.docx", "error", "not a Word document",
        text(_sentence(19)))
    add("a zip bomb renamed .docx", "bomb.docx", "error", "zip bomb", data(_zip_bomb()))
    add("a .tex that \\inputs /etc/passwd and ../../x", "paper/escape.tex", "ingested",
        "zebra number 20", text("\\documentclass{article}\\begin{document}\n"
                                "\\input{/etc/passwd}\n\\include{../../x}\n"
                                + _sentence(20) + "\n\\end{document}\n"),
        warning="outside the folder being ingested")
    add("a .tex with unbalanced braces and an unknown macro", "paper/broken.tex",
        "ingested", "zebra number 21",
        text("\\section{Start\n\\mystery{" + _sentence(21) + "\n\\cite{nobody}\n"),
        warning="unbalanced braces")
    add("MIME parts nested 5,000 deep", "deep.eml", "ingested", "zebra number 22",
        data(_nested_mime(5_000, _sentence(22))), warning="nested deeper than")
    add("a 1 GB mbox: a 1 GB message without a line break, then a small one",
        "archive.mbox", "members", "zebra number 24", lambda p: _big_mbox(p, _sentence(24)))
    add("an email header in an unknown charset", "charset.eml", "ingested",
        "zebra number 23", data(b"From: a@example.com\nSubject: =?x-klingon?Q?Qapla=27?=\n"
                                b"Content-Type: text/plain; charset=x-klingon\n\n"
                                + _sentence(23).encode() + b"\n"),
        warning="unknown charset")
    add("symbolic link loop", "loop/again", "walked", "",
        lambda p: os.symlink("..", p))
    add("broken symbolic link", "broken.md", "error", "cannot read",
        lambda p: os.symlink(folder / "no-such-target.md", p))
    add("link to /dev/zero", "zero.txt", "error", "not a regular file",
        lambda p: os.symlink("/dev/zero", p))
    add("named pipe (FIFO)", "pipe.txt", "error", "not a regular file",
        lambda p: os.mkfifo(p))
    # (root reads every file: as root this case is checked as an unprivileged user, by
    # unreadable_as_user)
    add("unreadable permissions", "secret.md", "error", "Permission denied",
        lambda p: (p.write_text(_sentence(18)), p.chmod(0)))
    return cases


UNREADABLE = "unreadable permissions"


def unreadable_as_user(folder: Path) -> str:
    """Ingest ``folder`` (a readable file and one its user may not read) as an
    unprivileged user (nobody, when run as root) into a new index; returns what the
    ingest said of the unreadable file (and asserts the readable one was stored)."""
    import subprocess
    import sys
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="isotope-unreadable-"))
    base.chmod(0o777)
    import shutil

    copy = base / "docs"  # where the user can reach it (tmp_path's parents are private)
    copy.mkdir(mode=0o777)
    copy.chmod(0o777)
    for path in folder.iterdir():
        path.chmod(path.stat().st_mode | 0o400)  # (root copies it; the copy keeps mode 0)
        shutil.copy(path, copy / path.name)
        (copy / path.name).chmod(0 if path.name == "secret.md" else 0o666)
    folder = copy
    code = (f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "from isotope import Isotope\nfrom conftest import FakeLLM\n"
            f"with Isotope.open({str(base / 'index')!r}, llm=FakeLLM(), cache=False) as i:\n"
            f"    r = i.ingest({str(folder)!r}, questions='later')\n"
            "    print(len(r.added)); print(r.errors[0].message if r.errors else '')\n")
    command = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HOME": str(base),
                               "ISOTOPE_CACHE_DIR": str(base / "cache")})
    shutil.rmtree(base, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    added, message = done.stdout.splitlines()[-2:]
    assert added == "1", done.stdout
    return message


def _big_mbox(path: Path, text: str) -> None:
    """A mailbox whose first message is 1 GB of NUL bytes with no line break (sparse:
    instant), then a readable one: streamed, the big one reported, the other ingested."""
    with open(path, "wb") as fh:
        fh.write(b"From a@example.com Mon Jun  3 10:00:00 2024\nSubject: big\n\n")
        fh.seek(1_000_000_000, 1)
        fh.write(b"\n\nFrom b@example.com Mon Jun  3 10:00:00 2024\nSubject: small\n"
                 b"Message-ID: <small@example.com>\n\n" + text.encode() + b"\n")


def _zip_bomb() -> bytes:
    """A .docx-shaped zip whose document.xml inflates 60 MB of zeros (about 60 KB)."""
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"\0" * 60_000_000)
    return out.getvalue()


def _nested_mime(depth: int, text: str) -> bytes:
    """A message whose multipart parts nest ``depth`` deep, the text at the bottom."""
    head = "".join(f"Content-Type: multipart/mixed; boundary=b{i}\n\n--b{i}\n"
                   for i in range(depth))
    tail = "".join(f"\n--b{i}--\n" for i in reversed(range(depth)))
    return (f"From: deep@example.com\nSubject: deep\nMIME-Version: 1.0\n{head}"
            f"Content-Type: text/plain\n\n{text}\n{tail}").encode()


def _big_file(path: Path, megabytes: int) -> None:
    line = (_sentence(99) + "\n").encode()
    with open(path, "wb") as fh:
        block = line * (1_000_000 // len(line) + 1)
        for _ in range(megabytes):
            fh.write(block[:1_000_000])
        fh.write(b"!")


def table(cases: list[Case], messages: dict[str, str]) -> str:
    """The table of docs/operations/reliability.md: each case with its outcome and, for
    errors, the message (as an ingest reported it; ``messages`` by file path relative to
    the corpus)."""
    rows = ["| case | outcome |", "|---|---|"]
    for case in cases:
        outcome = {"error": "error", "ingested": "ingested", "skipped": "skipped",
                   "walked": "walked once, no hang",
                   "members": "streamed: the small message ingested"}[case.outcome]
        message = messages.get(case.path, "")
        if case.name == UNREADABLE and os.geteuid() == 0:
            message = "(as an unprivileged user; root reads every file) " + messages.get(
                UNREADABLE, "")
        if message:
            outcome += f": {message}" if case.outcome != "ingested" else f", warning: {message}"
        rows.append(f"| {case.name} | {outcome.replace('|', '/')} |")
    return "\n".join(rows)


def main() -> None:
    """Build the corpus, ingest it with the fake model, print the table."""
    import tempfile

    from isotope import Isotope

    from conftest import FakeLLM

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        cases = build(corpus)
        with Isotope.open(Path(tmp) / "index", llm=FakeLLM(), cache=False) as iso:
            report = iso.ingest(corpus)
        messages: dict[str, str] = {}
        if os.geteuid() == 0:
            apart = Path(tmp) / "unreadable"
            apart.mkdir()
            (apart / "readable.md").write_text(_sentence(98))
            (apart / "secret.md").write_text(_sentence(18))
            (apart / "secret.md").chmod(0)
            messages[UNREADABLE] = unreadable_as_user(apart)
        for e in report.errors + report.skipped + report.warnings:
            key = str(Path(e.path.split("#")[0]).relative_to(corpus))
            messages[key] = "; ".join(filter(None, [messages.get(key), e.message]))
        print(table(cases, messages))


if __name__ == "__main__":
    main()
