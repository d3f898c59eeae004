"""The store contract in parts, each covering one concern (as txtai keeps its database,
ANN and scoring apart). :class:`isotope.stores.Store` is their sum; an engine implements
every abstract method of each part, and a part's defaults are correct but do less.

- :class:`Content`: the relational core, sources and everything derived from them;
- :class:`VectorSearch`: the nearest vectors of a kind, inside conditions;
- :class:`KeywordSearch`: BM25 matches of a kind, inside conditions;
- :class:`Access`: access lists, with no default (a store that forgot them would show
  everything);
- :class:`Usage`: the query log and feedback;
- :class:`KeptQuestions`: questions added by hand or learned from use;
- :class:`Graph`: the knowledge graph, entities and relations named in the atoms;
- :class:`Upkeep`: snapshots, the writer lock, checks and repair, compaction, policies,
  read replicas.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

from isotope.embedders import Embedder, Vectors
from isotope.errors import InvalidArgument
from isotope.knowledge.facts import GraphEntity, GraphRelation, Neighbourhood
from isotope.models import Chunk, Condition, GeneratedQuestion, Question, Source
from isotope.stores.records import (
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

T = TypeVar("T")

PARTS: tuple[type, ...]
"""Every part, in the order :class:`isotope.stores.Store` lists them (set below)."""


class Content(ABC):
    """The relational core: sources with their chunks, atoms and questions, written and read
    back, the chunks waiting for their questions, and the index's own description (meta)."""

    @abstractmethod
    def add(self, batch: SourceBatch) -> None:
        """Store a source and its chunks, atoms and questions in one transaction,
        replacing everything the source had before."""

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

    @abstractmethod
    def pending_chunks(self, limit: int, *, after: str | None = None,
                       sources: Sequence[str] | None = None) -> list[PendingChunk]:
        """Up to ``limit`` chunks waiting for their questions (of ``sources`` if given),
        in a stable order, starting after the chunk ``after`` (for paging)."""

    @abstractmethod
    def add_questions(self, done: Sequence[ChunkQuestions]) -> None:
        """Store generated questions for stored chunks in one transaction, each chunk's
        replacing the ones it had; chunks no longer stored are skipped."""

    def count_waiting(self, sources: Sequence[str] | None = None) -> int:
        """How many chunks (of ``sources`` if given) wait for their questions. Default:
        counted from :meth:`sources`."""
        wanted = None if sources is None else set(sources)
        return sum(info.pending for info in self.sources()
                   if wanted is None or info.source.uri in wanted)

    def without_questions(self, chunk_ids: Sequence[str]) -> set[str]:
        """Which of these chunks are still waiting for their questions. Default: none."""
        return set()

    def stored_chunks(self, uri: str) -> dict[str, StoredChunk]:
        """What a stored source holds, by chunk text hash (for chunk-level reuse when it
        changes). Default: nothing, so everything is generated again."""
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

    def question_pairs(self, most: int, seed: int = 0, *, texts: bool = False
                       ) -> QuestionPairs:
        """The kept questions (at most ``most``, drawn at random with ``seed`` among
        them when there are more) with their vectors and their chunks' vectors: what a
        query adapter is fitted on; the texts of the learned ones (origin ``user``), or
        with ``texts`` of all. A question whose vector (or its chunk's) cannot be read
        is left out. Default: not supported."""
        raise NotImplementedError(f"{type(self).__name__} cannot list question pairs")

    def export_source(self, uri: str) -> SourceBatch | None:
        """Everything a stored source holds, vectors included, as the batch that would
        store it again (``isotope copy``); None if it is not stored. Default: not
        supported."""
        raise NotImplementedError(f"{type(self).__name__} cannot export its sources")

    @abstractmethod
    def get_meta(self, key: str) -> Any: ...

    @abstractmethod
    def set_meta(self, key: str, value: Any) -> None: ...

    def meta_items(self) -> dict[str, Any]:
        """Every meta key with its value (for copying an index). Default: none."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections and files."""


