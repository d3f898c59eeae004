"""A LangChain retriever over an isotope index (the ``langchain`` extra:
``langchain-core``)::

    from isotope import Isotope
    from isotope.integrations.langchain import IsotopeRetriever

    retriever = IsotopeRetriever(index=Isotope.open("./my_index"), k=4)
    docs = retriever.invoke("How many vacation days do new employees get?")
    docs = retriever.invoke("budget", filters={"from": "alice@example.com"})

Each ``Document`` is a chunk: its text as ``page_content``, and in ``metadata`` its
source, chunk id, score, rank, matched questions and metadata
(:func:`isotope.integrations.metadata`).
"""

from __future__ import annotations

from typing import Any

from isotope.errors import MissingDependency
from isotope.integrations import Searchable, metadata

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise MissingDependency.from_import(exc, "isotope.integrations.langchain",
                                        "langchain") from exc


class IsotopeRetriever(BaseRetriever):
    """Retrieves chunks from an :class:`isotope.Isotope` or :class:`isotope.Client`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Any
    """An ``Isotope`` or a ``Client``."""
    k: int | None = None
    """How many chunks (default: the index's ``top_k`` setting)."""
    mode: str | None = None
    """A retrieval mode (default: the index's)."""
    filters: dict[str, Any] | None = None
    """Filters for every query (see the docs: guides/filters.md); ``invoke(q, filters=...)``
    replaces them for one query (they only ever narrow what ``principal`` sees)."""
    principal: Any = None
    """Who searches (an ``Isotope`` index only: ``user:NAME[,group:NAME...]`` or an
    :class:`isotope.access.Principal`); fixed here, never replaced by ``invoke``. A
    ``Client`` searches as its API key."""

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> list[Document]:
        index: Searchable = self.index
        extra = {"principal": self.principal} if self.principal is not None else {}
        found = index.search(query, kwargs.get("k", self.k), mode=kwargs.get("mode", self.mode),
                             filters=kwargs.get("filters", self.filters), **extra)
        return [Document(page_content=r.chunk.text, metadata=metadata(r), id=r.chunk.id)
                for r in found.results]


__all__ = ["IsotopeRetriever"]
