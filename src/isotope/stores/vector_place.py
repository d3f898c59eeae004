"""Where a store's vectors live: the :class:`VectorPlace` contract, and the registry that
gives each engine the place an index names (:func:`register_place`, :func:`open_place`).

An engine (the embedded SQLite store, the PostgreSQL store) holds one place and never
asks which: it writes its rows and hands their vectors to the place in the same
transaction (:meth:`VectorPlace.add`), tells it what changed beside them (access lists,
texts), lets it finish its pending writes after the commit (:meth:`VectorPlace.after_write`:
a compaction, a send), and asks it to search, read back, count, check, repair and close.
What a place reads of the engine is the engine's *side* (:mod:`isotope.stores.sqlite_rows`,
:mod:`isotope.stores.postgres_rows`): its connections, write transactions, the log of
pending vector writes (``vector_log``: rows added, their deletes logged by triggers) and
the rows meeting some conditions.

Places by engine: ``sqlite``: ``usearch`` (the default: exact and HNSW segments in the
index folder, :mod:`isotope.stores.sqlite_usearch`), ``chroma`` (a Chroma folder or server,
:mod:`isotope.stores.sqlite_chroma`); ``postgres``: ``pgvector`` (the default: vector
columns in the rows, :mod:`isotope.stores.postgres_vectors`), ``chroma`` (a Chroma server,
:mod:`isotope.stores.postgres_chroma`). The ``vector_backend`` setting names one:
``usearch`` is the engine's default place, any other value a registered name or a URL
whose scheme a place registered. An index records a place other than the default in its
meta (``vector_backend``: ``{"name": ..., ...}``) and keeps it however it is opened.

A new place is one module with a :class:`VectorPlace` and one :func:`register_place` line
per engine it serves (a test registers an in-memory one: ``tests/test_vector_place.py``).
"""

from __future__ import annotations

import contextlib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

from isotope.ann import Ids, Searchable
from isotope.embedders import Vectors
from isotope.errors import InvalidArgument, MissingDependency
from isotope.models import Condition
from isotope.settings import CHROMA_SCHEMES
from isotope.stores.records import KINDS, Kind, VectorBackend

DEFAULT = "usearch"
"""The ``vector_backend`` value that names an engine's default place."""

Table = tuple[Ids, Ids]
"""A kind's ``(row ids, chunk row ids)``, sorted by row id (what a check compares)."""


