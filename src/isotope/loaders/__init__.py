"""Loaders turn a file into text, chosen by extension from one registry.

A loader is a function ``(path, data) -> Document``. Register more with :func:`register`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isotope.errors import LoaderError, UnsupportedFile
from isotope.models import ACCESS_BY_HAND, READ_AS


@dataclass
class Section:
    """A span ``[start, end)`` of a document's text with metadata for the chunks in it
    (a Markdown heading path, a PDF page)."""

    start: int
    end: int
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Member:
    """One document inside a container file (a message of a mailbox): its name, unique
    in the container, its bytes, and the loader (by name) that reads them."""

    name: str
    data: bytes
    loader: str


@dataclass
class Document:
    """A loaded file: its text, document metadata, and sections."""

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What could not be read (a broken encoding, a missing .bib): the rest was."""
    members: list[Member] = field(default_factory=list)
    """Documents inside this one, each ingested as its own source ``FILE#NAME`` (an
    email's attachments)."""


def heading_sections(headings: list[tuple[int, int, str]], length: int) -> list[Section]:
    """Sections from headings given as (offset, level, title), in order: each runs to the
    next heading and carries its heading path (``headings``: titles from level 1 down)."""
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    for i, (start, level, title) in enumerate(headings):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        end = headings[i + 1][0] if i + 1 < len(headings) else length
        sections.append(Section(start, end, {"headings": [t for _, t in stack]}))
    return sections


LoaderFunc = Callable[[Path, bytes], Document]


MembersFunc = Callable[..., Iterator[Member]]
"""A container's members, read one at a time: called ``(path, max_bytes, grouping=...,
handle=...)`` (a member larger than ``max_bytes`` is yielded empty, for the caller to
report; ``grouping``: the ``mail_sources`` setting, ``message`` or ``thread``;
``handle``: the file as the caller opened it, to read through and never open ``path``
again, so its members are of the very file whose access list they take)."""


def handle_for(members: MembersFunc, handle: Any) -> dict[str, Any]:
    """``{"handle": handle}`` for a container's ``members`` that takes the opened file
    (the built-in mailbox does), else nothing: a function registered before containers
    were handed their file opens it by its path, as it always did."""
    import inspect

    try:
        taken = inspect.signature(members).parameters
    except (TypeError, ValueError):
        return {}
    if "handle" in taken or any(p.kind is p.VAR_KEYWORD for p in taken.values()):
        return {"handle": handle}
    return {}


@dataclass(frozen=True)
class Loader:
    name: str
    extensions: tuple[str, ...]
    func: LoaderFunc
    members: MembersFunc | None = None
    """For a container (a mailbox): its members, each ingested as its own source named
    ``FILE#MEMBER``; ``func`` is then not used."""


COMPANIONS = {".bib": "the citations of the .tex files beside it"}
"""Extensions of files that are read with others, never on their own: a folder walk
passes them over without a notice."""

_REGISTRY: dict[str, Loader] = {}
_NAMED: dict[str, Loader] = {}


def register(name: str, extensions: tuple[str, ...], func: LoaderFunc) -> None:
    """Register ``func`` as the loader for files ending in any of ``extensions``."""
    loader = Loader(name, tuple(e.lower() for e in extensions), func)
    _NAMED[name] = loader
    for ext in loader.extensions:
        _REGISTRY[ext] = loader


def register_container(name: str, extensions: tuple[str, ...], members: MembersFunc) -> None:
    """Register a container format (files holding many documents, as a mailbox holds
    messages): ``members`` reads them one at a time, each with the loader to use."""

    def whole(path: Path, data: bytes) -> Document:
        raise LoaderError(path, f"a {name} file: its members are ingested one by one")

    loader = Loader(name, tuple(e.lower() for e in extensions), whole, members)
    _NAMED[name] = loader
    for ext in loader.extensions:
        _REGISTRY[ext] = loader


def loader_named(name: str) -> Loader:
    """The registered loader called ``name`` (KeyError if none is)."""
    return _NAMED[name]


def supported_extensions() -> list[str]:
    return sorted(_REGISTRY)


def loader_for(path: Path) -> Loader | None:
    return _REGISTRY.get(path.suffix.lower())


ROOT: ContextVar[Path | None] = ContextVar("isotope_loader_root", default=None)
"""The folder being ingested, while a loader runs: what a loader may read besides its
file must be inside it (LaTeX's ``\\input``)."""
READ: ContextVar[Path | None] = ContextVar("isotope_loader_read", default=None)
"""The real path of the file being loaded, as the ingest read it (its access list is
decided from it): what a loader that reads other files compares their lists with."""
MAX_TEXT_CHARS = 32_000_000
"""The default of the ``max_text_mb`` setting, in characters."""
TEXT_BUDGET: ContextVar[int] = ContextVar("isotope_loader_text_budget", default=MAX_TEXT_CHARS)
"""The most text a loader may produce from one file, while it runs (``max_text_mb``): a
loader that can tell early stops there (:func:`over_budget`); any result longer is
refused."""
SEALED: ContextVar[bool] = ContextVar("isotope_loader_sealed", default=False)
"""True while a member is loaded (an email's attachment): a loader then reads no other
file at all (a mailed .tex must not \\input files of the machine reading it)."""


