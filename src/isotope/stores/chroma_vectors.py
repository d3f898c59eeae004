"""The vectors of an embedded index kept in Chroma (``vector_backend = chroma``, or a
server's ``chroma+http://HOST:PORT/PREFIX``), one collection per kind of item.

**Two stores, no shared transaction.** The relational side (SQLite, or PostgreSQL) stays
the source of truth for everything but the vectors' index; what this module reads of it
is a :class:`Rows` (:mod:`isotope.stores.sqlite_chroma`,
:mod:`isotope.stores.postgres_chroma`). A write commits its rows and their vectors into
the ``vector_log`` table in one transaction, as with usearch: those are the pending vector
writes. Then, under a lock only one process holds (the embedded store's writer lock,
PostgreSQL's advisory lock), they are sent to Chroma (upserts and deletes by the item's
row id, each of which can be repeated) and only then deleted from the log, in a
transaction of their own. A crash between the two leaves them in the log: the next write,
the next open that can take the lock, or ``isotope check --repair`` sends them again.
Until then a search reads Chroma and the log together: the items the log touches are left
out of Chroma's answer (it is asked for as many more), and those the log adds are searched
exactly. Two processes never send at once (a late send could otherwise bring back an item
deleted meanwhile).

**Metadata.** Each vector carries its chunk's row id, its source, the source's loader and
``type``, and its access list (``open`` when the source has none), so that who may see is
a Chroma ``where`` inside its search, never a filter on its top k. A change of a source's
access list logs its items again (an entry with an empty vector: only their metadata is
sent). Conditions Chroma cannot say (source globs, metadata values, registry columns)
become one condition on the chunk, still inside the search: the chunks meeting them,
read from SQLite, as ``chunk $in [...]``.

The embedded mode keeps a ``PersistentClient`` folder, ``chroma/``, inside the index. Its
graph is held in memory by each process that opened it, and does not see what another
process writes: each send changes a mark in the index (:meth:`Rows.sent`), and a process
that finds the mark changed by someone else reopens the folder before it reads (one
client per folder in a process, shared by every index object opened on it)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import numpy as np

from isotope.ann import Ids, dot
from isotope.embedders import Vectors
from isotope.errors import InvalidArgument, MissingDependency, StoreError
from isotope.models import ACCESS_KEY, Condition
from isotope.settings import CHROMA_SCHEMES
from isotope.stores import KINDS, Kind, scheme
from isotope.stores.sqlite_vectors import compare

log = logging.getLogger(__name__)
EF_SEARCH = 200
"""The breadth of a Chroma collection's HNSW search (Chroma's default: 100)."""
GRAPH = {"max_neighbors": 32, "ef_construction": 200}
"""How a new collection's HNSW graph is built (Chroma's defaults: 16 and 100). At a
million questions (``benchmarks/chroma_graph.py``) Chroma's default graph gave recall@10
0.92-0.94 unfiltered and 0.94-0.95 for someone who may see 1% or 10%, whatever the
search breadth (100 to 800); this one gives 0.97 and 0.99, and builds at half the rate.
A collection keeps the graph it was made with (``isotope copy`` makes a new one)."""
IN_LIMIT = 20_000
"""Chunk rows in one ``$in`` (Chroma's embedded engine fails past about 32,000: more are
asked in several searches, their answers merged)."""
SEND = 2_000
"""Vectors sent to Chroma in one call (under its maximum batch size)."""
MAX_ASKED = 10_000
"""The most items one Chroma search asks for when those it found are left out (their
metadata not confirmed by the index)."""


class Rows(Protocol):
    """The relational side of an index whose vectors Chroma keeps: its log of pending
    vector writes, and the rows Chroma's metadata and the conditions it cannot say are
    read from."""

    def log(self, kind: Kind) -> list[tuple[Any, ...]]:
        """The pending writes of ``kind``, ``(seq, item, chunk row, vector)`` in order
        (see :meth:`Pending.of`)."""

    def log_size(self, kind: Kind) -> int:
        """How many entries of ``kind`` are pending."""

    def forget(self, kind: Kind, entries: Sequence[tuple[Any, ...]]) -> None:
        """Delete these log entries (Chroma has them), in a transaction of their own that
        also changes the :meth:`sent` mark."""

    def sent(self) -> Any:
        """A mark that changes each time something is sent to Chroma (None: no mark is
        kept, where every process reads one Chroma server)."""

    def chunk_rows(self, kind: Kind, items: list[int]) -> dict[int, int]:
        """The chunk row of each of ``items`` of ``kind`` still stored."""

    def metadata(self, kind: Kind, items: list[int]) -> dict[int, dict[str, Any]]:
        """The Chroma metadata of ``items`` of ``kind`` as stored now (:func:`about`)."""

    def meeting(self, kind: Kind, filters: Sequence[Condition], items: list[int]
                ) -> set[int]:
        """Those of ``items`` of ``kind`` whose chunks meet ``filters``."""

    def chunks_meeting(self, filters: Sequence[Condition]) -> Ids:
        """The row of every chunk meeting ``filters``."""


@dataclass(frozen=True)
class ChromaPlace:
    """Where an index's Chroma collections are: its folder inside the index (``url``
    None), or a server; their names start with ``prefix``."""

    url: str | None
    prefix: str
    tenant: str | None = None
    database: str | None = None
    owner: str | None = None
    """The index's id, kept in its collections' metadata: a collection of that name made
    by another index is refused, not shared."""

    def describe(self, folder: Path) -> str:
        return (f"the Chroma server {self.url}" if self.url
                else f"the Chroma folder {folder}")


def place_of(value: str, *, default_prefix: str, tenant: str | None = None,
             database: str | None = None) -> ChromaPlace:
    """The Chroma place a ``vector_backend`` value names (``chroma``: embedded)."""
    if value == "chroma":
        return ChromaPlace(None, default_prefix)
    parts = urlsplit(value)
    if scheme(value) not in CHROMA_SCHEMES or not parts.hostname:
        raise InvalidArgument(f"vector_backend {value!r}: use usearch, chroma, or a server "
                              "as chroma+http://HOST:PORT/PREFIX")
    if parts.username or parts.password:
        raise InvalidArgument("vector_backend: give the Chroma token in the chroma_token "
                              "setting, not in the URL")
    prefix = parts.path.strip("/").replace("/", "-") or default_prefix
    return ChromaPlace(value, prefix, tenant, database)


class ChromaVectors:
    """Each kind's vectors in a Chroma collection, with the pending writes of
    ``vector_log`` (see the module's text)."""

    def __init__(self, place: ChromaPlace, folder: Path, rows: Rows, *, token: str | None,
                 timeout: float) -> None:
        self.place, self.folder, self._rows = place, folder, rows
        self._token, self._timeout = token, timeout
        self._client: Any = None
        self._collections: dict[Kind, Any] = {}
        self._folder: _Folder | None = None
        """The embedded folder's client this object uses (shared in the process)."""
        self._lock = threading.RLock()
        """Guards the client and the collections (not held during searches or sends)."""
        self._sending = threading.Lock()
        """One send at a time in this process (others wait on the writer lock)."""

    @property
    def where(self) -> str:
        return self.place.describe(self.folder)

    # -- the client --------------------------------------------------------------------
    def _collection(self, kind: Kind) -> Any:
        with self._lock:
            if self._folder is not None and self._client is not self._folder.client:
                self._client = None  # (the folder was reopened: its collections too)
                self._collections.clear()
            found = self._collections.get(kind)
            if found is None:
                name = f"{self.place.prefix}-{kind}"
                owner = {"isotope_index": self.place.owner} if self.place.owner else None
                found = self._call(lambda: self._connect().get_or_create_collection(
                    name, embedding_function=None, metadata=owner,
                    configuration={"hnsw": {"space": "cosine", "ef_search": EF_SEARCH,
                                            **GRAPH}}))
                if owner and (found.metadata or {}).get("isotope_index") != owner[
                        "isotope_index"]:
                    raise StoreError(
                        f"the collection {name} in {self.where} holds another index's "
                        "vectors; give this index a prefix of its own "
                        "(chroma+http://HOST:PORT/PREFIX)")
                self._collections[kind] = found
            return found

    def _connect(self) -> Any:
        if self._client is not None:
            return self._client
        try:
            import chromadb
            from chromadb.config import Settings as ChromaSettings
        except ImportError as exc:
            raise MissingDependency.from_import(exc, "vector_backend = chroma",
                                                "chroma") from exc
        settings = ChromaSettings(anonymized_telemetry=False)
        if self.place.url is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            if not os.access(self.folder, os.W_OK):  # (Chroma writes its folder as it opens)
                raise StoreError(
                    f"the Chroma folder {self.folder} is read-only, and Chroma cannot open "
                    "its folder without writing to it: copy the index folder somewhere "
                    "writable and open it there (an index meant to be read-only keeps its "
                    "vectors in usearch or a Chroma server: `isotope copy` moves them)")
            with _FOLDERS_LOCK:
                if self._folder is None:
                    key = str(self.folder.resolve())
                    self._folder = _FOLDERS.get(key)
                    if self._folder is None:
                        self._folder = _FOLDERS[key] = _Folder(key, self._rows.sent())
                    self._folder.users += 1
                if self._folder.client is None:
                    self._folder.client = chromadb.PersistentClient(path=self._folder.key,
                                                                    settings=settings)
                self._client = self._folder.client
            return self._client
        parts = urlsplit(self.place.url)
        ssl = scheme(self.place.url) == "chroma+https"
        token = self._token if self._token is not None else _token_setting()
        headers = {"Authorization": f"Bearer {token}"} if token else None
        extra = {k: v for k, v in (("tenant", self.place.tenant),
                                   ("database", self.place.database)) if v}
        made: dict[str, Any] = {}

        def make() -> None:  # (the client asks the server for its tenant as it is made,
            try:  # with no timeout of its own: made in a thread waited for so long)
                made["client"] = chromadb.HttpClient(
                    host=str(parts.hostname), port=parts.port or (443 if ssl else 8000),
                    ssl=ssl, headers=headers, settings=settings, **extra)
            except Exception as exc:
                made["error"] = exc

        maker = threading.Thread(target=make, name="isotope-chroma-connect", daemon=True)
        maker.start()
        maker.join(self._timeout)
        if maker.is_alive():
            raise StoreError(f"{self.where} did not answer within {self._timeout:g} s "
                             "(the chroma_timeout setting); is it running?")
        if "error" in made:
            self._call(functools.partial(_raise, made["error"]))
        client = made["client"]
        session = getattr(getattr(client, "_server", None), "_session", None)
        if session is not None:  # (the client waits forever by default)
            import httpx

            session.timeout = httpx.Timeout(self._timeout)
        self._client = client
        return client

    def _call(self, call: Callable[[], Any]) -> Any:
        """``call()``, its failure one clear error naming the Chroma place (an embedded
        folder is not reopened meanwhile)."""
        try:
            if self._folder is None:
                return call()
            with self._folder.using():
                return call()
        except (StoreError, MissingDependency, InvalidArgument):
            raise
        except Exception as exc:
            name = type(exc).__name__
            timed_out = "Timeout" in name
            if self.place.url is not None:  # (connect again on the next call)
                self.close()
            raise StoreError(
                f"{self.where} " + (f"did not answer within {self._timeout:g} s" if timed_out
                                    else f"failed: {name}: {_short(exc)}")
                + "; nothing is lost: the index's pending vector writes are sent on the "
                "next write or by `isotope check --repair`") from exc

    def _on(self, kind: Kind, method: str, **arguments: Any) -> Any:
        """One call of a method of ``kind``'s collection (fetched inside the call: an
        embedded folder may have been reopened since)."""
        return self._call(lambda: getattr(self._collection(kind), method)(**arguments))

    def claim(self) -> None:
        """Make the collections of a new index (owned by it) before the index records
        where its vectors are: a prefix whose collections another index holds is refused
        (:class:`StoreError`), the collections made meanwhile deleted, so that nothing of
        the refused index is left on either side."""
        try:
            for kind in KINDS:
                self._collection(kind)
        except StoreError as exc:
            with contextlib.suppress(StoreError):
                self.drop()
            raise StoreError(f"{exc}; nothing was stored") from None

    def drop(self) -> None:
        """Delete the index's collections (the index is being removed; one another index
        owns is left alone)."""
        client = self._call(self._connect)
        for kind in KINDS:
            name = f"{self.place.prefix}-{kind}"
            try:
                found = client.get_collection(name)
            except Exception:  # (never made: nothing to delete)
                continue
            if (found.metadata or {}).get("isotope_index") == self.place.owner:
                self._call(functools.partial(client.delete_collection, name))
        self.close()

    def close(self) -> None:
        with self._lock:
            self._collections.clear()
            self._client = None
            if self._folder is not None:
                with _FOLDERS_LOCK:
                    self._folder.users -= 1
                    if self._folder.users <= 0:  # (the last user: Chroma lets it go)
                        _FOLDERS.pop(self._folder.key, None)
                        self._folder.reopen(None)
                self._folder = None

    def _fresh(self) -> None:
        """An embedded folder that another process sent to since this process's client
        read it is reopened (Chroma's graph in memory does not see another process's
        writes)."""
        if self.place.url is not None:
            return
        self._connect()
        folder, mark = self._folder, self._rows.sent()
        if folder is None or folder.mark == mark:
            return
        with folder.lock:  # (a send of this process first: its own mark)
            mark = self._rows.sent()
            if folder.mark != mark:
                log.debug("%s changed in another process: reopened", self.where)
                folder.reopen(mark)  # (this object's next call opens it: _collection)

    def _writing(self) -> contextlib.AbstractContextManager[Any]:
        """Held while this process writes to an embedded folder: another thread of it
        does not reopen the folder meanwhile."""
        self._connect()
        return self._folder.lock if self._folder is not None else contextlib.nullcontext()

    def _sent_here(self) -> None:
        """This process sent: its client holds what it sent (the mark is its own)."""
        if self._folder is not None:
            self._folder.mark = self._rows.sent()

    # -- sending the pending writes ------------------------------------------------------
    def pending(self, kind: Kind) -> Pending:
        """What the log holds for ``kind`` (see :class:`Pending`)."""
        return Pending.of(self._rows.log(kind))

    def log_size(self, kind: Kind) -> int:
        return self._rows.log_size(kind)

    def send(self) -> int:
        """Send every pending write to Chroma, then delete those log entries (the caller
        holds the lock that keeps other processes' sends out). Returns how many items were
        sent."""
        sent = 0
        with self._sending, self._writing():
            self._fresh()
            for kind in KINDS:
                rows = self._rows.log(kind)
                if not rows:
                    continue
                pending = Pending.of(rows)
                fresh, relabel = list(pending.adds), list(pending.relabeled)
                collection = self._collection(kind)
                about = self._rows.metadata(kind, fresh + relabel)
                self._delete(collection, list(pending.gone))
                self._upsert(collection, fresh, np.stack([pending.adds[i][1] for i in fresh])
                             if fresh else np.zeros((0, 0), np.float32),
                             [about.get(i) or {"chunk": pending.adds[i][0], "open": False}
                              for i in fresh])
                # (an item without its row any more: its last entry deletes it)
                relabel = [i for i in relabel if i in about]
                self._update(collection, relabel, [about[i] for i in relabel])
                self._rows.forget(kind, rows)
                self._sent_here()
                sent += len(pending.touched)
        return sent

    def _delete(self, collection: Any, items: Sequence[int]) -> None:
        for start in range(0, len(items), SEND):
            part = [str(i) for i in items[start:start + SEND]]
            self._call(functools.partial(collection.delete, ids=part))

    def _upsert(self, collection: Any, items: Sequence[int], vectors: Vectors,
                about: Sequence[dict[str, Any]]) -> None:
        for start in range(0, len(items), SEND):
            self._call(functools.partial(
                collection.upsert, ids=[str(i) for i in items[start:start + SEND]],
                embeddings=vectors[start:start + SEND],
                metadatas=list(about[start:start + SEND])))

    def _update(self, collection: Any, items: Sequence[int],
                about: Sequence[dict[str, Any]]) -> None:
        for start in range(0, len(items), SEND):
            self._call(functools.partial(
                collection.update, ids=[str(i) for i in items[start:start + SEND]],
                metadatas=list(about[start:start + SEND])))

    # -- reads -------------------------------------------------------------------------
    def search(self, kind: Kind, query: Vectors, k: int, filters: Sequence[Condition]
               ) -> list[tuple[int, int, float]]:
        """The ``k`` nearest items of ``kind`` meeting ``filters``: ``(item, chunk row,
        score)``, best first."""
        if k <= 0:
            return []
        self._fresh()
        pending = self.pending(kind)
        touched, adds = pending.touched, dict(pending.adds)
        if pending.relabeled:  # (their vectors from Chroma, their metadata from SQLite)
            adds.update(self._held_vectors(kind, pending.relabeled))
        found: list[tuple[int, int, float]] = []
        for where in self.where_of(filters):
            found += self._query(kind, query, k, where, touched, filters)
        if adds:
            items = list(adds)
            if filters:
                items = sorted(self._rows.meeting(kind, filters, items))
            if items:
                scores = dot(np.stack([adds[i][1] for i in items]), query)
                found += [(i, adds[i][0], float(s)) for i, s in zip(items, scores, strict=True)]
        found.sort(key=lambda hit: -hit[2])
        return found[:k]

    def _query(self, kind: Kind, query: Vectors, k: int, where: dict[str, Any] | None,
               touched: set[int], filters: Sequence[Condition]
               ) -> list[tuple[int, int, float]]:
        """Chroma's ``k`` nearest items under ``where``, those the log touches left out,
        each confirmed against the index's own rows (one indexed read of at most the
        items found): Chroma's copy of the access lists is another program's to change on
        a shared server, never trusted alone. Items it holds under metadata the index
        does not confirm are left out, and more are asked for in their place."""
        asked, left_out = k + len(touched), 0
        while True:
            reply = self._on(kind, "query",
                             query_embeddings=[np.asarray(query, dtype=np.float32)],
                             n_results=asked, where=where,
                             include=["distances"])  # (metadata would cost 4x the query)
            scored = [(int(i), 1.0 - float(d)) for i, d in zip(reply["ids"][0],
                                                              reply["distances"][0],
                                                              strict=True)
                      if int(i) not in touched]
            if filters and scored:
                meeting = self._rows.meeting(kind, filters, [i for i, _ in scored])
                left_out = len(scored) - len(meeting)
                scored = [(i, score) for i, score in scored if i in meeting]
            if len(scored) >= k or len(reply["ids"][0]) < asked or asked >= MAX_ASKED:
                break
            asked = min(MAX_ASKED, asked * 4)
        if left_out:
            log.warning("%d %s found in %s are not what its metadata says (their access "
                        "list, type or source was changed outside isotope): left out; "
                        "`isotope check --repair` writes them again", left_out, kind,
                        self.where)
        chunks = self._rows.chunk_rows(kind, [i for i, _ in scored])
        return [(i, chunks[i], score) for i, score in scored if i in chunks]

    def searching(self, kind: Kind, filters: Sequence[Condition]) -> _Searched:
        """:meth:`search` of ``kind`` with ``filters``, as
        :func:`isotope.ann.search_groups` widens it."""
        return _Searched(self, kind, filters)

    def _held_vectors(self, kind: Kind, items: set[int]) -> dict[int, tuple[int, Vectors]]:
        """The vectors Chroma holds for ``items``, with their chunk rows (the index's,
        never Chroma's metadata: see :meth:`_query`)."""
        reply = self._on(kind, "get", ids=[str(i) for i in items], include=["embeddings"])
        chunks = self._rows.chunk_rows(kind, [int(i) for i in reply["ids"]])
        return {int(i): (chunks[int(i)], np.asarray(vector, dtype=np.float32))
                for i, vector in zip(reply["ids"], reply["embeddings"], strict=True)
                if int(i) in chunks}

    def where_of(self, filters: Sequence[Condition]) -> list[dict[str, Any] | None]:
        """``filters`` as Chroma ``where`` clauses, one per search to run (their answers
        merged): none when nothing can match, ``[None]`` when there is no condition, more
        than one when the chunks meeting what Chroma cannot say are too many for one
        ``$in`` (:data:`IN_LIMIT`)."""
        clauses: list[dict[str, Any]] = []
        rest: list[Condition] = []
        for cond in filters:
            said = _said(cond)
            if said is NOTHING_SAID:
                return []
            if said is None:
                rest.append(cond)
            else:
                clauses.append(said)
        parts: list[list[dict[str, Any]]] = [clauses]
        if rest:  # (what Chroma cannot say: the chunks meeting it, from SQLite)
            rows = [int(r) for r in self._rows.chunks_meeting(rest)]
            if not rows:
                return []
            parts = [[*clauses, {"chunk": {"$in": rows[start:start + IN_LIMIT]}}]
                     for start in range(0, len(rows), IN_LIMIT)]
        return [None if not part else part[0] if len(part) == 1 else {"$and": part}
                for part in parts]

    def get(self, kind: Kind, rows: list[int]) -> dict[int, Vectors]:
        """The vectors of the items ``rows`` of ``kind`` (those that have one)."""
        if not rows:
            return {}
        self._fresh()
        pending = self.pending(kind)
        found = {i: pending.adds[i][1] for i in rows if i in pending.adds}
        # (Chroma holds the vectors of the items relabeled)
        asked = [str(i) for i in rows if i not in pending.touched - pending.relabeled]
        if asked:
            reply = self._on(kind, "get", ids=asked, include=["embeddings"])
            for item, vector in zip(reply["ids"], reply["embeddings"], strict=True):
                found[int(item)] = np.asarray(vector, dtype=np.float32)
        return found

    def _labels(self, kind: Kind) -> dict[int, dict[str, Any]]:
        """The metadata of every item of ``kind`` Chroma holds (without the pending
        writes)."""
        self._fresh()
        labels: dict[int, dict[str, Any]] = {}
        offset = 0
        while True:
            reply = self._on(kind, "get", include=["metadatas"], limit=10_000, offset=offset)
            for item, about in zip(reply["ids"], reply["metadatas"], strict=True):
                labels[int(item)] = dict(about or {})
            if len(reply["ids"]) < 10_000:
                break
            offset += 10_000
        return labels

    def held(self, kind: Kind, labels: dict[int, dict[str, Any]] | None = None
             ) -> tuple[Ids, Ids]:
        """Every item of ``kind`` Chroma holds with its chunk row, the log's pending writes
        applied (sorted by item); ``labels``: their metadata, if already read."""
        if labels is None:
            labels = self._labels(kind)
        items = {item: int(about.get("chunk", -1)) for item, about in labels.items()}
        pending = self.pending(kind)
        for item in pending.gone:
            items.pop(item, None)
        for item, (grp, _) in pending.adds.items():
            items[item] = grp
        ids = np.array(sorted(items), dtype=np.int64)
        return ids, np.array([items[int(i)] for i in ids], dtype=np.int64)

    def count(self, kind: Kind) -> int:
        return int(self._on(kind, "count"))

    # -- checks and repair ---------------------------------------------------------------
    def check(self, kind: Kind, table: tuple[Ids, Ids]) -> list[tuple[str, Ids]]:
        """The vectors of ``kind`` in Chroma (with the pending writes) against the table's
        ``(rowids, chunk rowids)``: each problem with the table rows it touches."""
        none = np.zeros(0, dtype=np.int64)
        try:
            labels = self._labels(kind)
            ids, groups = self.held(kind, labels)
        except StoreError as exc:
            return [(str(exc), none)]
        problems = compare(kind, table, (ids, groups), f" in {self.where}")
        wrong = self._mislabeled(kind, labels)
        if len(wrong):
            problems.append((
                f"{len(wrong)} vectors of {kind} in {self.where} carry another access list, "
                "type or source than the index's (changed outside isotope?): searches "
                "leave them out; `isotope check --repair` writes them again", wrong))
        return problems

    def _mislabeled(self, kind: Kind, labels: dict[int, dict[str, Any]]) -> Ids:
        """The items whose metadata in Chroma is not what the index says now (those the
        log is about to send again left out)."""
        touched = self.pending(kind).touched
        items = sorted(set(labels) - touched)
        wrong: list[int] = []
        for start in range(0, len(items), SEND):
            part = items[start:start + SEND]
            stored = self._rows.metadata(kind, part)
            wrong += [i for i in part if i in stored and any(
                labels[i].get(key) != value for key, value in stored[i].items())]
        return np.array(wrong, dtype=np.int64)

    def rebuild(self, kind: Kind, table: tuple[Ids, Ids],
                embed_rows: Callable[[Ids], Vectors] | None) -> int:
        """Make Chroma hold exactly the table's rows (the pending writes sent first by the
        caller): vectors belonging to no row deleted, rows without one (or filed under
        another chunk) embedded again with ``embed_rows`` (if given), every metadata
        sent again. Returns how many rows are left without a vector."""
        with self._writing():
            try:
                return self._rebuild(kind, table, embed_rows)
            finally:  # (other processes reopen an embedded folder)
                self._rows.forget(kind, [])
                self._sent_here()

    def _rebuild(self, kind: Kind, table: tuple[Ids, Ids],
                 embed_rows: Callable[[Ids], Vectors] | None) -> int:
        ids, groups = self.held(kind)
        rows, chunks = table
        collection = self._collection(kind)
        self._delete(collection, [int(i) for i in np.setdiff1d(ids, rows)])
        both, at_rows, at_ids = np.intersect1d(rows, ids, return_indices=True)
        wrong = both[chunks[at_rows] != groups[at_ids]] if len(both) else both
        lost = np.union1d(np.setdiff1d(rows, ids), wrong)
        kept = [int(i) for i in np.setdiff1d(both, wrong)]
        for start in range(0, len(kept), SEND):  # (their metadata, as SQLite has it now)
            about = self._rows.metadata(kind, kept[start:start + SEND])
            part = [i for i in kept[start:start + SEND] if i in about]
            self._update(collection, part, [about[i] for i in part])
        if embed_rows is None or not len(lost):
            return len(lost)
        for start in range(0, len(lost), SEND):
            part = [int(i) for i in lost[start:start + SEND]]
            about = self._rows.metadata(kind, part)
            self._upsert(collection, part,
                         np.asarray(embed_rows(lost[start:start + SEND]), dtype=np.float32),
                         [about.get(i) or {"chunk": int(chunks[np.searchsorted(rows, i)]),
                                           "open": False} for i in part])
        return 0


@dataclass
class _Folder:
    """The one Chroma client of an embedded folder in this process (Chroma keeps one
    system per folder), shared by every index object opened on it."""

    key: str
    mark: Any
    """The index's :meth:`Rows.sent` mark as of which the client read the folder."""
    client: Any = None
    users: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)
    """Held by a write of this process, and to reopen."""
    _calls: int = 0
    _idle: threading.Condition = field(default_factory=threading.Condition)

    @contextlib.contextmanager
    def using(self) -> Iterator[None]:
        """One call on the client (a reopen waits for the calls in flight)."""
        with self._idle:
            self._calls += 1
        try:
            yield
        finally:
            with self._idle:
                self._calls -= 1
                self._idle.notify_all()

    def reopen(self, mark: Any) -> None:
        """Let Chroma's client go, and its graph in memory with it, once no call is in
        flight; the next use opens the folder again (as of ``mark``)."""
        with self._idle:
            self._idle.wait_for(lambda: self._calls == 0)
            if self.client is not None:
                with contextlib.suppress(Exception):
                    self.client.close()
            self.client, self.mark = None, mark


