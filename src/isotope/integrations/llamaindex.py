"""A LlamaIndex retriever over an isotope index (the ``llamaindex`` extra:
``llama-index-core``)::

    from isotope import Isotope
    from isotope.integrations.llamaindex import IsotopeRetriever

    retriever = IsotopeRetriever(Isotope.open("./my_index"), k=4)
    nodes = retriever.retrieve("How many vacation days do new employees get?")

Each ``NodeWithScore`` holds a ``TextNode`` of the chunk (its id, text and metadata:
:func:`isotope.integrations.metadata`) and the chunk's score. The long metadata (matched
questions, the source's metadata, citations) is kept from the text an LLM or an embedder
sees. Nothing is downloaded: no tokenizer or NLTK data is used on this path.
"""

from __future__ import annotations

from typing import Any

from isotope.errors import MissingDependency
from isotope.integrations import Searchable, metadata

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise MissingDependency.from_import(exc, "isotope.integrations.llamaindex",
                                        "llamaindex") from exc

_HIDDEN = ["matched_questions", "source_metadata", "cites", "chunk_id", "score", "rank"]


class IsotopeRetriever(BaseRetriever):
    """Retrieves chunks from an :class:`isotope.Isotope` or :class:`isotope.Client`;
    ``filters`` (see the docs: guides/filters.md) apply to every query; ``principal`` (an
    ``Isotope`` only: ``user:NAME[,group:NAME...]``) is who searches (a ``Client``
    searches as its API key)."""

    def __init__(self, index: Searchable, k: int | None = None, *, mode: str | None = None,
                 filters: dict[str, Any] | None = None, principal: Any = None,
                 **kwargs: Any) -> None:
        self._index, self._k, self._mode, self._filters = index, k, mode, filters
        self._extra = {"principal": principal} if principal is not None else {}
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = self._index.search(query_bundle.query_str, self._k, mode=self._mode,
                                   filters=self._filters, **self._extra)
        return [NodeWithScore(node=TextNode(id_=r.chunk.id, text=r.chunk.text,
                                            metadata=metadata(r),
                                            excluded_llm_metadata_keys=_HIDDEN,
                                            excluded_embed_metadata_keys=_HIDDEN),
                              score=r.score)
                for r in found.results]


__all__ = ["IsotopeRetriever"]
