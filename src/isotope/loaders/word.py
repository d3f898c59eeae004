"""Word ``.docx`` via python-docx (the ``docx`` extra): headings as headings (sections
with their heading path, as Markdown's), paragraphs, tables as rows of ``cell | cell``,
and the document properties (title, author, created) as metadata.

A .docx is a zip archive: it is checked before python-docx opens it, so a file that is
not a zip, or one that would inflate past :data:`MAX_INFLATED` bytes or by more than
:data:`MAX_RATIO` times (a zip bomb), is refused with a one-line error."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path
from typing import Any

from isotope.errors import LoaderError, MissingDependency
from isotope.loaders import Document, heading_sections

MAX_INFLATED = 512 * 1024 * 1024
"""The most a .docx may inflate to (all its parts together)."""
MAX_RATIO = 200
"""The most a .docx's parts may inflate by, together (text compresses 5-20 times)."""
_HEADING = re.compile(r"^(?:heading|überschrift|titre|título)\s*(\d)$", re.I)


def check_zip(path: Path, data: bytes) -> None:
    """Refuse what is not a zip, or a zip that would inflate too far (a bomb)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            inflated = sum(max(0, info.file_size) for info in archive.infolist())
            names = set(archive.namelist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as exc:
        raise LoaderError(path, f"not a Word document: not a zip archive ({exc}); check its "
                          "extension (an old .doc must be saved as .docx)") from exc
    if inflated > MAX_INFLATED or inflated > MAX_RATIO * max(len(data), 1):
        raise LoaderError(path, f"refused: its parts would inflate to {inflated:,} bytes "
                          f"from {len(data):,} (a zip bomb?); limit {MAX_INFLATED:,} bytes "
                          f"or {MAX_RATIO} times")
    if "word/document.xml" not in names:
        raise LoaderError(path, "not a Word document: the zip has no word/document.xml")


def load_docx(path: Path, data: bytes) -> Document:
    check_zip(path, data)
    try:
        import docx
        from docx.table import Table
    except ImportError as exc:
        raise MissingDependency.from_import(exc, ".docx files", "docx") from exc
    try:
        document = docx.Document(io.BytesIO(data))
        blocks = list(_blocks(document.element.body, document))
    except Exception as exc:  # python-docx and lxml raise many kinds on damaged files
        raise LoaderError(path, f"cannot read the Word document ({type(exc).__name__}: "
                          f"{exc}); re-save it from Word or LibreOffice") from exc
    from isotope.loaders import TEXT_BUDGET, over_budget

    budget = TEXT_BUDGET.get()
    styles = _style_names(document)
    parts: list[str] = []
    headings: list[tuple[int, int, str]] = []
    offset = 0
    for block in blocks:
        if isinstance(block, Table):
            text = "\n".join(" | ".join(_cell(c) for c in _unique(row.cells))
                             for row in block.rows)
        else:
            text = block.text.strip()
            level = _level(block, styles)
            if text and level:
                headings.append((offset, level, text))
        if not text.strip():
            continue
        parts.append(text)
        offset += len(text) + 2
        if offset > budget:  # stop reading: the rest would be refused anyway
            raise over_budget(path, offset)
    body = "\n\n".join(parts)
    metadata: dict[str, Any] = {"type": "docx", "title": path.stem}
    if headings:  # the top heading, unless the properties name the document
        metadata["title"] = min(headings, key=lambda h: (h[1], h[0]))[2]
    try:
        props = document.core_properties
        if props.title:
            metadata["title"] = props.title
        if props.author:
            metadata["author"] = props.author
        if props.created:
            metadata["created"] = props.created.isoformat()
    except Exception:  # damaged properties are optional
        pass
    return Document(body, metadata, heading_sections(headings, len(body)))


def _blocks(parent: Any, document: Any) -> Any:
    """The paragraphs and tables of the body in order, including those inside content
    controls (``w:sdt``), which python-docx's own walk leaves out."""
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for child in parent.iterchildren():
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "p":
            yield Paragraph(child, document)
        elif tag == "tbl":
            yield Table(child, document)
        elif tag == "sdt":
            for content in child.iterchildren():
                if content.tag.rsplit("}", 1)[-1] == "sdtContent":
                    yield from _blocks(content, document)


def _style_names(document: Any) -> dict[str, str]:
    """Each paragraph style's id with its name, read once (python-docx's
    ``paragraph.style`` scans every style for the default on each call: 2 ms a
    paragraph, two minutes for a 60,000-paragraph document)."""
    try:
        return {s.style_id: s.name or "" for s in document.styles if s.style_id}
    except Exception:  # damaged styles: every paragraph is body text
        return {}


def _level(paragraph: Any, styles: dict[str, str]) -> int:
    """1 for Title and Heading 1, n for Heading n, 0 for body text."""
    try:
        name = styles.get(paragraph._p.style or "", "")
    except Exception:  # a damaged paragraph
        return 0
    if name.lower() == "title":
        return 1
    found = _HEADING.match(name.strip())
    return int(found.group(1)) if found else 0


def _unique(cells: Any) -> list[Any]:
    """A row's cells, a merged cell once (python-docx repeats it per grid column)."""
    seen: list[Any] = []
    for cell in cells:
        if not any(cell._tc is other._tc for other in seen):
            seen.append(cell)
    return seen


def _cell(cell: Any) -> str:
    """A cell's text, with the rows of a table nested in it."""
    nested = ["; ".join(" / ".join(_cell(c) for c in _unique(row.cells)) for row in t.rows)
              for t in cell.tables]
    return " ".join(" ".join([cell.text, *nested]).split())
