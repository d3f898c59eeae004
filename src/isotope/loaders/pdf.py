"""PDF via pypdf: the text of each page, pages separated by a blank line; each page is a
section with its 1-based ``page`` number. Text is counted page by page against the
``max_text_mb`` budget: a small file whose pages all draw one large shared content stream
makes text out of proportion to its size, and stops at the limit, not at the end."""

from __future__ import annotations

import io
import logging
from pathlib import Path

from isotope.errors import LoaderError
from isotope.loaders import Document, Section

log = logging.getLogger(__name__)


def load_pdf(path: Path, data: bytes) -> Document:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    if not data.lstrip()[:5] == b"%PDF-":
        raise LoaderError(path, "not a PDF file (no %PDF header); check its extension")
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            raise LoaderError(
                path, "the PDF is encrypted with a password; decrypt it first (qpdf --decrypt)"
            )
        pages = _pages(path, reader)
    except LoaderError:
        raise
    except FileNotDecryptedError as exc:
        raise LoaderError(
            path, "the PDF is encrypted; decrypt it first (qpdf --decrypt)"
        ) from exc
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise LoaderError(path, f"corrupt or truncated PDF ({exc}); re-export the file") from exc
    except Exception as exc:  # pypdf raises many kinds of errors on damaged files
        log.debug("pypdf failed on %s", path, exc_info=True)
        raise LoaderError(path, f"cannot read the PDF ({type(exc).__name__}: {exc})") from exc

    parts: list[str] = []
    sections: list[Section] = []
    offset = 0
    for number, page_text in enumerate(pages, start=1):
        page_text = page_text.strip()
        if not page_text:
            continue
        if parts:
            parts.append("\n\n")
            offset += 2
        sections.append(Section(offset, offset + len(page_text), {"page": number}))
        parts.append(page_text)
        offset += len(page_text)
    if not parts:
        raise LoaderError(path, "the PDF has no extractable text (scanned?); run OCR first")
    title = ""
    try:
        info = reader.metadata
        title = str(info.get("/Title") or "") if info else ""
    except Exception:  # metadata of a damaged file is optional
        title = ""
    return Document("".join(parts), {"type": "pdf", "title": title or path.stem,
                                     "pages": len(pages)}, sections)


def _pages(path: Path, reader: object) -> list[str]:
    """Each page's text, stopping with a LoaderError once their total passes the
    ``max_text_mb`` budget."""
    from isotope.loaders import TEXT_BUDGET, over_budget

    budget, made = TEXT_BUDGET.get(), 0
    pages: list[str] = []
    for page in reader.pages:  # type: ignore[attr-defined]
        text = page.extract_text() or ""
        made += len(text)
        if made > budget:
            raise over_budget(path, made)
        pages.append(text)
    return pages
