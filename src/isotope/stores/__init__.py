"""Stores: where an index lives. :class:`Store` is the contract, made of small parts
(:mod:`isotope.stores.parts`): the relational core (:class:`~isotope.stores.parts.Content`:
``add`` writes one source with everything derived from it, atomically replacing what it had;
``delete_source``, ``get_chunks``, ``sources``, ``counts``, meta), vector search and keyword
search per kind (inside the filter and access conditions), access lists (no default), the
query log and feedback, the questions people keep, and upkeep (snapshots, the writer lock,
checks, repair, compaction), whose abilities have defaults that are correct but do less.
What a store takes and returns is plain data (:mod:`isotope.stores.records`).

Every store is built by :func:`open` from an index *location*, a string: a directory is
the embedded SQLite store; a URL (``scheme://...``) is the backend registered for its
scheme with :func:`register`, imported only when used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from isotope.errors import InvalidIndex, MissingDependency, SourceNotFound
from isotope.models import Condition, DroppedQuestion, GeneratedQuestion
from isotope.stores.parts import (
    Access,
    Content,
    Graph,
    KeptQuestions,
    KeywordSearch,
    Upkeep,
    Usage,
    VectorSearch,
)
from isotope.stores.records import (
    KINDS,
    AuditEntry,
    ChunkQuestions,
    Feedback,
    Hit,
    Inspection,
    Kind,
    LoggedQuery,
    PendingChunk,
    QuestionPairs,
    SourceBatch,
    SourceInfo,
    StoredChunk,
    VectorBackend,
)

__all__ = [
    "KINDS", "SCHEMA_VERSION", "AuditEntry", "ChunkQuestions", "Feedback", "Hit",
    "Inspection", "Kind", "LoggedQuery", "PendingChunk", "QuestionPairs", "SourceBatch",
    "SourceInfo", "Store", "StoredChunk", "VectorBackend", "describe", "exists", "open",
    "register", "scheme", "visible_chunk",
]

SCHEMA_VERSION = 13
LOG_ONLY = "isotope\x1flog-only"
"""Named among a write's sources: it changes nothing a search reads (the audit log), so
the index keeps its state id (and what is kept by it, such as a principal's rows)."""


class Store(Content, VectorSearch, KeywordSearch, Access, Usage, KeptQuestions, Graph,
            Upkeep):
    """An index's storage: the sum of the parts in :mod:`isotope.stores.parts`, each
    covering one concern."""


StoreFactory = Callable[..., Store]
"""``factory(location, create=...)``: the store at ``location``."""

_BACKENDS: dict[str, tuple[StoreFactory | str, str | None]] = {}


def visible_chunk(store: Store, chunk_id: str, conditions: Sequence[Condition]) -> None:
    """:class:`SourceNotFound` if ``store`` has no chunk ``chunk_id``, or it does not meet
    ``conditions`` (who may see it: the same error, a hidden chunk is not there)."""
    there = (store.visible_chunks([chunk_id], conditions) if conditions
             else store.get_chunks([chunk_id]))
    if chunk_id not in there:
        raise SourceNotFound(f"no chunk {chunk_id!r} in the index")


def dropped_by_chunk(dropped: Sequence[DroppedQuestion]) -> dict[str, list[DroppedQuestion]]:
    """Dropped questions grouped by their chunk's id, each group in the order given."""
    found: dict[str, list[DroppedQuestion]] = {}
    for question in dropped:
        found.setdefault(question.chunk_id, []).append(question)
    return found


def draw_questions(kept: Sequence[int], dropped: Sequence[int], n: int, seed: int | None
                   ) -> tuple[list[int], list[int]]:
    """``n`` generated questions drawn at random among the row numbers of the kept and of
    the dropped ones (``seed`` repeats a draw): (kept rows, dropped rows)."""
    import random

    pool = [(True, r) for r in kept] + [(False, r) for r in dropped]
    picked = random.Random(seed).sample(pool, min(n, len(pool)))
    return [r for k, r in picked if k], [r for k, r in picked if not k]


def as_generated(rows: Sequence[Sequence[Any]], *, shuffle: bool = False,
                 seed: int | None = None) -> list[GeneratedQuestion]:
    """Rows (source, chunk id, chunk index, atom id, atom index, atom, text, kept,
    reason, row, origin) as :class:`GeneratedQuestion` (``shuffle``: in an order drawn with
    ``seed``, for a sample)."""
    import random

    rows = list(rows)
    if shuffle:
        random.Random(seed).shuffle(rows)
    return [GeneratedQuestion(source=r[0], chunk_id=r[1], chunk_index=r[2],
                              atom_id=r[3] or "", atom=r[5] or "", text=r[6],
                              kept=bool(r[7]), reason=r[8],
                              origin=_origin(r)) for r in rows]


def _origin(row: Sequence[Any]) -> Any:
    """A question row's origin; a question disabled by hand says it in its reason."""
    reason = row[8] or ""
    if not row[7] and reason.startswith("disabled by hand ("):
        return reason[len("disabled by hand (") : -1]
    return row[10] if len(row) > 10 else "generated"


def register(scheme: str, backend: StoreFactory | str, *, extra: str | None = None) -> None:
    """Serve locations ``scheme://...`` with ``backend``: a factory, or ``"module:Class"``
    imported on first use (a class taking ``(location, create=...)``). ``extra`` names the
    optional dependencies it needs (``pip install 'isotopedb[extra]'``)."""
    _BACKENDS[scheme.lower()] = (backend, extra)


def scheme(location: str | Path) -> str | None:
    """The URL scheme of an index location (``postgresql``), or None for a directory."""
    text = str(location)
    head, sep, _ = text.partition("://")
    return head.lower() if sep and head.replace("+", "").isalnum() else None


def describe(location: str | Path) -> str:
    """A location as a user should see it: a directory made absolute, a URL as given
    without its password (:func:`isotope.redaction.mask_location`)."""
    if scheme(location) is None:
        return str(Path(location).expanduser().absolute())
    from isotope.redaction import mask_location

    return mask_location(str(location))


def exists(location: str | Path) -> bool:
    """Whether an index is at ``location`` (a URL is assumed to be, the backend says)."""
    if scheme(location) is not None:
        return True
    from isotope.stores.sqlite_connection import DB_NAME

    return (Path(location).expanduser() / DB_NAME).is_file()


def open(location: str | Path, *, create: bool = True) -> Store:
    """The store at ``location``: a directory (the embedded SQLite store), or a URL whose
    scheme a backend registered. ``create``: make an empty index if there is none."""
    name = scheme(location)
    if name is None:
        from isotope.stores.sqlite import SQLiteStore

        return SQLiteStore(Path(location).expanduser(), create=create)
    if name not in _BACKENDS:
        known = ", ".join(f"{s}://" for s in sorted(_BACKENDS)) or "none yet"
        raise InvalidIndex(f"no store serves {name}:// locations ({describe(location)}); "
                           f"give a directory, or a URL of a registered backend: {known}")
    backend, extra = _BACKENDS[name]
    if isinstance(backend, str):
        module, _, attribute = backend.partition(":")
        try:
            backend = getattr(importlib.import_module(module), attribute)
        except ImportError as exc:
            raise MissingDependency.from_import(
                exc, f"an index at {name}://", extra or name) from exc
    assert callable(backend)
    store: Store = backend(str(location), create=create)
    return store


register("postgresql", "isotope.stores.postgres:PostgresStore", extra="postgres")
register("postgres", "isotope.stores.postgres:PostgresStore", extra="postgres")
