"""One search, from the query to the logged response, in one place and in order (issue
43): what :meth:`isotope.Isotope.search` runs, for a
:class:`~isotope.search.request.SearchRequest` settled before it (issue 67).

0. **The rewrite** (``transform``): a query that is not a question, rewritten by the
   answer model into one to three questions, once (outside the read: a search made again
   on another replica is not rewritten again).
1. **Retrieval** (:func:`isotope.search.retrieval.search`, or ``search_many`` for the
   questions a keyword query was rewritten into), under the principal's conditions.
2. **File references read back** (``storage = "file-reference"``): each result's text
   from its file as it is now.
3. **A filter naming no key** the principal's sources have, when nothing was found: an error
   naming the keys there are.
4. **Hidden members**: an email's attachment the principal may not see is not named in the
   email's ``attachments``.
5. **Not-useful marks**: a first result the principal marked not useful for this query (or
   a very close one) moves down.
6. **Assessment**, once, of the final order: ``top_score``, ``suggested_action``.
7. **Learned questions hidden** (unless ``show_learned``).
8. **The query log**: the search written there (the ``query_log`` or ``audit_log``
   setting), giving it its ``query_id``; a search that cannot be logged fails.

A :class:`Search` takes what it reads as arguments (the store, the embedder, the
settings, the answer model; the principal and its conditions come with the request), never
the :class:`~isotope.Isotope`, and imports nothing above ``search/``. The answer step
after it is :class:`~isotope.search.answering.Answering`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from isotope.access import Principal, entitled
from isotope.embedders import Embedder
from isotope.ingest.questions import parse_questions
from isotope.models import ACCESS_BY_HAND, Condition, QueryResponse
from isotope.prompts import PromptSpec
from isotope.providers import LLM
from isotope.search import learning, retrieval
from isotope.search.filters import SPECIAL, FilterError, shown_text
from isotope.stores import Store

if TYPE_CHECKING:
    from isotope.search.request import SearchRequest
    from isotope.settings import Settings

CHUNK_KEYS = frozenset({"headings", "page", "pages", "cites", "cite_keys"})
"""The metadata keys a chunk of a loaded file may have (the rest are its source's)."""


def confirming(principal: Principal | None, show_learned: bool) -> tuple[str, ...]:
    """The origins of the questions whose match raises their chunk for ``principal``: learned
    ones (other users' queries) only for whoever may see them (the owner, an
    administrator, or everyone with ``show_learned``): the raise, shown by ``explain`` and
    in the score, would otherwise tell whether someone asked a query."""
    if entitled("learned_questions", principal) or show_learned:
        return retrieval.CONFIRMING
    return ("manual",)


class ChunkCounts:
    """How many chunks each principal may see (the confidence thresholds' index size: nothing
    hidden shapes them), read from the store at most every :attr:`EVERY` seconds; one per
    open index."""

    EVERY = 30.0
    KEEP = 1_000
    """Principals remembered at most (then forgotten all at once)."""

    def __init__(self) -> None:
        self._known: dict[Principal | None, tuple[float, int]] = {}

    def of(self, store: Store, principal: Principal | None, conditions: Sequence[Condition]
           ) -> int | None:
        """The chunks meeting ``conditions`` (``principal``'s), None when the store cannot
        say (a count is a nicety here, never a failed search)."""
        now = time.monotonic()
        known = self._known.get(principal)
        if known is None or now - known[0] > self.EVERY:
            try:
                known = (now, int(store.counts(conditions)["chunks"]))
            except Exception:
                return None
            if len(self._known) > self.KEEP:
                self._known.clear()
            self._known[principal] = known
        return known[1]


@dataclass
class Search:
    """A search of ``store``, run for a :class:`~isotope.search.request.SearchRequest`
    (whose principal and conditions say who asks and what it may see). ``counts``: the
    index's :class:`ChunkCounts` (the chunks the principal may see, for the confidence
    thresholds); ``log``: write the search to the query log; ``max_bytes``: the largest
    file a file reference is read back from; ``access_control``: whether sources without
    a list are hidden from users; ``model``: the answer model, which rewrites a query
    into questions (loaded only then), with the ``transform`` prompt of ``prompts``."""

    store: Store
    embedder: Embedder
    settings: Settings
    counts: ChunkCounts
    log: bool = False
    max_bytes: int = 0
    access_control: bool = False
    model: Callable[[], LLM] | None = None
    prompts: Mapping[str, PromptSpec] = field(default_factory=dict)

    def run(self, request: SearchRequest) -> QueryResponse:
        """The search ``request`` asks, through every step (see the module's text): its
        query rewritten first when it asks so (once: a search made again on another
        replica, when the one it read stops answering, is not rewritten again), then
        searched inside ``store.reading``."""
        rewrites: list[str] | None = None  # (None: not rewritten)
        rewriting = time.perf_counter()
        if request.transform and self.model is not None:
            reply = self.model().complete(
                retrieval.transform_prompt(request.query, self.prompts["transform"]),
                max_tokens=120, temperature=0.0)
            rewrites = parse_questions(reply, 3)
        rewritten = time.perf_counter() - rewriting

        def run() -> QueryResponse:
            response = self.searched(request, rewrites)
            if rewrites is not None:
                response.timings["transform"] = rewritten
            return response

        return self.store.reading(run)

    def searched(self, request: SearchRequest, rewrites: Sequence[str] | None = None
                 ) -> QueryResponse:
        """The search of ``request``'s query (and of the questions the model rewrote it
        into, ``rewrites``, fused; None: not rewritten), ``k`` results in its mode,
        through every step; on an index with a graph, a hybrid search for an answer gives
        the request's ``bridges`` more, each the graph reached saying by which paths
        (:attr:`SearchResult.bridge`). Run inside ``store.reading``."""
        principal, k, bridges = request.principal, request.k, request.bridges
        given = {"confirmed_by": confirming(principal, self.settings.show_learned),
                 **request.options}
        explain = bool(given.get("explain"))
        if bridges:  # (the graph's paths read for the bridges)
            given["explain"] = True
        if rewrites is not None:
            response = retrieval.search_many(self.store, self.embedder, request.query,
                                             list(rewrites), k + bridges, request.mode,
                                             **given)
        else:
            response = retrieval.search(self.store, self.embedder, request.query,
                                        k + bridges, request.mode, **given)
        self._read_back(response)
        if not response.results and request.filters:
            self.known_keys(request.filters, request.conditions)
        if request.conditions:
            hide_members(self.store, principal, [(r.chunk.source, r.source_metadata)
                                             for r in response.results],
                         control=self.access_control)
        marks = learning.marks_of(self.store, principal) if response.results else []
        if marks:
            learning.demote(response, learning.not_first(
                marks, self.embedder.embed_one(response.query)))
        if bridges:  # (after the marks: a result moved first is no bridge)
            mark_bridges(response, k, explain)
        retrieval.assess(response, self.settings.deliver_score, self.settings.refine_score,
                         chunks=self.counts.of(self.store, principal, request.conditions))
        if not self.settings.show_learned:
            learning.hide_learned(response)
        if self.log:
            learning.log(self.store, response, principal, request.filters, request.started,
                         time.perf_counter(), keep_days=self.settings.audit_days)
        return response

    def _read_back(self, response: QueryResponse) -> None:
        """Each result's text from its file as it is now (``storage = "file-reference"``:
        the index keeps no text)."""
        if self.settings.storage != "file-reference" or not response.results:
            return
        from isotope.ingest import references

        uris = {r.chunk.source for r in response.results}
        chunks = references.read_back([r.chunk for r in response.results],
                                      {uri: self.store.get_source(uri) for uri in uris},
                                      self.max_bytes)
        for result, chunk in zip(response.results, chunks, strict=True):
            result.chunk = chunk

    def known_keys(self, filters: dict[str, Any], conditions: Sequence[Condition]) -> None:
        """:class:`FilterError` when a filter names a key no chunk or source the principal
        (whose ``conditions`` they are) may see has (``--where yaer>=2020``), naming the
        keys there are."""
        infos = self.store.sources(conditions)
        if any(i.source.loader == "chunks" for i in infos):
            return  # (chunks given to ingest_chunks carry metadata of their own)
        known = SPECIAL | CHUNK_KEYS | {k for i in infos for k in i.source.metadata}
        unknown = sorted(set(filters) - known)
        if unknown:
            shown = ", ".join(sorted(known - {"pipeline", ACCESS_BY_HAND}))
            named = ", ".join(repr(shown_text(k)) for k in unknown)
            raise FilterError(f"no chunk or source of this index has the key {named}; the "
                              f"keys it has: {shown}")


def mark_bridges(response: QueryResponse, k: int, shown: bool) -> None:
    """The results of an answer's search past its first ``k`` (explained) are its
    bridges: each that the graph reached says by which paths (``bridge``); ``shown``:
    whether the caller asked for ``explain`` (else it is dropped)."""
    for result in response.results:
        paths = retrieval.graph_paths(result)
        if result.rank > k and paths:
            result.bridge = list(paths)
        if not shown:
            result.explain = None


def hide_members(store: Store, principal: Principal | None,
                 shown: Sequence[tuple[str, dict[str, Any]]], *, control: bool) -> None:
    """Leave out of each shown source's ``attachments`` (an email's metadata: the names of
    its attachments) those stored as sources of their own that ``principal`` may not see (a
    list set on an attachment alone; ``control``: access control is on); reads the
    members of the shown emails only."""
    from isotope.loaders.mail import _member_name

    having = [uri for uri, m in shown if m.get("attachments")]
    if principal is None or not having:
        return
    members = store.members(having)
    for uri, metadata in shown:
        names = metadata.get("attachments")
        # (a member is CONTAINER#NAME, NAME made unique with leading "_"s; a mailbox
        # message's attachment is BOX#MESSAGE#NAME, its container BOX#MESSAGE)
        hidden = {m.uri[len(uri) + 1:] for m in members.get(uri, ())
                  if not principal.sees(m.access, control=control)}
        if isinstance(names, list) and hidden:
            metadata["attachments"] = [n for n in names if not any(
                h.lstrip("_") == _member_name(str(n)).lstrip("_") or h == str(n)
                for h in hidden)]
