"""The records isotope stores and returns.

Provenance runs question -> atom -> chunk -> source: a question keeps the id of the atom
it was written for and of that atom's chunk; a chunk keeps its source and the character
offsets ``[start, end)`` of its text in the source's text (for HTML and PDF: in the text
extracted from the file).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr


def stable_id(*parts: object) -> str:
    """A short deterministic id from the given parts (16 hex characters of sha256)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8"))
    return digest.hexdigest()[:16]


def content_hash(data: bytes | str) -> str:
    """sha256 of bytes, or of a string's UTF-8 encoding, as hex."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Source(_Record):
    """A document (a file, or any identifier given to ``ingest_chunks``)."""

    uri: str
    """Absolute path of a file, or the identifier given to ``ingest_chunks``."""
    content_hash: str = ""
    size: int = 0
    mtime: float | None = None
    loader: str = ""
    ingested_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    status: Literal["complete", "incomplete"] = "complete"
    """``incomplete``: some atoms got no questions (the next ingest asks again)."""
    root: str | None = None
    """The file or directory given to ingest that this file was found under."""
    access: list[str] | None = None
    """Who may see it (``public``, ``user:NAME``, ``group:NAME``; None: no list), see
    :mod:`isotope.access`."""

    @property
    def access_by_hand(self) -> bool:
        """Its list was set by hand (``isotope access set``): an ingest keeps it (rules
        files, containers and senders do not change it) while its file is the one it was
        set for (:func:`isotope.access.held_by_hand`), until it is set again."""
        return bool(self.metadata.get(ACCESS_BY_HAND))


ACCESS_BY_HAND = "access_by_hand"
"""The metadata key marking a source whose access list was set by hand."""
READ_AS = "read_as"
"""The metadata key of the real path of the file a source's text was read from (links
followed as the open followed them), by the ingest that stored it: what a list set by
hand is set for (:func:`isotope.access.mark_for`)."""


class Chunk(_Record):
    """A passage of a source: the unit search returns."""

    text: str
    source: str = ""
    """The ``uri`` of the chunk's source."""
    index: int = 0
    start: int = 0
    end: int = 0
    metadata: dict[str, Any] = Field(default_factory=dict)
    id: str = ""
    context: str = ""
    """With ``chunk_context``: what the model wrote to situate the chunk in its document
    (searched with the chunk; not part of ``text``)."""
    stale: bool = False
    """With ``storage="file-reference"``: the file changed or is gone since it was
    ingested, so the chunk's text cannot be read back (``text`` is empty)."""

    def model_post_init(self, __context: Any) -> None:
        if not self.end and not self.stale:
            self.end = self.start + len(self.text)
        if not self.id:
            self.id = stable_id("chunk", self.source, self.index, self.start, self.text)

    @property
    def search_text(self) -> str:
        """What the chunk's embedding is made of: its context, then its text (one rule
        for ingest and for a repair that embeds it again)."""
        return f"{self.context}\n\n{self.text}" if self.context else self.text


class Atom(_Record):
    """An atomic statement of a chunk (a sentence, or a fact an LLM wrote)."""

    text: str
    chunk_id: str
    index: int = 0
    start: int | None = None
    """Offset of the atom in its chunk's text; ``None`` when an LLM rewrote it."""
    end: int | None = None
    id: str = ""

    def model_post_init(self, __context: Any) -> None:
        if not self.id:
            self.id = stable_id("atom", self.chunk_id, self.index, self.text)


Op = Literal["eq", "ne", "gt", "gte", "lt", "lte", "glob"]


@dataclass(frozen=True)
class Condition:
    """One condition of a search or a listing, as every store translates it into its own
    query language (made by :func:`isotope.search.filters.parse` from a filter, or by
    :func:`isotope.access.condition` for who may see)."""

    key: str
    op: Op
    values: tuple[Any, ...]
    """One value, or several for ``eq`` (any of them)."""


ACCESS_KEY = "\x00access"
"""The key of the condition of who may see (:func:`isotope.access.condition`): no
metadata key can be it (keys hold no control characters)."""


Origin = Literal["generated", "manual", "user"]
"""Where a question came from (:attr:`Question.origin`)."""


class Question(_Record):
    """A question that its atom answers."""

    text: str
    atom_id: str
    chunk_id: str
    id: str = ""
    origin: Origin = "generated"
    """``generated`` by the model, ``manual`` (added by hand), or ``user`` (a query a
    user marked useful for the chunk): manual and user questions are kept when the chunk
    is made again."""

    def model_post_init(self, __context: Any) -> None:
        if not self.id:
            self.id = stable_id("question", self.atom_id, self.text)


class DroppedQuestion(_Record):
    """A generated question that selection left out, and why (kept for inspection:
    never searched)."""

    text: str
    atom_id: str
    chunk_id: str
    reason: str


class GeneratedQuestion(_Record):
    """A chunk's generated question as ``isotope questions`` and ``GET
    /chunks/{id}/questions`` show it: kept (searched) or dropped with the reason."""

    source: str
    chunk_id: str
    chunk_index: int
    atom_id: str
    atom: str
    text: str
    kept: bool
    reason: str = ""
    origin: Origin = "generated"
    """``generated``, ``manual`` or ``user`` (see :class:`Question`)."""
    id: str = ""
    """The question's id (``isotope questions disable ID``; a dropped one's is the id it
    would have)."""

    def model_post_init(self, __context: Any) -> None:
        if not self.id:
            self.id = stable_id("question", self.atom_id, self.text)


