"""What an ingest reports: the report of a finished run, the progress events of a
running one, and the plan of a dry run; and what an index's status says
(:class:`IndexStatus`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

STAGES = ("load", "chunk", "context", "atomize", "generate", "embed", "store")


@dataclass
class FileError:
    """A file (or a source inside one) an ingest could not take, or took with a warning:
    its path and why, in words that name the fix."""

    path: str
    message: str


@dataclass
class IngestReport:
    """What an ingest did."""

    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    """Sources whose files were deleted (``sync`` only)."""
    skipped: list[FileError] = field(default_factory=list)
    """Files left out on purpose (unsupported type)."""
    errors: list[FileError] = field(default_factory=list)
    """Files that could not be ingested; everything else was."""
    warnings: list[FileError] = field(default_factory=list)
    """Files ingested with something left out (a broken encoding, a missing .bib)."""
    failed_atoms: list[FileError] = field(default_factory=list)
    """Atoms whose questions could not be generated (their source is stored without them
    and is completed by the next ingest)."""
    chunks: int = 0
    contexts: int = 0
    """Chunks the model wrote a context for (``chunk_context``)."""
    failed_contexts: list[FileError] = field(default_factory=list)
    """Chunks whose context could not be written (stored without; asked again next time)."""
    reused_chunks: int = 0
    """Chunks of changed sources that were unchanged and kept their atoms, questions and
    vectors (no model or embedding calls for them)."""
    atoms: int = 0
    questions: int = 0
    """Questions stored (kept by the filters)."""
    questions_generated: int = 0
    questions_dropped: int = 0
    llm_calls: int = 0
    """Calls the language model answered (cache hits are not calls)."""
    llm_cache_hits: int = 0
    embedding_cache_hits: int = 0
    embedded: int = 0
    """Texts the embedding model embedded (cache hits excluded; 0 when the cache is off)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    enriched_chunks: int = 0
    """Chunks that got their questions (the enrichment stage, or ``isotope enrich``)."""
    waiting_chunks: int = 0
    """Chunks still waiting for their questions when the run ended (``--questions later``,
    or atoms the model failed on: ``isotope enrich`` generates them)."""
    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))

    @property
    def ok(self) -> bool:
        return not self.errors

    def absorb(self, part: IngestReport) -> None:
        """Add ``part`` (a report of some of the same run's work, kept apart by another
        thread) into this one: counts and times summed, lists extended."""
        for name, value in vars(part).items():
            mine = getattr(self, name)
            if isinstance(value, list):
                mine.extend(value)
            elif isinstance(value, dict):
                for key, seconds in value.items():
                    mine[key] = mine.get(key, 0.0) + seconds
            elif isinstance(value, int | float) and not isinstance(value, bool):
                setattr(self, name, mine + value)


@dataclass
class Progress:
    """Passed to a progress callback as work goes on."""

    stage: str
    source: str
    sources_done: int
    sources_total: int
    chunks: int
    atoms: int
    questions: int
    """Questions generated so far."""
    tokens: int = 0
    """Tokens the language model has written in this run so far (a local model's
    batched decoding tells them as it goes)."""
    eta_s: float | None = None
    """Seconds the questions are estimated to take still, once a tenth of the chunks is
    done (None before, and outside the questions' stage)."""

    def model_work(self) -> str:
        """``, 1200 tokens written, about 3 min left``: what this event knows of the
        model's work (nothing before the model writes), as the CLI and MCP say it."""
        said = f", {self.tokens} tokens written" if self.tokens else ""
        if self.eta_s is not None:
            said += (f", about {self.eta_s / 60:.0f} min left" if self.eta_s >= 90 else
                     f", about {self.eta_s:.0f} s left")
        return said


ProgressCallback = Callable[[Progress], None]


@dataclass
class IngestPlan:
    """What an ingest would do (``isotope ingest --dry-run``): nothing is generated or
    stored. Token counts are estimates for the calls the cache does not answer."""

    sources: int = 0
    unchanged: int = 0
    chunks: int = 0
    atoms: int = 0
    llm_calls: int = 0
    cached_calls: int = 0
    estimated_prompt_tokens: int = 0
    estimated_completion_tokens: int = 0
    skipped: list[FileError] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)


class Timer:
    """Adds the time spent in a ``with`` block to one stage of a report."""

    def __init__(self, report: IngestReport, stage: str) -> None:
        self.report, self.stage = report, stage

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.report.timings[self.stage] += time.perf_counter() - self.started


def listed_source(listing: dict[str, Any]) -> Any:
    """A ``SourceInfo`` from its listing (:func:`source_listing`; the Client's
    ``sources()``)."""
    from isotope.models import Source
    from isotope.stores import SourceInfo

    fields = {k: v for k, v in listing.items() if k in Source.model_fields}
    return SourceInfo(source=Source.model_validate(fields), chunks=listing.get("chunks", 0),
                      atoms=listing.get("atoms", 0), questions=listing.get("questions", 0),
                      state=listing.get("state", ""), pending=listing.get("chunks_waiting", 0))


def source_listing(info: Any) -> dict[str, Any]:
    """A source (a ``SourceInfo``) as ``isotope list --json`` and ``GET /sources`` show
    it: the source's fields, its state and counts."""
    return {**info.source.model_dump(mode="json"), "state": info.state, "chunks": info.chunks,
            "atoms": info.atoms, "questions": info.questions, "chunks_waiting": info.pending}


class IndexStatus(BaseModel):
    """What ``Isotope.status()`` returns."""

    index: str
    """The index's directory, absolute."""
    project: str | None = None
    """The project's name, when the index is a project."""
    schema_version: int
    isotope_version: str
    created_at: str | None
    counts: dict[str, int]
    disk_bytes: int | None
    embedding: dict[str, Any]
    models: dict[str, str]
    prompt_versions: dict[str, str]
    settings: dict[str, Any]
    vector_backend: str = "usearch"
    """Where the vectors are kept: ``usearch`` (the index's own files), ``chroma`` (a
    Chroma folder inside the index) or the Chroma server's URL."""
    keyword_engine: str = "fts5"
    """What ranks keyword search: ``fts5`` (embedded), ``pg_textsearch`` or ``postings``
    (PostgreSQL; chosen when the index was made, from what the server has)."""
    graph: bool = False
    """Whether the index has a knowledge graph (the ``graph`` setting it was made with)."""
    replicas: list[dict[str, Any]] = []
    """Each read replica's ``url`` (password masked), ``healthy``, ``lag_s`` (seconds
    behind the primary) and ``error`` (why it is not healthy)."""
    query_adapter: dict[str, Any] = {}
    """The query adapter (:mod:`isotope.search.adapter`): ``setting`` (``off`` or the
    kind), ``in_use`` (searches apply it: the setting is on and its last fit beat none
    on its held-out questions) and ``fit`` (that fit, as ``isotope adapter fit --json``
    gives it; None: never fitted)."""