def over_budget(path: Path, chars: int) -> LoaderError:
    """The error for a file whose text passed the ``max_text_mb`` budget."""
    limit = TEXT_BUDGET.get()
    return LoaderError(path, f"it makes more than {limit / 1e6:g} MB of text ({chars / 1e6:.1f} "
                       "MB so far; the max_text_mb limit): split it, or raise the limit "
                       "(ISOTOPE_MAX_TEXT_MB)")


RESERVED = frozenset({"file", "container", ACCESS_BY_HAND, READ_AS})
"""Metadata keys only isotope sets (the file a member source is in, the source holding
it, the mark of an access list set by hand, the file it was read from): a document's own
text (its front matter) never names its path, its container or its list, which decide
who may see it and what a sync removes with it."""


def load(path: Path, data: bytes | None = None, *, root: Path | None = None,
         max_chars: int | None = None, real: Path | None = None) -> tuple[Document, Loader]:
    """Load one file (found under ``root``: the folder a loader may read other files of),
    making at most ``max_chars`` characters of text (default: the ``max_text_mb``
    default); ``real``: the real path of the file as ``data`` was read from it (else
    resolved now). Raises :class:`LoaderError` (naming the file) when it cannot."""
    loader = loader_for(path)
    if loader is None:
        raise UnsupportedFile(
            path,
            f"unsupported file type {path.suffix or '(no extension)'!r}; "
            f"supported: {', '.join(supported_extensions())}",
        )
    if data is None:
        from isotope.files import DEFAULT_MAX_BYTES, read_file

        data = read_file(path, DEFAULT_MAX_BYTES)[1]
    if not data.strip():
        raise LoaderError(path, "file is empty; nothing to index")
    token, read = ROOT.set(root), READ.set(real)
    budget = TEXT_BUDGET.set(max_chars or MAX_TEXT_CHARS)
    try:
        document = _run(loader, path, data)
    finally:
        ROOT.reset(token)
        READ.reset(read)
        TEXT_BUDGET.reset(budget)
    if not document.text.strip():
        raise LoaderError(path, "no text found in the file; nothing to index")
    return document, loader


def _run(loader: Loader, path: Path, data: bytes) -> Document:
    """``loader`` on a file's bytes; anything it raises but a LoaderError becomes one
    (a loader's bug or a library's surprise costs that file, never the ingest), and a
    text over the budget is refused."""
    try:
        document = loader.func(path, data)
    except (LoaderError, MemoryError, KeyboardInterrupt):
        raise
    except Exception as exc:
        raise LoaderError(path, f"cannot read it ({type(exc).__name__}: {exc})") from exc
    if len(document.text) > TEXT_BUDGET.get():
        raise over_budget(path, len(document.text))
    for key in RESERVED & set(document.metadata):  # (front matter, a header...)
        del document.metadata[key]
        document.warnings.append(f"its metadata named {key!r}, which only isotope sets (the "
                                 "file a source is in, its container): left out")
    said = Counter(document.warnings)  # each once, with how many times it was said
    document.warnings = [w if said[w] == 1 else f"{w} ({said[w]} times)" for w in said]
    return document


def load_member(name: str, path: Path, data: bytes, *, max_chars: int | None = None
                ) -> Document:
    """A member of a container (a mailbox's message, an email's attachment) with the
    loader called ``name``, sealed: it reads no other file."""
    token = SEALED.set(True)
    budget = TEXT_BUDGET.set(max_chars or MAX_TEXT_CHARS)
    try:
        document = _run(loader_named(name), path, data)
    finally:
        SEALED.reset(token)
        TEXT_BUDGET.reset(budget)
    if not document.text.strip():
        raise LoaderError(path, "no text found; nothing to index")
    return document


def _register_builtins() -> None:
    from isotope.loaders import html, latex, mail, pdf, text, word

    register("text", (".txt", ".text"), text.load_text)
    register("markdown", (".md", ".markdown"), text.load_markdown)
    register("html", (".html", ".htm"), html.load_html)
    register("pdf", (".pdf",), pdf.load_pdf)
    register("email", (".eml",), mail.load_eml)
    register("email-thread", (), mail.load_thread)
    register_container("mbox", (".mbox", ".mbx"), mail.mbox_members)
    register("docx", (".docx",), word.load_docx)
    register("latex", (".tex",), latex.load_tex)


_register_builtins()

__all__ = [
    "Document",
    "Loader",
    "Member",
    "Section",
    "load",
    "load_member",
    "loader_for",
    "loader_named",
    "over_budget",
    "register",
    "register_container",
    "supported_extensions",
]