_FOLDERS: dict[str, _Folder] = {}
_FOLDERS_LOCK = threading.Lock()


@dataclass
class Pending:
    """What the log holds for a kind, each item's entries folded in order: the items it
    touches, those it adds (their chunk row and vector: an add not deleted since; an
    access change after it keeps it an add), and those whose entries only change their
    metadata (Chroma holds their vector, under metadata that is out of date)."""

    touched: set[int]
    adds: dict[int, tuple[int, Vectors]]
    relabeled: set[int]

    @property
    def gone(self) -> set[int]:
        """The items whose last entry deletes them."""
        return self.touched - self.adds.keys() - self.relabeled

    @classmethod
    def of(cls, rows: Sequence[tuple[Any, ...]]) -> Pending:
        """Fold log rows ``(seq, item, group, vector)``: a vector adds, none deletes, an
        empty one changes the metadata only."""
        made = cls(set(), {}, set())
        for _, item, grp, vector in rows:
            item = int(item)
            made.touched.add(item)
            if vector is None:
                made.adds.pop(item, None)
                made.relabeled.discard(item)
            elif len(vector):
                made.adds[item] = (int(grp), _vector(vector))
                made.relabeled.discard(item)
            elif item not in made.adds:
                made.relabeled.add(item)
        return made


class _Searched:
    """A kind's Chroma search with its filters (:meth:`ChromaVectors.searching`)."""

    def __init__(self, vectors: ChromaVectors, kind: Kind, filters: Sequence[Condition]
                 ) -> None:
        self._vectors, self._kind, self._filters = vectors, kind, filters

    def search(self, query: Vectors, k: int, allowed: Ids | None = None
               ) -> list[tuple[int, int, float]]:
        return self._vectors.search(self._kind, query, k, self._filters)