class MatchedQuestion(_Record):
    """A stored question that matched the query, with its similarity (cosine, -1..1)."""

    text: str
    score: float
    atom: str = ""
    origin: Origin = "generated"
    """``generated``, ``manual`` or ``user`` (see :class:`Question`)."""


def best_first(score: float, key: str) -> tuple[float, str]:
    """The order of search results, and of every list a search ranks on the way: the
    higher score first, and scores equal to the 6 digits a result shows by ``key`` (a
    chunk's id, a question's text), so that ties come out in the same order on every
    engine and in a copy of the index (whose rows are numbered otherwise)."""
    return (-round(score, 6), key)


class SearchResult(_Record):
    """One retrieved chunk, with the questions of it that matched the query."""

    rank: int
    score: float
    """The chunk's score in 0..1 (see the docs: guides/retrieval.md): for dense modes the
    cosine similarity of its best match, clipped at 0."""
    chunk: Chunk
    matched_questions: list[MatchedQuestion] = Field(default_factory=list)
    has_questions: bool = True
    """False while the chunk waits for its generated questions (``isotope enrich``): it
    is found by its text and atoms only."""
    source_metadata: dict[str, Any] = Field(default_factory=dict)
    """Its source's metadata (a title, front matter, an email's ``from`` and ``date``, a
    Word document's ``author``): what ``--where`` filters on besides the chunk's own."""
    _similar: dict[str, float] = PrivateAttr(default_factory=dict)
    """(a hybrid search's) cosine similarity of the query to the chunk's best atom
    (``atoms-dense``) and to its text (``chunks-dense``): how sure a result is whatever
    the index's size or the search's filters."""
    bridge: list[str] | None = None
    """Set on a passage given to an answer after its ``answer_k`` chunks (a search for an
    answer on an index with a graph, setting ``answer_bridges``) that the knowledge graph
    reached from the query: the paths that reached it (``Sydney Opera House -[was designed
    by]-> Jørn Utzon``)."""
    explain: dict[str, Any] | None = None
    """With ``explain``: how the score was made: per signal its ``rank``, ``raw`` score,
    ``standardized`` part, ``weight`` and ``contribution``; the ``fused`` sum (times
    ``scale`` for a chunk waiting for its questions) and the ``score`` made of it; the
    ``matched_questions`` and ``matched_atoms``."""


Action = Literal["deliver", "query_more", "refine_query"]
AnswerKind = Literal["generated", "quoted", "declined"]


class QueryResponse(_Record):
    """What ``search`` and ``ask`` return."""

    query: str
    mode: str = "questions-dense"
    """The retrieval mode that produced the results."""
    results: list[SearchResult] = Field(default_factory=list)
    answer: str | None = None
    """The synthesised answer (``ask`` only), citing results as [1], [2], ..."""
    citations: list[int] = Field(default_factory=list)
    """1-based numbers of the results the answer cites."""
    answer_kind: AnswerKind | None = None
    """How the answer was made (``ask`` only): ``generated`` by the model and supported by
    the passages it cites, ``quoted`` from the passage that best matches (the model's
    reply was not supported), or ``declined`` (no passage holds the answer)."""
    answer_confidence: float | None = None
    """The answer's own confidence (``ask`` only), apart from the search's: how likely
    the answer shown holds the right answer, 0 to 1 (0 when declined), calibrated on the
    development set (the retrieval guide's reliability table). An answer is ``generated``
    only when it reaches the ``answer_strictness`` level's bar."""
    rewrites: list[str] = Field(default_factory=list)
    """Questions the model rewrote a keyword query into (query transformation)."""
    top_score: float = 0.0
    """The first result's score (0..1; 0 when nothing matched)."""
    score_spread: float = 0.0
    """How far the first result leads the second (difference of their scores)."""
    has_high_confidence: bool = False
    """``top_score`` reaches the mode's ``deliver`` threshold."""
    suggested_action: Action = "refine_query"
    """What an agent should do with the results: ``deliver`` them (the first is very
    likely right), ``query_more`` (the answer is probably among them: read several, or
    search again), or ``refine_query`` (probably not found: rephrase or add detail)."""
    timings: dict[str, float] = Field(default_factory=dict)
    query_id: str | None = None
    """The search's id in the query log (the ``query_log`` setting), for feedback on its
    results (:meth:`isotope.Isotope.feedback`); None when it was not logged."""


class ChunkQuestions(_Record):
    """A chunk with every question generated for it (``GET /chunks/{id}/questions``)."""

    chunk: Chunk
    waiting: bool
    """The chunk still waits for its questions (``isotope enrich``)."""
    questions: list[GeneratedQuestion]


Stage = Literal["load", "chunk", "atomize", "generate", "embed", "store"]


@dataclass
class CacheStats:
    """Answers a model or an embedder got from the cache (``hits``) and had to compute
    (``misses``)."""

    hits: int = 0
    misses: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, hits: int, misses: int) -> None:
        """Add to both counts (calls come from several threads)."""
        with self._lock:
            self.hits += hits
            self.misses += misses