class VectorSearch(ABC):
    """Nearest stored vectors of one kind (questions, atoms or chunks), inside the filter
    and access conditions (never a filter on the top k)."""

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


class KeywordSearch(ABC):
    """BM25 matches among the items of one kind, inside the conditions."""

    keyword_engine: str = "fts5"
    """What ranks keyword (BM25) search: ``fts5`` (the embedded store: SQLite's FTS5, or
    postings saved to rank as it does), ``pg_textsearch`` (bm25 indexes in PostgreSQL) or
    ``postings`` (isotope's own postings in PostgreSQL)."""

    @abstractmethod
    def keyword_search(self, kind: Kind, query: str, k: int,
                       filters: Sequence[Condition] = ()) -> list[Hit]:
        """The ``k`` best BM25 matches of ``query`` among items of ``kind``."""


class Access(ABC):
    """Who may see a source: its access list, set and read as a condition. No default: a
    store that keeps no access lists cannot say what a principal may see."""

    @abstractmethod
    def visible_chunks(self, ids: Sequence[str], conditions: Sequence[Condition]) -> set[str]:
        """Which of the chunks ``ids`` exist and meet ``conditions``."""

    @abstractmethod
    def set_access(self, uris: Sequence[str], access: list[str] | None, *,
                   by_hand: Mapping[str, str] | None = None) -> int:
        """Give the sources ``uris`` the access list ``access`` (None: none), at once for
        every search; returns how many exist. ``by_hand`` marks the list as set by hand,
        each source's mark saying what it was set for (metadata ``access_by_hand``: the
        real path of its file; an ingest keeps the list while the file is that one, until
        it is set again); without it, or with no list, the mark goes."""


class Usage(ABC):
    """The query log (also the audit log) and the feedback on its results."""

    @abstractmethod
    def log_query(self, entry: LoggedQuery, keep_days: float) -> None:
        """Add ``entry`` to the query log, dropping entries (and feedback) older than
        ``keep_days``."""

    @abstractmethod
    def logged_queries(self, limit: int = 100, *, since: str | None = None
                       ) -> list[LoggedQuery]:
        """The last ``limit`` searches of the query log (from ``since``, an ISO time),
        newest first."""

    @abstractmethod
    def logged_query(self, query_id: str) -> LoggedQuery | None:
        """One search of the query log by its id."""

    @abstractmethod
    def add_feedback(self, mark: Feedback) -> None:
        """Store a mark, replacing one on the same query and chunk."""

    @abstractmethod
    def feedback(self, *, learn: str | None = None, useful: bool | None = None,
                 principal: str | None = None, query_id: str | None = None,
                 since: str | None = None, user: str | None = None,
                 limit: int | None = None) -> list[Feedback]:
        """Marks, newest first, of those that match every argument given (with ``user``,
        ``principal`` or that user with any groups; the newest ``limit``)."""


class KeptQuestions(ABC):
    """Questions people keep: added by hand or learned from use, disabled, enabled,
    confirmed, and those a changed chunk could not carry."""

    @abstractmethod
    def add_kept_questions(self, chunk_id: str, questions: Sequence[Question],
                           vectors: Vectors) -> int:
        """Add manual or user ``questions`` (see their ``origin``) to the stored chunk
        ``chunk_id`` beside its own, searchable at once, and kept when the chunk's
        generated questions are made again; returns how many were added (0: the chunk is
        not stored)."""

    @abstractmethod
    def question(self, question_id: str) -> tuple[Question, str] | None:
        """A stored question by id, with its source's uri (None: no such question)."""

    @abstractmethod
    def disable_question(self, question_id: str) -> bool:
        """Take a question out of every search, keeping it among the chunk's dropped
        questions (reason ``disabled by hand``); False: no such question."""

    @abstractmethod
    def disabled_question(self, question_id: str) -> tuple[Question, str] | None:
        """A question disabled by hand, by its id, with its source's uri."""

    @abstractmethod
    def confirm_question(self, question_id: str) -> bool:
        """Make a generated question a ``user`` one: a query users marked useful is the
        same question (kept through everything, ranked as confirmed)."""

    @abstractmethod
    def forget_disabled(self, question_id: str) -> bool:
        """Remove a question disabled by hand for good (an edited question's old text)."""

    @abstractmethod
    def enable_question(self, question_id: str, vector: Vectors) -> bool:
        """Search a question disabled by hand again (its ``vector`` embedded anew); False:
        no such disabled question."""

    @abstractmethod
    def orphaned_questions(self) -> list[dict[str, Any]]:
        """Manual and user questions whose chunk changed and no new chunk covers its
        text (source, chunk_text, text, origin, at), kept, never searched."""


