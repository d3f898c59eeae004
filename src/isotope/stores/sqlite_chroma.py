"""The embedded store's vectors kept in Chroma (:class:`SQLiteChroma`, registered as the
``chroma`` place of ``sqlite``): a Chroma folder inside the index, or a server. Its rows
as Chroma reads them (:class:`SQLiteRows`, a :class:`isotope.stores.chroma_vectors.Rows`):
the ``vector_log`` table, read and emptied, and the rows Chroma's metadata and the
conditions it cannot say are read from. The pending writes are sent under the writer
lock."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from isotope.ann import Ids
from isotope.errors import IndexLocked
from isotope.models import Condition
from isotope.stores import KINDS, LOG_ONLY, Kind
from isotope.stores.chroma_place import Chroma
from isotope.stores.chroma_vectors import Rows, about
from isotope.stores.sqlite_schema import set_meta
from isotope.stores.sqlite_sql import ITEM_JOIN, where

SENT = "chroma_sent"
"""The meta key changed by each send to Chroma (:meth:`SQLiteRows.sent`)."""


class SQLiteRows:
    """What :class:`isotope.stores.chroma_vectors.ChromaVectors` reads of an embedded
    index. ``write``: a write transaction that leaves the index's state as it is (the
    log's entries are no change a search sees); ``chunks_meeting``: the store's (it keeps
    what a principal's searches ask again)."""

    def __init__(self, conn: Callable[[], sqlite3.Connection],
                 write: Callable[[], AbstractContextManager[sqlite3.Connection]],
                 chunks_meeting: Callable[[Sequence[Condition]], Ids]) -> None:
        self._conn, self._write = conn, write
        self.chunks_meeting = chunks_meeting

    def log(self, kind: Kind) -> list[tuple[Any, ...]]:
        return self._conn().execute(
            "SELECT seq, item, grp, vector FROM vector_log WHERE kind = ? ORDER BY seq",
            (kind,)).fetchall()

    def log_size(self, kind: Kind) -> int:
        return int(self._conn().execute(
            "SELECT COUNT(*) FROM vector_log WHERE kind = ?", (kind,)).fetchone()[0])

    def forget(self, kind: Kind, entries: Sequence[tuple[Any, ...]]) -> None:
        with self._write() as conn:
            if entries:  # (one writer: every entry up to the last one read was read)
                conn.execute("DELETE FROM vector_log WHERE kind = ? AND seq <= ?",
                             (kind, int(entries[-1][0])))
            set_meta(conn, SENT, uuid.uuid4().hex)

    def sent(self) -> Any:
        found = self._conn().execute("SELECT value FROM meta WHERE key = ?",
                                     (SENT,)).fetchone()
        return found[0] if found else None

    def chunk_rows(self, kind: Kind, items: list[int]) -> dict[int, int]:
        if kind == "chunks" or not items:
            return {i: i for i in items}
        item, join = ITEM_JOIN[kind]
        return {int(r[0]): int(r[1]) for r in self._conn().execute(
            f"SELECT {item}, c.rowid FROM chunks c{join} WHERE {item} IN "
            f"({','.join('?' * len(items))})", items)}

    def metadata(self, kind: Kind, items: list[int]) -> dict[int, dict[str, Any]]:
        found: dict[int, dict[str, Any]] = {}
        item, join = ITEM_JOIN[kind]
        for start in range(0, len(items), 900):
            part = items[start:start + 900]
            marks = ",".join("?" * len(part))
            for row, chunk, uri, loader, kind_type, access in self._conn().execute(
                    f"SELECT {item}, c.rowid, s.uri, s.loader, json_extract(s.metadata, "
                    f"'$.type'), s.access FROM chunks c JOIN sources s ON s.uri = c.source"
                    f"{join} WHERE {item} IN ({marks})", part):
                found[int(row)] = about(chunk, uri, loader, kind_type,
                                        json.loads(access) if access is not None else None)
        return found

    def meeting(self, kind: Kind, filters: Sequence[Condition], items: list[int]
                ) -> set[int]:
        clause, params = where(filters)
        marks = ",".join("?" * len(items))
        item, join = ITEM_JOIN[kind]  # (plain joins: from the items given, not every chunk)
        return {int(r[0]) for r in self._conn().execute(
            f"SELECT {item} FROM sources s JOIN chunks c ON c.source = s.uri{join} "
            f"WHERE {item} IN ({marks}) AND {clause}", [*items, *params])}

    @staticmethod
    def relabel(conn: sqlite3.Connection, uris: Sequence[str]) -> None:
        """Log again (an entry with an empty vector: their metadata only) the items of
        sources whose access lists changed, in the transaction that changed them."""
        marks = ",".join("?" * len(uris))
        for kind in KINDS:
            item, join = ITEM_JOIN[kind]
            conn.execute(
                f"INSERT INTO vector_log(kind, item, grp, vector) SELECT '{kind}', {item}, "
                f"c.rowid, X'' FROM chunks c{join} WHERE c.source IN ({marks})", list(uris))


class SQLiteChroma(Chroma):
    """The embedded store's vectors in Chroma (see the module's text)."""

    def _rows(self) -> Rows:
        side = self.side
        return SQLiteRows(side._conn, lambda: side._write(LOG_ONLY), side._chunks_meeting)

    def _folder(self) -> Path:
        return Path(self.side.directory) / "chroma"

    def relabel(self, conn: Any, uris: Sequence[str]) -> None:
        """The items of sources whose access list changed are logged again, so that their
        metadata (who may see them) is sent with the next write."""
        SQLiteRows.relabel(conn, uris)

    def after_write(self) -> None:
        """Send the pending writes under the writer lock (taken if free)."""
        if self.side._writing:
            self.send()
        else:
            with contextlib.suppress(IndexLocked), self.side.writer():
                self.send()
