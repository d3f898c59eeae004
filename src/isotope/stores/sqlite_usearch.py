"""The embedded store's default vector place (``usearch``): each kind's vectors in exact
or HNSW segments in the index's ``vectors/`` folder, with the log of what changed since
(``vector_log``, written in the rows' transaction), compacted in the background by the
process that holds the writer lock (:class:`isotope.stores.sqlite_vectors.VectorStore`).
It also keeps the saved keyword postings of the large kinds."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from isotope.ann import Ids, Searchable
from isotope.embedders import Vectors
from isotope.errors import InvalidArgument
from isotope.models import Condition
from isotope.stores.records import KINDS, Kind
from isotope.stores.sqlite_keywords import KeywordLayer
from isotope.stores.sqlite_vectors import KEYWORD_POLICIES, POLICIES, VectorStore
from isotope.stores.vector_place import Table, VectorPlace


class SQLiteSide(Protocol):
    """What an embedded place reads of the SQLite store (:mod:`isotope.stores.sqlite`)."""

    directory: Path
    _writing: bool

    def _conn(self) -> sqlite3.Connection: ...
    def _write(self, *sources: str) -> AbstractContextManager[sqlite3.Connection]: ...
    def snapshot(self) -> AbstractContextManager[None]: ...
    def get_meta(self, key: str) -> Any: ...
    def _dim(self) -> int | None: ...
    def _chunks_meeting(self, filters: Sequence[Condition]) -> Ids: ...


class SegmentsPlace(VectorPlace):
    """The vectors in the index folder's segments (see the module's text)."""

    name = "usearch"

    def __init__(self, side: SQLiteSide, made: Mapping[str, Any] | None,
                 options: Mapping[str, Any]) -> None:
        super().__init__(side, made, options)
        self.side: SQLiteSide = side
        self.vectors = VectorStore(side.directory / "vectors", side._conn, side.snapshot,
                                   side.get_meta, side._dim)

    def tune(self, setting: str, value: Any) -> None:
        if setting == "vector_index":
            if value not in POLICIES:
                raise InvalidArgument(f"vector_index {value!r}: use one of "
                                      f"{', '.join(POLICIES)}")
            self.vectors.policy = value
        elif setting == "keyword_index":
            if value not in KEYWORD_POLICIES:
                raise InvalidArgument(f"keyword_index {value!r}: use one of "
                                      f"{', '.join(KEYWORD_POLICIES)}")
            self.vectors.keyword_policy = value

    def text_changed(self, conn: Any, chunk_rows: Sequence[int]) -> None:
        """A chunk not written in this transaction is logged with an empty vector (its
        text changed, not its vector), so that the saved keyword postings score it from
        its text until the next compaction."""
        conn.executemany("INSERT INTO vector_log(kind, item, grp, vector) VALUES "
                         "('chunks', ?, ?, X'')", [(row, row) for row in chunk_rows])

    def after_write(self) -> None:
        """Compact, in the background, the vectors of each kind whose log has grown, when
        this process holds the writer lock (a write without it leaves that to the next
        write, or to :meth:`compact`)."""
        if self.side._writing:
            for kind in KINDS:
                self.vectors.compact_later(kind, self.side._write)

    def settle(self) -> None:
        self.vectors.wait()

    def _allowed(self, filters: Sequence[Condition]) -> Ids | None:
        """The rowids of the chunks meeting ``filters``, sorted (None: no filter)."""
        return self.side._chunks_meeting(filters) if filters else None

    def searchable(self, kind: Kind, filters: Sequence[Condition]) -> Searchable:
        return _Allowed(self.vectors.index(kind), self._allowed(filters))

    def get(self, kind: Kind, rows: list[int]) -> dict[int, Vectors]:
        ids, vectors = self.vectors.index(kind).get(np.array(rows, dtype=np.int64))
        return dict(zip((int(i) for i in ids), vectors, strict=True))

    def count(self, kind: Kind) -> int:
        return len(self.vectors.index(kind).ids()[0])

    def keywords(self, kind: Kind) -> KeywordLayer | None:
        return self.vectors.keywords(kind)

    def check(self, kind: Kind, table: Table) -> list[tuple[str, Ids]]:
        return self.vectors.check(kind, table)

    def rebuild(self, kind: Kind, table: Table,
                embed_rows: Callable[[Ids], Vectors] | None) -> int:
        return self.vectors.rebuild(kind, self.side._write, table, embed_rows)

    def compact(self) -> dict[str, str]:
        """Fold each kind's log into a new base of the implementation the
        ``vector_index`` policy wants."""
        done: dict[str, str] = {}
        for kind in KINDS:
            self.vectors.compact(kind, self.side._write, force=True)
            done[kind] = str(self.vectors.bases().get(kind, {}).get("impl", "exact"))
        return done

    def tidy(self) -> None:
        """Replaced segment files past their retirement, a crash's leftovers, and the
        vector cache files of schema 4 and before."""
        self.vectors.remove_old_cache()
        self.vectors.remove_stale()

    def close(self) -> None:
        self.vectors.wait()  # (a background compaction finishes its work)


class _Allowed:
    """A kind's index searched among the items of some chunks only."""

    def __init__(self, index: Searchable, allowed: Ids | None) -> None:
        self._index, self._allowed = index, allowed

    def search(self, query: Vectors, k: int, allowed: Ids | None = None
               ) -> list[tuple[int, int, float]]:
        return self._index.search(query, k, self._allowed)