class Graph(ABC):
    """The knowledge graph: entities and relations named in the atoms (setting
    ``graph``), stored with the chunk they were read from and read back through the
    chunks a reader may see."""

    @abstractmethod
    def resolve_entity(self, name: str, conditions: Sequence[Condition] = ()) -> str:
        """The key of the entity ``name`` names: its own, or the one it is an alias of
        (an alias named in a chunk meeting ``conditions``)."""

    @abstractmethod
    def entities(self, conditions: Sequence[Condition] = (), *, top: int = 20,
                 keys: Sequence[str] | None = None, match: str | None = None,
                 chunk: str | None = None, named_up_to: int | None = None
                 ) -> list[GraphEntity]:
        """The entities named in chunks meeting ``conditions``, most chunks first; only
        ``keys`` when given; only those whose name, type or a statement naming them holds
        ``match`` (case ignored; ``%``, ``_`` and ``\\`` are those characters, not
        wildcards), or whose key holds its key (when it has one), when given; only those
        the chunk ``chunk`` names (when it meets ``conditions``) when given.
        ``named_up_to``: the name and type read only for entities named in at most that
        many chunks (the others: their key, "thing"; reading a hub's name reads every one
        of its mentions); with ``keys`` alone, the others are also counted only that far
        (``named_up_to + 1`` chunks and mentions, first)."""

    @abstractmethod
    def relations(self, conditions: Sequence[Condition] = (), *,
                  keys: Sequence[str] | None = None, limit: int | None = None
                  ) -> list[GraphRelation]:
        """The relations stated in chunks meeting ``conditions`` (each with those chunks),
        only those with an end in ``keys`` when given, in the order they were stored."""

    @abstractmethod
    def neighbourhood(self, name: str, conditions: Sequence[Condition] = (), *,
                      hops: int = 1, limit: int = 500) -> Neighbourhood | None:
        """The entity ``name`` and the relations up to ``hops`` away from it, read from
        chunks meeting ``conditions`` (None: no such entity there)."""

    @abstractmethod
    def closest_entities(self, name: str, conditions: Sequence[Condition] = (), *,
                         top: int = 5) -> list[str]:
        """The names of up to ``top`` entities closest to ``name`` (a word of it, a typo
        of it), closest first, of those named in chunks meeting ``conditions`` (the
        conditions are part of the reading: an entity one may not see is never among
        them, nor is a name it has only in such chunks)."""

    @abstractmethod
    def named_in(self, keys: Sequence[str], conditions: Sequence[Condition] = ()
                 ) -> dict[str, str]:
        """Of ``keys`` (names' keys, :func:`isotope.knowledge.facts.entity_key`), those
        that name an entity of a chunk meeting ``conditions``: each with that entity's
        key (its own, or the entity it is an alias of)."""

    @abstractmethod
    def mentions(self, conditions: Sequence[Condition] = (), *,
                 keys: Sequence[str] = (), atoms: Sequence[tuple[str, str]] = (),
                 limit: int = 1000) -> list[tuple[str, str, str]]:
        """(entity key, chunk id, atom id) of each mention in a chunk meeting
        ``conditions``: of the entities ``keys`` (at most ``limit``), and in the
        ``atoms`` given as (chunk id, atom text)."""

    @abstractmethod
    def observations(self, keys: Sequence[str], conditions: Sequence[Condition] = (), *,
                     per_entity: int = 20) -> dict[str, list[str]]:
        """The statements (atom texts) naming each entity, in chunks meeting
        ``conditions``."""