class VectorPlace(ABC):
    """Where one index's vectors live, for one engine. Made by its registered factory as
    ``Place(side, made, options)``: ``side``, the engine's side (see the module's text);
    ``made``, what the index's meta records of it (None: the engine's default place);
    ``options``, the place's own settings (:attr:`VectorBackend.options`)."""

    name: ClassVar[str] = ""
    """The name it is registered under."""
    in_rows: ClassVar[bool] = False
    """Its vectors are in the rows' own database (a read replica holds them too)."""

    def __init__(self, side: Any, made: Mapping[str, Any] | None,
                 options: Mapping[str, Any]) -> None:
        self.side, self.made, self.options = side, dict(made or {}), dict(options)

    # -- being chosen ------------------------------------------------------------------
    @classmethod
    def new(cls, side: Any, backend: VectorBackend) -> dict[str, Any]:
        """What the meta of a new index keeps of this place, for the setting ``backend``
        (refused with :class:`InvalidArgument` where the engine cannot have it)."""
        return {"name": cls.name}

    def claim(self) -> None:  # noqa: B027 - optional
        """Make what a new index's place holds before the index records it (a resource
        another index owns is refused, :class:`isotope.errors.StoreError`)."""

    def prepare(self, conn: Any) -> None:  # noqa: B027 - optional
        """(in the transaction that records the place in a new index) Make the engine's
        tables ready for it."""

    @property
    def setting(self) -> str:
        """The ``vector_backend`` value that names this place, as ``status`` shows it."""
        return str(self.made.get("url") or self.made.get("name") or DEFAULT)

    def fixed(self, stored: bool) -> dict[str, Any]:
        """The settings this place fixes (:meth:`Store.fixed_settings`); ``stored``: the
        index holds a source. A recorded place is fixed from the start."""
        return {"vector_backend": self.setting} if self.made or stored else {}

    def tune(self, setting: str, value: Any) -> None:  # noqa: B027 - optional
        """A setting of this place's own (``vector_index``, ``keyword_index``,
        ``pg_vector_index``, ``build``); one it has no use for is ignored."""

    # -- writes --------------------------------------------------------------------------
    def column(self, kind: Kind, vectors: Vectors) -> list[Any] | None:
        """The values of the rows' own vector column, where the place keeps its vectors
        in the rows (None: the column stays empty)."""
        return None

    def add(self, conn: Any, kind: Kind, rows: Sequence[int],
            groups: Sequence[int | None], vectors: Vectors) -> None:
        """(in the rows' transaction) The vectors of ``rows`` of ``kind`` just inserted
        (``groups``: each one's chunk row, None for chunks). Default: logged as pending
        writes (a removed row's delete is logged by the engine's triggers)."""
        self.side._log_vectors(conn, kind, rows, groups, vectors)

    def relabel(self, conn: Any, uris: Sequence[str]) -> None:  # noqa: B027 - optional
        """(in the transaction that changed them) The access lists of ``uris`` changed."""

    def text_changed(self, conn: Any, chunk_rows: Sequence[int]) -> None:  # noqa: B027 - optional
        """(in the rows' transaction) The questions' text of these chunks changed."""

    def after_write(self) -> None:  # noqa: B027 - optional
        """After a write committed: the place's pending writes (a send, a compaction)."""

    def pending(self, kind: Kind) -> int:
        """The pending writes of ``kind`` not in the place yet."""
        return 0

    def send(self) -> int:
        """Write the pending writes into the place now (the caller holds what keeps other
        senders out); how many items were sent."""
        return 0

    def settle(self) -> None:  # noqa: B027 - optional
        """Wait for the place's background work."""

    def still(self, wait: float) -> AbstractContextManager[None]:
        """Held while the rows and the place are compared: no other process sends
        (:class:`isotope.errors.IndexLocked` after ``wait`` seconds)."""
        return contextlib.nullcontext()

    # -- reads ---------------------------------------------------------------------------
    def search(self, kind: Kind, query: Vectors, k: int, filters: Sequence[Condition]
               ) -> list[tuple[int, float]]:
        """The ``k`` items of ``kind`` nearest to ``query`` among those whose chunk meets
        ``filters``, best first: ``(row, score)``."""
        return [(item, score) for item, _, score in
                self.searchable(kind, filters).search(query, k)]

    @abstractmethod
    def searchable(self, kind: Kind, filters: Sequence[Condition]) -> Searchable:
        """``kind``'s items whose chunk meets ``filters``, as a search by chunk widens
        them (:func:`isotope.ann.search_groups`): ``(row, chunk row, score)``."""

    @abstractmethod
    def get(self, kind: Kind, rows: list[int]) -> dict[int, Vectors]:
        """The vectors of ``rows`` of ``kind`` (a lost one absent)."""

    @abstractmethod
    def count(self, kind: Kind) -> int:
        """How many vectors of ``kind`` the place holds."""

    def keywords(self, kind: Kind) -> Any:
        """Keyword postings the place keeps of ``kind`` (None: the engine's own)."""
        return None

    # -- upkeep --------------------------------------------------------------------------
    @abstractmethod
    def check(self, kind: Kind, table: Table) -> list[tuple[str, Ids]]:
        """The vectors of ``kind`` against the table's rows: each problem with the rows
        it touches."""

    def problems(self, table_rows: Callable[[Kind], Table]) -> list[str]:
        """What :meth:`check` finds in every kind."""
        return [problem for kind in KINDS for problem, _ in self.check(kind, table_rows(kind))]

    @abstractmethod
    def rebuild(self, kind: Kind, table: Table,
                embed_rows: Callable[[Ids], Vectors] | None) -> int:
        """Make the place hold exactly the table's rows (the others' vectors embedded
        again with ``embed_rows``, if given); how many rows are left without one."""

    def repair(self, table_rows: Callable[[Kind], Table],
               embed_rows: Callable[[Kind], Callable[[Ids], Vectors] | None]) -> None:
        """Send the pending writes, then :meth:`rebuild` each kind."""
        self.send()
        for kind in KINDS:
            self.rebuild(kind, table_rows(kind), embed_rows(kind))

    def compact(self) -> dict[str, str]:
        """Fold the pending writes in; what holds each kind now."""
        self.send()
        return dict.fromkeys(KINDS, self.name)

    def tidy(self) -> None:  # noqa: B027 - optional
        """Remove what the place left behind (files past their use)."""

    # -- indexes in the rows' database ---------------------------------------------------
    def missing_indexes(self, conn: Any = None) -> list[Kind]:
        """The kinds whose search index in the rows' database is missing."""
        return []

    def first_vectors(self, conn: Any, dim: int) -> None:  # noqa: B027 - optional
        """(in the transaction that records the vectors' dimension) The first vectors."""

    def make_indexes(self, conn: Any, dim: int) -> None:  # noqa: B027 - optional
        """(in a transaction) Make the missing search indexes."""

    def drop_indexes(self, conn: Any) -> None:  # noqa: B027 - optional
        """(a bulk load starts) Drop the search indexes, made once at its end."""

    def build_indexes(self, dim: int) -> None:  # noqa: B027 - optional
        """Build the missing search indexes, each in a transaction of its own."""

    # -- the end -------------------------------------------------------------------------
    def close(self) -> None:  # noqa: B027 - optional
        """Let go of what the place holds open."""

    def drop(self) -> None:  # noqa: B027 - optional
        """Remove the place's vectors (the index is being removed)."""