NOTHING_SAID: dict[str, Any] = {"\x00nothing": True}
"""The clause of a condition nothing meets (a principal with no entry and no unlisted)."""


def _said(cond: Condition) -> dict[str, Any] | None:
    """One condition as a Chroma ``where`` clause, or None when Chroma cannot say it."""
    if cond.op not in ("eq",):
        return None
    values = list(cond.values)
    if cond.key == ACCESS_KEY:  # see isotope.access.condition
        unlisted, entries = bool(values[0]), [str(v) for v in values[1:]]
        said: list[dict[str, Any]] = [{"access": {"$contains": e}} for e in entries]
        if unlisted:
            said.append({"open": True})
        if not said:
            return NOTHING_SAID
        return said[0] if len(said) == 1 else {"$or": said}
    if cond.key == "source" and values and all(
            isinstance(v, str) and not any(c in v for c in "*?[") for v in values):
        return {"source": {"$in": [str(v) for v in values]}}
    if cond.key == "type" and values and all(isinstance(v, str) for v in values):
        return {"$or": [{"loader": {"$in": values}}, {"type": {"$in": values}}]}
    return None


def about(chunk: int, source: str, loader: str | None, kind_type: Any,
          access: list[Any] | None) -> dict[str, Any]:
    """An item's Chroma metadata: its chunk's row, its source, the source's loader and
    metadata ``type``, and its access list (``open`` when there is none). Every key is
    written, None where there is no value (Chroma's update keeps a key it is not given:
    a list taken away must not stay behind)."""
    return {"chunk": int(chunk), "source": str(source), "loader": str(loader or ""),
            "type": kind_type if isinstance(kind_type, str) else None,
            "open": access is None,
            "access": [str(e) for e in access] if access else None}


def _raise(error: BaseException) -> None:
    raise error


def _token_setting() -> str | None:
    """The ``chroma_token`` setting (environment, ``.env``), for a store opened without
    the settings (``isotope copy``)."""
    from isotope.errors import SettingsError
    from isotope.settings import resolve

    try:
        token = resolve(None)[0].chroma_token
    except SettingsError:
        return None
    return token.get_secret_value() if token is not None else None


def _vector(blob: bytes) -> Vectors:
    """A logged vector (the store logs float16)."""
    return np.frombuffer(blob, dtype=np.float16).astype(np.float32)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] + ("..." if len(text) > 200 else "")