class Upkeep:
    """How a store is held and kept: consistent reads, one writer, integrity checks and
    repair, compaction, bulk loads, the vector and keyword index policies, read replicas.
    Every ability has a default that is correct but does less."""

    read_only: bool = False
    """The index can be read but not written (a read-only folder or mount)."""

    concurrent_writers: bool = False
    """Several processes may write at once (each write locks only its sources); False:
    :meth:`writer` admits one writer at a time."""

    def snapshot(self) -> AbstractContextManager[None]:
        """Reads inside see one committed state of the index (a search never sees a
        source half replaced). Default: no isolation beyond each read's own."""
        return nullcontext()

    def writer(self, wait: float = 0.0) -> AbstractContextManager[None]:
        """Hold the index's single-writer lock (ingest, sync, delete), waiting up to
        ``wait`` seconds; raises :class:`isotope.errors.IndexLocked`. Default: none."""
        return nullcontext()

    def inspect(self) -> Inspection:
        """An integrity check: its problems, the sources they touch, and whether the
        storage itself is damaged. Default: nothing found."""
        return Inspection()

    def check(self) -> list[str]:
        """Problems found by an integrity check (empty: consistent)."""
        return self.inspect().problems

    def damaged_sources(self) -> list[str]:
        """Sources the check found damaged (lost rows, bad vectors): to ingest again or
        remove."""
        return self.inspect().damaged_sources

    def repair(self, embed: Embedder | None = None) -> None:
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

    def settle(self) -> None:
        """Wait for work the store does in the background (compaction) to finish.
        Default: none."""

    def disk_size(self) -> int | None:
        """Bytes the index takes on disk, if the store knows. Default: unknown."""
        return None

    def set_vector_index(self, policy: str) -> None:
        """Which vector index the store builds: ``auto`` (by size), ``exact`` or
        ``hnsw``. Default: the store has one kind only."""

    def set_keyword_index(self, policy: str) -> None:
        """What keyword search reads: ``auto`` (by size), ``fts5`` or ``postings``
        (saved BM25 postings). Default: the store has one kind only."""

    def set_vector_backend(self, backend: VectorBackend) -> str:
        """Where the vectors are kept (``usearch``: the store's own; ``chroma``: a Chroma
        folder inside the index, or a server's URL): the index keeps the backend it was
        made with (:meth:`fixed_settings`; ``Isotope.open`` refuses another one given),
        which this returns. Default: the store keeps its own vectors."""
        return "usearch"

    def fixed_settings(self) -> dict[str, Any]:
        """The settings of :data:`isotope.settings.FIXED` this store has fixed, by name:
        ``vector_backend`` (as the setting says it) once it holds a source or its vectors
        are elsewhere, ``pg_vector_index`` once a server store holds vectors. Default: the
        store keeps its own vectors."""
        return {"vector_backend": "usearch"}

    def set_read_replicas(self, urls: Sequence[str], max_lag: float = 5.0,
                          wait: float = 1.0) -> None:
        """Spread reads across these read replicas of the store's server (see
        :mod:`isotope.stores.postgres_replicas`). Default: a store with no server has
        none to spread them over."""
        if urls:
            raise InvalidArgument("read_replicas are for an index in PostgreSQL; this index "
                                  f"is at {getattr(self, 'where', 'no server')}: leave the "
                                  "setting empty")

    def set_vector_build(self, index: str = "hnsw", memory: str = "auto",
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


PARTS = (Content, VectorSearch, KeywordSearch, Access, Usage, KeptQuestions, Graph, Upkeep)


def part_of(method: str) -> type | None:
    """The part that declares ``method`` (None: no part does)."""
    return next((part for part in PARTS if method in vars(part)), None)
