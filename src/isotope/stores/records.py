"""What a store takes and gives back: a source with everything derived from it
(:class:`SourceBatch`), the questions generated later for a stored chunk, a search's hits,
the query log's entries and feedback, an integrity check's findings, and a source's row
counts. Plain data, no behaviour; the contract that uses them is :mod:`isotope.stores.parts`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from isotope.embedders import Vectors
from isotope.knowledge.facts import AtomFacts
from isotope.models import Atom, Chunk, DroppedQuestion, Question, Source

Kind = Literal["questions", "atoms", "chunks"]
KINDS: tuple[Kind, ...] = ("questions", "atoms", "chunks")


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
    facts: list[AtomFacts] = field(default_factory=list)
    """The entities and relations named in its atoms (setting ``graph``)."""


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
    facts: list[AtomFacts] = field(default_factory=list)
    """The entities and relations named in its atoms (replacing any it had)."""


@dataclass
class QuestionPairs:
    """Kept questions with the chunks they were asked of (what a query adapter is fitted
    on, :mod:`isotope.search.adapter`): each question's vector, origin and chunk, and
    each of those chunks' vector once. Rows in one order: question ``i`` asks about chunk
    ``chunk_of[i]`` (a position in ``chunk_ids`` and ``chunk_vectors``)."""

    vectors: Vectors
    texts: list[str | None]
    """A learned question's text (origin ``user``: matched against the marks that may
    teach); None for the others unless every text was asked for."""
    origins: list[str]
    chunk_of: list[int]
    chunk_ids: list[str]
    chunk_vectors: Vectors
    total: int = 0
    """The kept questions of the index (``vectors`` may hold a sample of them)."""


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
    facts: list[AtomFacts] = field(default_factory=list)


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
    """``current``, ``changed``, ``missing`` or ``incomplete`` (``Isotope.sources``)."""
    pending: int = 0
    """Chunks still waiting for their questions (``isotope enrich``)."""


@dataclass(frozen=True)
class VectorBackend:
    """The ``vector_backend`` setting an index is opened with (see
    :meth:`isotope.stores.parts.Upkeep.set_vector_backend`) and the settings of the place
    it names (:mod:`isotope.stores.vector_place`)."""

    name: str = "usearch"
    """``usearch`` (the engine's own vectors), a registered place's name (``chroma``), or
    a URL whose scheme a place registered (``chroma+http(s)://HOST:PORT/PREFIX``)."""
    explicit: bool = False
    """Set by the user (not the default): an index made with another backend warns."""
    options: dict[str, Any] = field(default_factory=dict, repr=False)
    """The place's own settings by name (``chroma_token``, ``chroma_timeout``...; never
    shown: a token is among them); each place reads those it knows."""
