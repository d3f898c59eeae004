"""An index in PostgreSQL whose vectors a Chroma server keeps
(``vector_backend = chroma+http://HOST:PORT/PREFIX``): the place (:class:`PostgresChroma`,
registered as the ``chroma`` place of ``postgres``) and PostgreSQL's rows as Chroma reads
them (:class:`PostgresRows`, a :class:`isotope.stores.chroma_vectors.Rows`).

As in the embedded store, the rows and their vectors are written in one transaction:
the vectors into ``vector_log`` (float16), the rows' ``vector`` columns left NULL (no
pgvector index is made); a trigger logs each deleted item (cascades included). After the
write, the process that holds the index's send lock (a PostgreSQL advisory lock: one
sender at a time, whatever the number of writers) sends the log to Chroma and deletes
the entries it sent: by their numbers, not up to the last one, since a writer that
committed later may hold smaller ones. An embedded Chroma folder is refused: it would
live on one client machine while the rows live on the server."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from isotope.ann import Ids
from isotope.embedders import Vectors
from isotope.errors import IndexLocked, InvalidArgument
from isotope.models import Condition
from isotope.stores import KINDS, Kind, VectorBackend
from isotope.stores.chroma_place import Chroma
from isotope.stores.chroma_vectors import Rows, about
from isotope.stores.postgres_sql import where
from isotope.stores.vector_place import Table

if TYPE_CHECKING:
    import psycopg

    from isotope.stores.postgres_vectors import PostgresSide

_JOIN: dict[Kind, tuple[str, str]] = {
    "questions": ("t.row", " JOIN questions t ON t.chunk_id = c.id"),
    "atoms": ("t.row", " JOIN atoms t ON t.chunk_id = c.id"),
    "chunks": ("c.row", ""),
}
"""For each kind, its items' row and the join that reaches them from chunks ``c``."""


def prepare(conn: psycopg.Connection[Any], schema: str) -> None:
    """Make an empty index keep its vectors in Chroma: the log, its delete triggers, the
    ``vector`` columns left empty and their pgvector indexes dropped (in the caller's
    transaction)."""
    conn.execute("CREATE TABLE IF NOT EXISTS vector_log (seq bigint GENERATED ALWAYS AS "
                 "IDENTITY PRIMARY KEY, kind text NOT NULL, item bigint NOT NULL, grp bigint, "
                 "vector bytea)")
    conn.execute("CREATE INDEX IF NOT EXISTS vector_log_kind ON vector_log(kind, seq)")
    conn.execute(
        f'CREATE OR REPLACE FUNCTION "{schema}".isotope_vector_gone() RETURNS trigger '
        f"LANGUAGE plpgsql AS $$ BEGIN INSERT INTO \"{schema}\".vector_log(kind, item) "
        "SELECT TG_ARGV[0], g.row FROM gone g; RETURN NULL; END $$")
    for kind in KINDS:
        conn.execute(f"ALTER TABLE {kind} ALTER COLUMN vector DROP NOT NULL")
        conn.execute(f'DROP INDEX IF EXISTS "{schema}".{kind}_hnsw')  # (qualified: see
        conn.execute(f'DROP INDEX IF EXISTS "{schema}".{kind}_diskann')  # bulk())
        # (dropped and made: PostgreSQL 13 has no CREATE OR REPLACE TRIGGER)
        conn.execute(f"DROP TRIGGER IF EXISTS {kind}_vector_gone ON {kind}")
        conn.execute(f"CREATE TRIGGER {kind}_vector_gone AFTER DELETE ON {kind} "
                     f"REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION "
                     f"\"{schema}\".isotope_vector_gone('{kind}')")


def log_rows(conn: psycopg.Connection[Any], kind: Kind, rows: Sequence[int],
             chunk_rows: Sequence[int | None], vectors: Any) -> None:
    """Log the vectors of rows just inserted (float16, as the embedded store logs them)."""
    with conn.cursor().copy("COPY vector_log (kind, item, grp, vector) FROM STDIN") as copy:
        for row, grp, vector in zip(rows, chunk_rows, vectors, strict=True):
            copy.write_row((kind, row, row if kind == "chunks" else grp,
                            np.asarray(vector, dtype=np.float16).tobytes()))


def relabel(conn: psycopg.Connection[Any], uris: Sequence[str]) -> None:
    """Log again (an empty vector: their metadata only) the items of sources whose access
    lists changed, in the transaction that changed them."""
    for kind in KINDS:
        item, join = _JOIN[kind]
        conn.execute(f"INSERT INTO vector_log(kind, item, grp, vector) SELECT %s, {item}, "
                     f"c.row, ''::bytea FROM chunks c{join} WHERE c.source = ANY(%s)",
                     (kind, list(uris)))