_PLACES: dict[tuple[str, str], tuple[type[VectorPlace] | str, str | None]] = {}
_DEFAULTS: dict[str, str] = {}
_SCHEMES: dict[tuple[str, str], str] = {}


def register_place(engine: str, name: str, place: type[VectorPlace] | str, *,
                   default: bool = False, schemes: Sequence[str] = (),
                   extra: str | None = None) -> None:
    """Give ``engine`` (``sqlite``, ``postgres``) the place ``name``: a
    :class:`VectorPlace` class, or ``"module:Class"`` imported on first use. ``default``:
    the engine's place when the index names none (the setting ``usearch``); ``schemes``:
    the URL schemes of ``vector_backend`` values it serves; ``extra``: the optional
    dependencies it needs (``pip install 'isotopedb[extra]'``)."""
    _PLACES[(engine, name)] = (place, extra)
    if default:
        _DEFAULTS[engine] = name
    for scheme in schemes:
        _SCHEMES[(engine, scheme.lower())] = name


def place_name(engine: str, value: str) -> str | None:
    """The place the ``vector_backend`` value ``value`` names for ``engine`` (the
    default place for ``usearch``); None if no place registered it."""
    if value == DEFAULT:
        return _DEFAULTS[engine]
    if (engine, value) in _PLACES:
        return value
    head, sep, _ = value.partition("://")
    return _SCHEMES.get((engine, head.lower())) if sep else None


def is_default(engine: str, name: str) -> bool:
    return _DEFAULTS.get(engine) == name


def place_class(engine: str, name: str) -> type[VectorPlace]:
    """The class registered as ``name`` for ``engine``."""
    if (engine, name) not in _PLACES:
        known = ", ".join(sorted(n for e, n in _PLACES if e == engine))
        raise InvalidArgument(f"vector_backend {name!r}: no such vector place here; use "
                              f"usearch or one of: {known}")
    place, extra = _PLACES[(engine, name)]
    if isinstance(place, str):
        module, _, attribute = place.partition(":")
        try:
            place = getattr(importlib.import_module(module), attribute)
        except ImportError as exc:
            raise MissingDependency.from_import(exc, f"vectors in {name}",
                                                extra or name) from exc
        assert isinstance(place, type)
        _PLACES[(engine, name)] = (place, extra)
    return place


def chosen(engine: str, backend: VectorBackend) -> type[VectorPlace]:
    """The place class the setting ``backend`` names (:class:`InvalidArgument`: none)."""
    name = place_name(engine, backend.name)
    if name is None:
        raise InvalidArgument(f"vector_backend {backend.name!r}: use usearch, chroma, or a "
                              "server as chroma+http://HOST:PORT/PREFIX")
    return place_class(engine, name)


def open_place(engine: str, side: Any, made: Mapping[str, Any] | None,
               options: Mapping[str, Any] | None = None) -> VectorPlace:
    """The place an index's meta records (``made``; None: the engine's default)."""
    name = str(made["name"]) if made else _DEFAULTS[engine]
    return place_class(engine, name)(side, made, options or {})


register_place("sqlite", "usearch", "isotope.stores.sqlite_usearch:SegmentsPlace",
               default=True)
register_place("sqlite", "chroma", "isotope.stores.sqlite_chroma:SQLiteChroma",
               schemes=CHROMA_SCHEMES, extra="chroma")
register_place("postgres", "pgvector", "isotope.stores.postgres_vectors:Pgvector",
               default=True)
register_place("postgres", "chroma", "isotope.stores.postgres_chroma:PostgresChroma",
               schemes=CHROMA_SCHEMES, extra="chroma")
