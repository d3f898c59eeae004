"""isotope inside the frameworks users already have: a LangChain retriever
(:mod:`isotope.integrations.langchain`, the ``langchain`` extra) and a LlamaIndex retriever
(:mod:`isotope.integrations.llamaindex`, the ``llamaindex`` extra). Each takes an
:class:`isotope.Isotope` or an :class:`isotope.Client` (a served index) and returns the
chunks with their score, source and matched questions in metadata; filters pass
through."""

from __future__ import annotations

from typing import Any, Protocol

from isotope.models import QueryResponse, SearchResult


class Searchable(Protocol):
    """What a retriever needs of an index: ``Isotope`` and ``Client`` both have it."""

    def search(self, query: str, k: int | None = None, *, mode: str | None = None,
               filters: dict[str, Any] | None = None, **options: Any) -> QueryResponse: ...


def metadata(result: SearchResult) -> dict[str, Any]:
    """A result's metadata as a framework document carries it: the chunk's own (headings,
    page, ...), then ``source``, ``chunk_id``, ``score``, ``rank``, ``matched_questions``
    (text, score, atom) and ``source_metadata``."""
    chunk = result.chunk
    return {**chunk.metadata, "source": chunk.source, "chunk_id": chunk.id,
            "score": result.score, "rank": result.rank,
            "matched_questions": [m.model_dump() for m in result.matched_questions],
            "source_metadata": dict(result.source_metadata)}


__all__ = ["Searchable", "metadata"]