class PostgresRows:
    """What :class:`isotope.stores.chroma_vectors.ChromaVectors` reads of an index in
    PostgreSQL (always its primary: the log is what was just written)."""

    def __init__(self, store: PostgresSide) -> None:
        self._store = store

    def _read(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        return self._store._rows(sql, params)  # (the store's own reads)

    def log(self, kind: Kind) -> list[tuple[Any, ...]]:
        return self._read("SELECT seq, item, grp, vector FROM vector_log WHERE kind = %s "
                          "ORDER BY seq", (kind,))

    def log_size(self, kind: Kind) -> int:
        return int(self._read("SELECT count(*) FROM vector_log WHERE kind = %s",
                              (kind,))[0][0])

    def forget(self, kind: Kind, entries: Sequence[tuple[Any, ...]]) -> None:
        if entries:  # (by number: a writer committing later may hold smaller ones)
            with self._store._write() as conn:
                conn.execute("DELETE FROM vector_log WHERE seq = ANY(%s)",
                             ([int(e[0]) for e in entries],))

    def sent(self) -> Any:
        return None  # (every process reads the one server)

    def chunk_rows(self, kind: Kind, items: list[int]) -> dict[int, int]:
        if kind == "chunks" or not items:
            return {i: i for i in items}
        return {int(r[0]): int(r[1]) for r in self._read(
            f"SELECT t.row, c.row FROM {kind} t JOIN chunks c ON c.id = t.chunk_id "
            "WHERE t.row = ANY(%s)", (items,))}

    def metadata(self, kind: Kind, items: list[int]) -> dict[int, dict[str, Any]]:
        item, join = _JOIN[kind]
        return {int(row): about(chunk, uri, loader, kind_type, access)
                for row, chunk, uri, loader, kind_type, access in self._read(
                    f"SELECT {item}, c.row, s.uri, s.loader, CASE WHEN jsonb_typeof("
                    "s.metadata -> 'type') = 'string' THEN s.metadata ->> 'type' END, "
                    f"s.access FROM chunks c JOIN sources s ON s.uri = c.source{join} "
                    f"WHERE {item} = ANY(%(items)s)", {"items": items})}

    def meeting(self, kind: Kind, filters: Sequence[Condition], items: list[int]
                ) -> set[int]:
        clause, values = where(filters)
        item, join = _JOIN[kind]
        return {int(r[0]) for r in self._read(
            f"SELECT {item} FROM sources s JOIN chunks c ON c.source = s.uri{join} "
            f"WHERE {item} = ANY(%s) AND {clause}", [items, *values])}

    def chunks_meeting(self, filters: Sequence[Condition]) -> Ids:
        clause, values = where(filters)
        return np.sort(np.fromiter((r[0] for r in self._read(
            f"SELECT c.row FROM sources s JOIN chunks c ON c.source = s.uri WHERE {clause}",
            values)), dtype=np.int64))


class PostgresChroma(Chroma):
    """The PostgreSQL store's vectors in a Chroma server (see the module's text): sent
    by one process at a time, the holder of the index's send lock."""

    def _rows(self) -> Rows:
        return PostgresRows(self.side)

    @classmethod
    def new(cls, side: Any, backend: VectorBackend) -> dict[str, Any]:
        if backend.name == cls.name:
            raise InvalidArgument(
                f"vector_backend = chroma keeps a Chroma folder inside an embedded index; "
                f"{side.where} is on a server: give a Chroma server, "
                "chroma+http://HOST:PORT/PREFIX (or leave vector_backend = usearch: "
                "pgvector keeps the vectors)")
        return super().new(side, backend)

    def prepare(self, conn: Any) -> None:
        prepare(conn, self.side.schema)

    def add(self, conn: Any, kind: Kind, rows: Sequence[int],
            groups: Sequence[int | None], vectors: Vectors) -> None:
        log_rows(conn, kind, rows, groups, vectors)

    def relabel(self, conn: Any, uris: Sequence[str]) -> None:
        relabel(conn, uris)

    def after_write(self, wait: float = 0.0) -> None:
        """Send the pending vector writes to Chroma, holding the index's send lock (one
        sender at a time). When another process holds it, that one sends these too: a
        sender looks at the log again after letting the lock go, and takes it again while
        entries wait (a writer commits before it tries the lock, so none is stranded)."""
        while True:
            try:
                with self.still(wait):
                    while self.send():
                        pass
            except IndexLocked:
                return  # (the holder sends them)
            if not self.side._rows("SELECT EXISTS (SELECT 1 FROM vector_log)")[0][0]:
                return

    def still(self, wait: float) -> AbstractContextManager[None]:
        """The index's send lock: one process at a time sends to Chroma."""
        side = self.side
        lock: AbstractContextManager[None] = side._advisory(
            f"isotope-chroma:{side.schema}", wait, shared=False, busy=(
                f"{side.where}: another process is sending vectors to Chroma; try again "
                "when it is done (or pass --wait SECONDS)"))
        return lock

    def repair(self, table_rows: Callable[[Kind], Table],
               embed_rows: Callable[[Kind], Callable[[Ids], Vectors] | None]) -> None:
        with self.still(60.0):  # (no other sender while Chroma is mended)
            while self.send():
                pass
            for kind in KINDS:
                self.rebuild(kind, table_rows(kind), embed_rows(kind))
