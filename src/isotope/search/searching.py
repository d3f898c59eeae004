"""One search, from the query to the logged response, in one place and in order (issue
43): what :meth:`isotope.Isotope.search` runs.

1. **Retrieval** (:func:`isotope.search.retrieval.search`, or ``search_many`` for the
   questions a keyword query was rewritten into), under the asker's conditions.
2. **File references read back** (``storage = "file-reference"``): each result's text
   from its file as it is now.
3. **A filter naming no key** the asker's sources have, when nothing was found: an error
   naming the keys there are.
4. **Hidden members**: an email's attachment the asker may not see is not named in the
   email's ``attachments``.
5. **Not-useful marks**: a first result the asker marked not useful for this query (or
   a very close one) moves down.
6. **Assessment**, once, of the final order: ``top_score``, ``suggested_action``.
7. **Learned questions hidden** (unless ``show_learned``).
8. **The query log**: the search written there (the ``query_log`` or ``audit_log``
   setting), giving it its ``query_id``; a search that cannot be logged fails.

A :class:`Search` takes what it reads as arguments (the store, the embedder, the
settings, the asker and its conditions), never the :class:`~isotope.Isotope`, and
imports nothing above ``search/``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from isotope.access import Principal, entitled
from isotope.embedders import Embedder
from isotope.models import ACCESS_BY_HAND, Condition, QueryResponse
from isotope.search import learning, retrieval
from isotope.search.filters import SPECIAL, FilterError, shown_text
from isotope.stores import Store

if TYPE_CHECKING:
    from isotope.settings import Settings

CHUNK_KEYS = frozenset({"headings", "page", "pages", "cites", "cite_keys"})
"""The metadata keys a chunk of a loaded file may have (the rest are its source's)."""


def confirming(asker: Principal | None, show_learned: bool) -> tuple[str, ...]:
    """The origins of the questions whose match raises their chunk for ``asker``: learned
    ones (other users' queries) only for whoever may see them (the owner, an
    administrator, or everyone with ``show_learned``): the raise, shown by ``explain`` and
    in the score, would otherwise tell whether someone asked a query."""
    if entitled("learned_questions", asker) or show_learned:
        return retrieval.CONFIRMING
    return ("manual",)


class ChunkCounts:
    """How many chunks each asker may see (the confidence thresholds' index size: nothing
    hidden shapes them), read from the store at most every :attr:`EVERY` seconds; one per
    open index."""

    EVERY = 30.0
    KEEP = 1_000
    """Askers remembered at most (then forgotten all at once)."""

    def __init__(self) -> None:
        self._known: dict[Principal | None, tuple[float, int]] = {}

    def of(self, store: Store, asker: Principal | None, conditions: Sequence[Condition]
           ) -> int | None:
        """The chunks meeting ``conditions`` (``asker``'s), None when the store cannot
        say (a count is a nicety here, never a failed search)."""
        now = time.monotonic()
        known = self._known.get(asker)
        if known is None or now - known[0] > self.EVERY:
            try:
                known = (now, int(store.counts(conditions)["chunks"]))
            except Exception:
                return None
            if len(self._known) > self.KEEP:
                self._known.clear()
            self._known[asker] = known
        return known[1]


@dataclass
class Search:
    """A search of ``store`` by ``asker`` (None: the index's owner), whose ``conditions``
    say what it may see (none: everything). ``counts``: the index's :class:`ChunkCounts`
    (the chunks the asker may see, for the confidence thresholds); ``log``: write the search to
    the query log; ``max_bytes``: the largest file a file reference is read back from;
    ``access_control``: whether sources without a list are hidden from users."""

    store: Store
    embedder: Embedder
    settings: Settings
    asker: Principal | None
    conditions: Sequence[Condition]
    counts: ChunkCounts
    log: bool = False
    max_bytes: int = 0
    access_control: bool = False

    def run(self, query: str, k: int, mode: str, *,
            filters: dict[str, Any] | None = None, rewrites: Sequence[str] | None = None,
            options: dict[str, Any] | None = None, started: float | None = None,
            bridges: int = 0) -> QueryResponse:
        """The search of ``query`` (and of the questions the model rewrote it into,
        ``rewrites``, fused; None: not rewritten), ``k`` results in
        ``mode``, through every step (see the module's text); on an index with a graph,
        a hybrid search gives ``bridges`` more (a search for an answer), each the graph
        reached saying by which paths (:attr:`SearchResult.bridge`). ``options``: fusion's and
        retrieval's (:func:`retrieval.search`), the asker's conditions among its
        ``filters`` already; ``started``: when the search began, for the latency logged
        (default: now). Run inside ``store.reading`` (made again on another replica if
        the one it read stops answering)."""
        started = time.perf_counter() if started is None else started
        given = {"confirmed_by": confirming(self.asker, self.settings.show_learned),
                 **(options or {})}
        explain = bool(given.get("explain"))
        bridges = bridges if self.settings.graph and mode == "hybrid" else 0
        if bridges:  # (the graph's paths read for the bridges)
            given["explain"] = True
        if rewrites is not None:
            response = retrieval.search_many(self.store, self.embedder, query,
                                             list(rewrites), k + bridges, mode, **given)
        else:
            response = retrieval.search(self.store, self.embedder, query, k + bridges, mode,
                                        **given)
        self._read_back(response)
        if not response.results and filters:
            self.known_keys(filters)
        if self.conditions:
            hide_members(self.store, self.asker, [(r.chunk.source, r.source_metadata)
                                                  for r in response.results],
                         control=self.access_control)
        marks = learning.marks_of(self.store, self.asker) if response.results else []
        if marks:
            learning.demote(response, learning.not_first(
                marks, self.embedder.embed_one(response.query)))
        if bridges:  # (after the marks: a result moved first is no bridge)
            mark_bridges(response, k, explain)
        retrieval.assess(response, self.settings.deliver_score, self.settings.refine_score,
                         chunks=self.counts.of(self.store, self.asker, self.conditions))
        if not self.settings.show_learned:
            learning.hide_learned(response)
        if self.log:
            learning.log(self.store, response, self.asker, filters, started,
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

    def known_keys(self, filters: dict[str, Any]) -> None:
        """:class:`FilterError` when a filter names a key no chunk or source the asker may
        see has (``--where yaer>=2020``), naming the keys there are."""
        infos = self.store.sources(self.conditions)
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


def hide_members(store: Store, asker: Principal | None,
                 shown: Sequence[tuple[str, dict[str, Any]]], *, control: bool) -> None:
    """Leave out of each shown source's ``attachments`` (an email's metadata: the names of
    its attachments) those stored as sources of their own that ``asker`` may not see (a
    list set on an attachment alone; ``control``: access control is on); reads the
    members of the shown emails only."""
    from isotope.loaders.mail import _member_name

    having = [uri for uri, m in shown if m.get("attachments")]
    if asker is None or not having:
        return
    members = store.members(having)
    for uri, metadata in shown:
        names = metadata.get("attachments")
        # (a member is CONTAINER#NAME, NAME made unique with leading "_"s; a mailbox
        # message's attachment is BOX#MESSAGE#NAME, its container BOX#MESSAGE)
        hidden = {m.uri[len(uri) + 1:] for m in members.get(uri, ())
                  if not asker.sees(m.access, control=control)}
        if isinstance(names, list) and hidden:
            metadata["attachments"] = [n for n in names if not any(
                h.lstrip("_") == _member_name(str(n)).lstrip("_") or h == str(n)
                for h in hidden)]
