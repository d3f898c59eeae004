"""A search request: what one call of :meth:`isotope.Isotope.search` (or ``ask``) asks,
settled once from the call and the settings by :func:`search_request`, before anything
is searched:

- the query, checked (:func:`valid_query`), and ``k`` (the ``top_k`` setting, or
  ``answer_k`` for a search an answer is made from; :func:`valid_k`);
- the mode (the ``mode`` setting by default; ``graph`` only on an index with a graph);
- the fusion options: the ``weights`` setting over the weights fitted from users' marks
  (:class:`~isotope.search.fitted.Fitted`), the call's own weights over both, and, for an
  answer's search on an index with a graph, the graph signal at ``answer_graph_weight``
  (over the fitted weights, under the rest); the query adapter in use;
- the filters, parsed, with the principal's conditions among them (who asks and what it may
  see, worked out once here: the search and the answer made from it use these);
- whether the query is rewritten into questions first (``transform``: the
  ``query_transform`` setting by default; a query already a question is not);
- how many bridges an answer's hybrid search on an index with a graph gives past its
  ``k`` results (``answer_bridges``, none past the passages an answer reads).

:class:`~isotope.search.searching.Search` runs it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from isotope import access
from isotope.access import Principal
from isotope.errors import InvalidArgument
from isotope.models import Condition
from isotope.search import answer, retrieval
from isotope.search.filters import parse as parse_filters
from isotope.search.filters import shown_text

if TYPE_CHECKING:
    from isotope.search.fitted import Fitted
    from isotope.settings import Settings

MAX_K = 10_000
"""The most results a query may ask for."""
MAX_QUERY = 10_000
"""The most characters a query may have (on every surface: the API, the CLI, HTTP, MCP)."""


@dataclass(frozen=True)
class SearchRequest:
    """One search, settled (see the module's text): ``query`` searched for ``k`` results
    in ``mode``; ``filters`` as the caller gave them (for the query log and the check of
    their keys); ``options``: fusion's and retrieval's (:func:`retrieval.search`: the
    weights, the parsed filters with the principal's conditions, ``explain``, the query
    adapter); ``transform``: the query is rewritten into questions first; ``bridges``:
    the graph's bridges given past ``k``; ``principal`` (None: the index's owner) and its
    ``conditions`` (none: it sees everything); ``started``: when the call began (the
    latency logged)."""

    query: str
    k: int
    mode: str
    filters: dict[str, Any] | None
    options: dict[str, Any]
    transform: bool
    bridges: int
    principal: Principal | None
    conditions: list[Condition]
    started: float = field(default_factory=time.perf_counter)


def search_request(settings: Settings, fitted: Fitted, query: str, k: int | None = None, *,
                   mode: str | None = None, transform: bool | None = None,
                   filters: dict[str, Any] | None = None,
                   weights: dict[str, float] | None = None, for_answer: bool = False,
                   explain: bool = False,
                   principal: Principal | str | dict[str, Any] | None = None,
                   control: bool = False) -> SearchRequest:
    """The request of a call of :meth:`isotope.Isotope.search` with these arguments (as
    it documents them), under ``settings``, with the index's ``fitted`` weights and query
    adapter; ``control``: access control is on (sources without a list are hidden from
    users). Raises :class:`InvalidArgument` (the query, ``k``, the mode) or
    :class:`~isotope.search.filters.FilterError`, in that order, before anything is
    searched."""
    started = time.perf_counter()
    query = valid_query(query)
    k = valid_k(k if k is not None else settings.answer_k if for_answer else settings.top_k)
    principal = access.principal_of(principal)
    conditions = access.conditions(principal, control=control)
    weighed = fitted.weights()
    if for_answer and settings.graph:  # (over the fitted weights, under the rest)
        weighed = {**(weighed or {}), "graph": settings.answer_graph_weight}
    options = {**retrieval.fusion_options(settings, weights, weighed),
               "filters": parse_filters(filters) + conditions, "explain": bool(explain),
               "adapter": fitted.adapter()}
    mode = mode or settings.mode
    if mode == "graph" and not settings.graph:
        raise InvalidArgument("mode graph searches the knowledge graph, and this index has "
                              "none: it is made with the setting graph = true (a new "
                              "index, or `isotope ingest --force`)")
    transform = settings.query_transform if transform is None else transform
    return SearchRequest(query, k, mode, filters, options,
                         bool(transform) and not query.rstrip().endswith("?"),
                         _bridges(settings, k, mode) if for_answer else 0, principal,
                         conditions, started)


def _bridges(settings: Settings, k: int, mode: str) -> int:
    """The bridges an answer's search gives past its ``k`` results: on an index with a
    graph, a hybrid search's ``answer_bridges``, none past the passages an answer reads
    (:data:`isotope.search.answer.MAX_PASSAGES`)."""
    if not settings.graph or mode != "hybrid":
        return 0
    return min(settings.answer_bridges, max(0, answer.MAX_PASSAGES - k))


def valid_query(query: str) -> str:
    """The query, with undecodable bytes (lone surrogates from a terminal in another
    encoding) shown as U+FFFD; an empty one is refused."""
    if not isinstance(query, str):
        raise InvalidArgument(f"a query is text, not {type(query).__name__}")
    query = shown_text(query)
    if not query.strip():
        raise InvalidArgument("the query is empty: ask a question, or give some keywords")
    if len(query) > MAX_QUERY:  # (as HTTP and MCP refuse it)
        raise InvalidArgument(f"the query has {len(query):,} characters; at most "
                              f"{MAX_QUERY:,}: ask a question, or give some keywords")
    return query


def valid_k(k: int) -> int:
    """``k``, a whole number of results from 1 to :data:`MAX_K`, else
    :class:`InvalidArgument`."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidArgument(f"k = {k!r}: the number of results must be a whole number "
                              f"from 1 to {MAX_K}")
    return k
