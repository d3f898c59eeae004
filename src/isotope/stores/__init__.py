"""Stores: where an index lives. The contract is small so that another engine (PostgreSQL
with pgvector, say) can implement it without the pipeline changing:

- :meth:`Store.add` writes one source with everything derived from it, atomically
  replacing what the source had before;
- :meth:`Store.search` finds the nearest stored vectors of one kind (questions, atoms or
  chunks); :meth:`Store.keyword_search` does the same by keywords (BM25);
- :meth:`Store.delete_source` removes a source and everything derived from it;
- :meth:`Store.get_chunks` fetches chunks by id;
- optional abilities with safe defaults: :meth:`Store.snapshot` (consistent reads),
  :meth:`Store.writer` (one writer at a time), :meth:`Store.stored_chunks` (reuse of
  unchanged chunks), :meth:`Store.inspect` (integrity; :meth:`Store.check` and
  :meth:`Store.damaged_sources` read it), :meth:`Store.repair`, :meth:`Store.disk_size`;
- plus bookkeeping: :meth:`Store.sources`, :meth:`Store.counts`, and the index's own
  description (:meth:`Store.get_meta` / :meth:`Store.set_meta`).

Every store is built by :func:`open` from an index *location*, a string: a directory is
the embedded SQLite store; a URL (``scheme://...``) is the backend registered for its
scheme with :func:`register`, imported only when used.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from isotope.embedders import Vectors
from isotope.errors import InvalidArgument, InvalidIndex, MissingDependency, SourceNotFound
from isotope.models import (
    Atom,
    Chunk,
    Condition,
    DroppedQuestion,
    GeneratedQuestion,
    Question,
    Source,
)

T = TypeVar("T")
Kind = Literal["questions", "atoms", "chunks"]
KINDS: tuple[Kind, ...] = ("questions", "atoms", "chunks")
SCHEMA_VERSION = 11
LOG_ONLY = "isotope\x1flog-only"
"""Named among a write's sources: it changes nothing a search reads (the audit log), so
the index keeps its state id (and what is kept by it, such as a principal's rows)."""


@dataclass
class SourceBatch:
    """One source and everything derived from it, with one vector per chunk, atom and
    question (rows in the same order)."""

    source: Source
    chunks: list[Chunk]
    atoms: list[Atom]
    questions: list[Question]
    chunk_vectors: Vectors
    atom_vectors: Vectors
    question_vectors: Vectors
    chunk_hashes: list[str] | None = None
    """sha256 of each chunk's text (default: computed from ``chunks``; given when the
    stored text is not the chunk's own, as with file references)."""
    replaces: str | None = None
    """Another source this one takes the place of (the same file stored under its resolved
    path by an older isotope): removed in the same transaction."""
    pending: set[str] = field(default_factory=set)
    """Chunks (ids) stored before their questions: :meth:`Store.pending_chunks` lists them
    until :meth:`Store.add_questions` completes them."""
    dropped: list[DroppedQuestion] = field(default_factory=list)
    """Generated questions that selection left out, with why: kept for inspection
    (:meth:`Store.generated_questions`), never searched."""


@dataclass
class PendingChunk:
    """A stored chunk waiting for its questions, with what generating them needs."""

    chunk: Chunk
    atoms: list[Atom]
    atom_vectors: Vectors


@dataclass
class ChunkQuestions:
    """The questions generated for one stored chunk (replacing any it had), with their
    vectors; ``complete`` False leaves the chunk waiting (some atoms failed)."""

    chunk_id: str
    questions: list[Question]
    vectors: Vectors
    complete: bool = True
    dropped: list[DroppedQuestion] = field(default_factory=list)


@dataclass
class StoredChunk:
    """What a source already stored holds for one chunk text (for reuse when the source
    changes elsewhere): the chunk's vector, its atoms and its questions with vectors."""

    vector: Vectors
    atoms: list[Atom]
    atom_vectors: Vectors
    questions: list[Question]
    question_vectors: Vectors
    context: str = ""
    dropped: list[DroppedQuestion] = field(default_factory=list)


@dataclass
class Hit:
    """A stored question, atom or chunk that matched, with its chunk's id."""

    kind: Kind
    chunk_id: str
    score: float
    text: str
    atom: str = ""
    origin: str = ""
    """A question's origin (``generated``, ``manual``, ``user``); empty for the rest."""


@dataclass
class LoggedQuery:
    """One search in the query log (also the audit log): its id, when (ISO 8601, UTC),
    who, the query, the mode, the chunks it returned with their scores, the filters it
    was given, its ``suggested_action`` and how long it took."""

    query_id: str
    at: str
    principal: str
    query: str
    mode: str
    chunk_ids: list[str]
    scores: list[float] = field(default_factory=list)
    filters: dict[str, Any] | None = None
    action: str = ""
    latency_ms: float = 0.0


AuditEntry = LoggedQuery
"""The audit log's entries are the query log's (issue 28's name)."""


@dataclass
class Feedback:
    """A user's mark on one result of a logged search: ``useful`` or not. ``learn``
    says what became of a useful mark's query: ``pending`` (waiting for review),
    ``waiting`` (for the chunk's questions), ``learned`` (a question of the chunk),
    ``duplicate`` (the chunk had that question), ``rejected``, or None (not learned:
    the ``learn`` setting was off, or not useful).
    ``vector``: the query's embedding (float32 bytes), kept for a not-useful mark, so
    that a close query does not rank the chunk first again."""

    query_id: str
    chunk_id: str
    useful: bool
    principal: str
    at: str
    query: str
    source: str | None = None
    learn: str | None = None
    vector: bytes | None = None


@dataclass
class Inspection:
    """What an integrity check found (:meth:`Store.inspect`)."""

    problems: list[str] = field(default_factory=list)
    """Each problem, naming the sources it touches (empty: consistent)."""
    damaged_sources: list[str] = field(default_factory=list)
    """Sources that lost rows or hold damaged vectors: to ingest again or remove."""
    storage_damaged: bool = False
    """The storage's own structures are damaged (a garbage page): nothing can be repaired
    in place, and deleting rows that look orphaned could delete live ones."""


@dataclass
class SourceInfo:
    source: Source
    chunks: int = 0
    atoms: int = 0
    questions: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    state: str = ""
    pending: int = 0
    """Chunks still waiting for their questions (``isotope enrich``)."""
    """``current``, ``changed``, ``missing`` or ``incomplete`` (``Isotope.sources``)."""


class Store(ABC):
    """An index's storage."""

    concurrent_writers: bool = False
    """Several processes may write at once (each write locks only its sources); False:
    :meth:`writer` admits one writer at a time."""
    keyword_engine: str = "fts5"
    """What ranks keyword (BM25) search: ``fts5`` (the embedded store: SQLite's FTS5, or
    postings saved to rank as it does), ``pg_textsearch`` (bm25 indexes in PostgreSQL) or
    ``postings`` (isotope's own postings in PostgreSQL)."""

    @abstractmethod
    def add(self, batch: SourceBatch) -> None:
        """Store a source and its chunks, atoms and questions in one transaction,
        replacing everything the source had before."""

    @abstractmethod
    def search(self, kind: Kind, vector: Vectors, k: int,
               filters: Sequence[Condition] = ()) -> list[Hit]:
        """The ``k`` stored items of ``kind`` nearest to ``vector`` (cosine), best first,
        among the chunks that meet ``filters`` (see :mod:`isotope.search.filters`)."""

    def search_by_chunk(
        self, kind: Kind, vector: Vectors, k: int, per_chunk: int = 3,
        filters: Sequence[Condition] = (),
    ) -> list[tuple[str, list[Hit]]]:
        """The ``k`` chunks whose items of ``kind`` are nearest to ``vector``, best first,
        each with its up to ``per_chunk`` best hits. Stores may do this faster; this one
        widens a :meth:`search` (from :meth:`first_pool` items) until ``k`` chunks are
        found."""
        if k <= 0:
            return []
        pool = self.first_pool(kind, k, per_chunk)
        while True:
            hits = self.search(kind, vector, pool, filters)
            grouped: dict[str, list[Hit]] = {}
            for hit in hits:
                grouped.setdefault(hit.chunk_id, []).append(hit)
            if len(grouped) >= k or len(hits) < pool:
                return [(c, h[:per_chunk]) for c, h in list(grouped.items())[:k]]
            pool *= 4

    def first_pool(self, kind: Kind, k: int, per_chunk: int) -> int:
        """How many items :meth:`search_by_chunk` asks :meth:`search` for first."""
        return max(64, 4 * k * per_chunk)

    @abstractmethod
    def keyword_search(self, kind: Kind, query: str, k: int,
                       filters: Sequence[Condition] = ()) -> list[Hit]:
        """The ``k`` best BM25 matches of ``query`` among items of ``kind``."""

    @abstractmethod
    def delete_source(self, uri: str) -> bool:
        """Remove a source and everything derived from it; False if it was not there."""

    @abstractmethod
    def get_chunks(self, ids: Sequence[str]) -> dict[str, Chunk]:
        """Chunks by id (missing ids are left out)."""

    @abstractmethod
    def get_source(self, uri: str) -> Source | None: ...

    def members(self, containers: Sequence[str]) -> dict[str, list[Source]]:
        """The sources directly inside each of ``containers`` (an email's attachments, a
        mailbox's messages: their ``container`` metadata), by container. Default: read
        from every source; an engine reads only those of ``containers``."""
        wanted = set(containers)
        found: dict[str, list[Source]] = {}
        for info in self.sources():
            if (owner := info.source.metadata.get("container")) in wanted:
                found.setdefault(str(owner), []).append(info.source)
        return found

    @abstractmethod
    def sources(self, conditions: Sequence[Condition] = ()) -> list[SourceInfo]:
        """The sources (with ``conditions`` on the source only, such as its access
        list: those meeting them)."""

    @abstractmethod
    def counts(self, conditions: Sequence[Condition] = ()) -> dict[str, int]:
        """Numbers of sources, chunks, atoms and questions (and, where the store knows,
        ``chunks_waiting`` and ``sources_waiting`` for their questions); with
        ``conditions``, of the chunks meeting them."""

    def visible_chunks(self, ids: Sequence[str], conditions: Sequence[Condition]) -> set[str]:
        """Which of the chunks ``ids`` exist and meet ``conditions``. Default: without
        conditions, those that exist; with any, an error (a store that keeps no access
        lists cannot say what a principal may see, and never shows everything)."""
        if conditions:
            raise InvalidArgument("this store keeps no access lists")
        return set(self.get_chunks(ids))

    def log_query(self, entry: LoggedQuery, keep_days: float) -> None:
        """Add ``entry`` to the query log, dropping entries (and feedback) older than
        ``keep_days``. Default: not supported."""
        raise InvalidArgument("this store keeps no query log")

    def logged_queries(self, limit: int = 100, *, since: str | None = None
                       ) -> list[LoggedQuery]:
        """The last ``limit`` searches of the query log (from ``since``, an ISO time),
        newest first. Default: none."""
        return []

    def logged_query(self, query_id: str) -> LoggedQuery | None:
        """One search of the query log by its id. Default: none."""
        return None

    def add_feedback(self, mark: Feedback) -> None:
        """Store a mark, replacing one on the same query and chunk. Default: not
        supported."""
        raise InvalidArgument("this store keeps no feedback")

    def feedback(self, *, learn: str | None = None, useful: bool | None = None,
                 principal: str | None = None, query_id: str | None = None,
                 since: str | None = None, user: str | None = None,
                 limit: int | None = None) -> list[Feedback]:
        """Marks, newest first, of those that match every argument given (with ``user``,
        ``principal`` or that user with any groups; the newest ``limit``). Default:
        none."""
        return []

    def set_access(self, uris: Sequence[str], access: list[str] | None, *,
                   by_hand: Mapping[str, str] | None = None) -> int:
        """Give the sources ``uris`` the access list ``access`` (None: none), at once for
        every search; returns how many exist. ``by_hand`` marks the list as set by hand,
        each source's mark saying what it was set for (metadata ``access_by_hand``: the
        real path of its file; an ingest keeps the list while the file is that one, until
        it is set again); without it, or with no list, the mark goes. Default: not
        supported."""
        raise InvalidArgument("this store keeps no access lists")

    @abstractmethod
    def pending_chunks(self, limit: int, *, after: str | None = None,
                       sources: Sequence[str] | None = None) -> list[PendingChunk]:
        """Up to ``limit`` chunks waiting for their questions (of ``sources`` if given),
        in a stable order, starting after the chunk ``after`` (for paging)."""

    @abstractmethod
    def add_questions(self, done: Sequence[ChunkQuestions]) -> None:
        """Store generated questions for stored chunks in one transaction, each chunk's
        replacing the ones it had; chunks no longer stored are skipped."""

    def add_kept_questions(self, chunk_id: str, questions: Sequence[Question],
                           vectors: Vectors) -> int:
        """Add manual or user ``questions`` (see their ``origin``) to the stored chunk
        ``chunk_id`` beside its own, searchable at once, and kept when the chunk's
        generated questions are made again; returns how many were added (0: the chunk is
        not stored). Default: not supported."""
        raise InvalidArgument("this store cannot add questions by hand")

    def question(self, question_id: str) -> tuple[Question, str] | None:
        """A stored question by id, with its source's uri (None: no such question).
        Default: not supported."""
        return None

    def disable_question(self, question_id: str) -> bool:
        """Take a question out of every search, keeping it among the chunk's dropped
        questions (reason ``disabled by hand``); False: no such question. Default: not
        supported."""
        raise InvalidArgument("this store cannot disable questions")

    def disabled_question(self, question_id: str) -> tuple[Question, str] | None:
        """A question disabled by hand, by its id, with its source's uri."""
        return None

    def confirm_question(self, question_id: str) -> bool:
        """Make a generated question a ``user`` one: a query users marked useful is the
        same question (kept through everything, ranked as confirmed). Default: not
        supported."""
        raise InvalidArgument("this store cannot change questions")

    def forget_disabled(self, question_id: str) -> bool:
        """Remove a question disabled by hand for good (an edited question's old text).
        Default: not supported."""
        raise InvalidArgument("this store cannot remove questions")

    def enable_question(self, question_id: str, vector: Vectors) -> bool:
        """Search a question disabled by hand again (its ``vector`` embedded anew); False:
        no such disabled question. Default: not supported."""
        raise InvalidArgument("this store cannot enable questions")

    def orphaned_questions(self) -> list[dict[str, Any]]:
        """Manual and user questions whose chunk changed and no new chunk covers its
        text (source, chunk_text, text, origin, at), kept, never searched. Default:
        none."""
        return []

    def count_waiting(self, sources: Sequence[str] | None = None) -> int:
        """How many chunks (of ``sources`` if given) wait for their questions. Default:
        counted from :meth:`sources`."""
        wanted = None if sources is None else set(sources)
        return sum(info.pending for info in self.sources()
                   if wanted is None or info.source.uri in wanted)

    def without_questions(self, chunk_ids: Sequence[str]) -> set[str]:
        """Which of these chunks are still waiting for their questions. Default: none."""
        return set()

    @abstractmethod
    def get_meta(self, key: str) -> Any: ...

    def meta_items(self) -> dict[str, Any]:
        """Every meta key with its value (for copying an index). Default: none."""
        return {}

    def generated_questions(self, *, source: str | None = None,
                            chunk_id: str | None = None, sample: int | None = None,
                            seed: int | None = None,
                            conditions: Sequence[Condition] = ()) -> list[GeneratedQuestion]:
        """The generated questions, kept and dropped, each with its atom: of one
        ``source`` or one chunk (``chunk_id``) in chunk, atom and generation order, or
        ``sample`` of them drawn at random across the index (``seed`` makes the draw
        repeatable). Default: not supported."""
        raise NotImplementedError(f"{type(self).__name__} cannot list generated questions")

    def export_source(self, uri: str) -> SourceBatch | None:
        """Everything a stored source holds, vectors included, as the batch that would
        store it again (``isotope copy``); None if it is not stored. Default: not
        supported."""
        raise NotImplementedError(f"{type(self).__name__} cannot export its sources")

    @abstractmethod
    def set_meta(self, key: str, value: Any) -> None: ...

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections and files."""

    read_only: bool = False
    """The index can be read but not written (a read-only folder or mount)."""

    # Optional abilities, with defaults that are correct but do less.
    def snapshot(self) -> AbstractContextManager[None]:
        """Reads inside see one committed state of the index (a search never sees a
        source half replaced). Default: no isolation beyond each read's own."""
        return nullcontext()

    def writer(self, wait: float = 0.0) -> AbstractContextManager[None]:
        """Hold the index's single-writer lock (ingest, sync, delete), waiting up to
        ``wait`` seconds; raises :class:`isotope.errors.IndexLocked`. Default: none."""
        return nullcontext()

    def stored_chunks(self, uri: str) -> dict[str, StoredChunk]:
        """What a stored source holds, by chunk text hash (for chunk-level reuse when it
        changes). Default: nothing, so everything is generated again."""
        return {}

    def inspect(self) -> Inspection:
        """An integrity check: its problems, the sources they touch, and whether the
        storage itself is damaged. Default: nothing found."""
        return Inspection()

    def check(self) -> list[str]:
        """Problems found by an integrity check (empty: consistent)."""
        return self.inspect().problems

    def disk_size(self) -> int | None:
        """Bytes the index takes on disk, if the store knows. Default: unknown."""
        return None

    def damaged_sources(self) -> list[str]:
        """Sources the check found damaged (lost rows, bad vectors): to ingest again or
        remove."""
        return self.inspect().damaged_sources

    def repair(self, embed: Callable[[list[str]], Vectors] | None = None  # noqa: B027
               ) -> None:
        """Rebuild what can be rebuilt from the stored rows (keyword and vector indexes),
        embedding again with ``embed`` the items whose vectors are lost, and drop rows no
        source owns. Default: nothing to rebuild."""

    def compact(self) -> dict[str, str]:
        """Fold what changed since the vector indexes were last saved into new ones, and
        give freed space back; returns each kind's vector index implementation. Run it
        under :meth:`writer`. Default: nothing to do."""
        return {}

    def bulk(self) -> AbstractContextManager[None]:
        """Writes inside load an empty index (``isotope copy``): a store may defer the
        work that can be done faster once at the end (building vector indexes). Default:
        nothing deferred."""
        return nullcontext()

    def settle(self) -> None:  # noqa: B027 - optional
        """Wait for work the store does in the background (compaction) to finish.
        Default: none."""

    def set_vector_index(self, policy: str) -> None:  # noqa: B027 - optional
        """Which vector index the store builds: ``auto`` (by size), ``exact`` or
        ``hnsw``. Default: the store has one kind only."""

    def set_keyword_index(self, policy: str) -> None:  # noqa: B027 - optional
        """What keyword search reads: ``auto`` (by size), ``fts5`` or ``postings``
        (saved BM25 postings). Default: the store has one kind only."""

    def set_read_replicas(self, urls: Sequence[str], max_lag: float = 5.0,
                          wait: float = 1.0) -> None:
        """Spread reads across these read replicas of the store's server (see
        :mod:`isotope.stores.postgres_replicas`). Default: a store with no server has
        none to spread them over."""
        if urls:
            raise InvalidArgument("read_replicas are for an index in PostgreSQL; this index "
                                  f"is at {getattr(self, 'where', 'no server')}: leave the "
                                  "setting empty")

    def set_vector_build(self, index: str = "hnsw", memory: str = "auto",  # noqa: B027
                         workers: int = 0) -> None:
        """What a server store indexes its question vectors with when it first holds
        them (``index``: ``hnsw`` or ``diskann``), and how a bulk load's vector indexes
        are built at its end: ``memory`` (``auto`` or a size such as ``4GB``) and parallel
        ``workers`` (0: the server's setting). Default: the store builds no index at the
        end of a bulk load."""

    def replicas(self) -> list[dict[str, Any]]:
        """Each read replica's ``url`` (password masked), ``healthy`` and ``lag_s``, read
        now. Default: none."""
        return []

    def reading(self, call: Callable[[], T]) -> T:
        """``call()``, a read made of one or more snapshots, made again elsewhere if the
        replica it read from stopped answering. Default: made once."""
        return call()


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
