"""The embedded default store: one directory holding a SQLite database (WAL mode).

SQLite is the source of truth for sources, chunks, atoms, questions and their vectors;
FTS5 tables (kept in step by triggers) serve keyword search. Vector search goes to the
vector place the index names (:mod:`isotope.stores.vector_place`), handed each write's
vectors in its transaction. Its parts: connections, the writer lock and
errors (``sqlite_connection``), the schema's numbered steps (``sqlite_schema``), filters
as SQL (``sqlite_sql``) and the integrity check (``sqlite_check``); the writes and reads
it shares with the PostgreSQL store are :mod:`isotope.stores.sql_core`. What is left here
is this engine's own: its transactions, rows numbered before they are written and their
vectors logged (``vector_log``, what a place reads its pending writes from), keyword
search, and handing search, compaction and repair to its place.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from isotope.ann import search_groups
from isotope.embedders import Embedder, Vectors
from isotope.errors import (
    IndexDamaged,
    IndexLocked,
    InvalidIndex,
    StoreError,
)
from isotope.models import Condition
from isotope.stores import (
    KINDS,
    LOG_ONLY,
    SCHEMA_VERSION,
    Hit,
    Inspection,
    Kind,
    VectorBackend,
)
from isotope.stores.keywords import query_words
from isotope.stores.sql_core import SQLStore
from isotope.stores.sql_dialect import SQLITE
from isotope.stores.sql_graph import GRAPH_TABLES
from isotope.stores.sqlite_check import inspect
from isotope.stores.sqlite_connection import (
    DB_NAME,
    connect,
    guarded,
    release,
    store_error,
    writable,
    write_lock,
)
from isotope.stores.sqlite_keywords import KeywordLayer
from isotope.stores.sqlite_schema import schema_version, set_meta, upgrade
from isotope.stores.sqlite_sql import where
from isotope.stores.vector_place import VectorPlace, chosen, is_default, open_place

log = logging.getLogger(__name__)


class SQLiteStore(SQLStore):
    """An index in a directory: ``isotope.db`` plus its vector place."""

    dialect = SQLITE
    conditions_sql = staticmethod(where)

    def __init__(self, directory: str | Path, *, create: bool = True) -> None:
        self.directory = Path(directory)
        self.where = str(self.directory)
        db = self.directory / DB_NAME
        if not db.exists():
            if not create:
                raise InvalidIndex(
                    f"no index at {self.directory}; create one with `isotope ingest` "
                    "or pass another --index"
                )
            if self.directory.exists() and not self.directory.is_dir():
                raise InvalidIndex(f"{self.directory} is a file, not an index directory")
            self.directory.mkdir(parents=True, exist_ok=True)
        elif not create and db.stat().st_size == 0:  # SQLite would write a header in it
            raise InvalidIndex(f"{db} is not an isotope index (it is empty); give the right "
                               "--index, or delete the file and ingest again")
        self._local = threading.local()
        self._meeting: dict[tuple[Any, ...], tuple[Any, npt.NDArray[np.int64]]] = {}
        """Rows meeting some filters, with the index's state they were read at."""
        self._tuned: dict[str, Any] = {}
        """The settings given to the place (given again to a place chosen later)."""
        self._writing = False
        """This process holds the writer lock (writes may then compact the vectors)."""
        self.read_only = not writable(self.directory, db)
        conn = self._conn()
        version = self._schema_version(conn)
        if version is None and (not create or self.read_only):
            raise InvalidIndex(
                f"{db} is not an isotope index (it is empty or has no isotope tables); "
                "give the right --index, or delete the file and ingest again")
        if (version or 0) < SCHEMA_VERSION and not self.read_only:
            upgrade(conn)  # a new index from step 1, an older one from its next step
        elif version != SCHEMA_VERSION:
            raise InvalidIndex(
                f"{self.directory} has index schema {version}; this isotope reads schema "
                f"{SCHEMA_VERSION}. Upgrade isotope, or re-ingest into a new index"
                + (" (the index is read-only, so it cannot be migrated in place)"
                   if self.read_only and (version or 0) < SCHEMA_VERSION else "")
            )
        made = self.get_meta("vector_backend")
        # (an index made with another place reads it however it is opened: the place's
        # settings come with set_vector_backend)
        self._place: VectorPlace = open_place("sqlite", self, made if isinstance(made, dict)
                                              else None)
        if not self.read_only and self.get_meta("state") is None:
            self.set_meta("state", uuid.uuid4().hex)
        if not self.read_only:
            try:  # what the place left behind (a crash's leftovers, files past their use)
                self._place.tidy()
            except OSError:
                log.info("tidying %s failed", self.directory, exc_info=True)

    # -- connections -------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            db = self.directory / DB_NAME
            try:
                conn = connect(db, self.read_only)
            except sqlite3.DatabaseError as exc:
                if _disk_full(self.directory):  # the -wal and -shm files cannot be made
                    raise StoreError(
                        f"the disk holding {self.directory} is full ({exc}): the index "
                        "cannot be opened until some space is freed; nothing was "
                        "changed") from exc
                raise IndexDamaged(
                    f"{db} is not a readable isotope index ({exc}): it is damaged or not an "
                    "index; ingest the sources again into a new index") from exc
            self._local.conn = conn
        return conn

    @staticmethod
    def _schema_version(conn: sqlite3.Connection) -> int | None:
        try:
            return schema_version(conn)
        except sqlite3.DatabaseError as exc:
            raise InvalidIndex(f"not a readable isotope index ({exc})") from exc

    @contextmanager
    def _write(self, *sources: str) -> Iterator[sqlite3.Connection]:
        """A write transaction that gives the index a new state id (the writer lock is
        :meth:`writer`'s, whatever ``sources`` it touches). If it fails, nothing of it is
        stored, and the error that made it fail is the one raised (SQLite may
        already have rolled back, e.g. when the disk is full)."""
        if self.read_only:
            raise StoreError(f"the index at {self.directory} is read-only; copy it to a "
                             "writable folder to change it")
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                if LOG_ONLY not in sources:
                    set_meta(conn, "state", uuid.uuid4().hex)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        log.debug("rollback failed", exc_info=True)
                raise
        except sqlite3.DatabaseError as exc:
            raise store_error(self.directory / DB_NAME, exc) from exc

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction: every read inside sees the same committed state."""
        conn = self._conn()
        if conn.in_transaction:
            yield
            return
        try:
            conn.execute("BEGIN")
        except sqlite3.DatabaseError as exc:
            raise store_error(self.directory / DB_NAME, exc) from exc
        try:
            yield
        finally:
            if conn.in_transaction:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error:  # ending a read: nothing to lose
                    log.debug("ending a read transaction failed", exc_info=True)

    @contextmanager
    def writer(self, wait: float = 0.0) -> Iterator[None]:
        """The single-writer lock: an advisory lock on ``write.lock`` in the index
        directory, released by the system if the process dies."""
        if self.read_only:
            raise StoreError(f"the index at {self.directory} is read-only; copy it to a "
                             "writable folder to change it")
        with write_lock(self.directory, wait):
            self._writing = True
            try:
                yield
            finally:
                self._writing = False

    def close(self) -> None:
        self._place.close()  # (a background compaction finishes its work)
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- meta --------------------------------------------------------------------------

    @guarded
    def set_meta(self, key: str, value: Any) -> None:
        set_meta(self._conn(), key, value)

    # -- writes (the algorithms are sql_core's) ------------------------------------------
    def _add_rows(self, conn: sqlite3.Connection, kind: Kind, columns: str,
                  values: list[tuple[Any, ...]], vectors: Vectors,
                  chunk_rows: Sequence[int | None], texts: Sequence[str]) -> list[int]:
        """Rows numbered here, so that their vectors are logged with them (the vector
        files are made from the log); FTS5's triggers index their words."""
        rows = self._next_rowids(conn, kind, len(values))
        marks = ", ".join("?" * len(columns.split(",")))
        conn.executemany(f"INSERT INTO {kind}(rowid, {columns}, vector) VALUES (?, {marks}, "
                         "X'')", [(r, *v) for r, v in zip(rows, values, strict=True)])
        self._place.add(conn, kind, rows, chunk_rows, vectors)
        return list(rows)

    @staticmethod
    def _log_vectors(conn: sqlite3.Connection, kind: Kind, rows: Sequence[int],
                     chunk_rows: Sequence[int | None], vectors: Vectors) -> None:
        """Log the vectors of rows just written (a place's pending writes: see
        :meth:`isotope.stores.vector_place.VectorPlace.add`)."""
        conn.executemany(
            "INSERT INTO vector_log(kind, item, grp, vector) VALUES (?, ?, ?, ?)",
            [(kind, r, r if kind == "chunks" else grp, _blob(v))
             for r, grp, v in zip(rows, chunk_rows, vectors, strict=True)])

    def _set_questions_text(self, conn: sqlite3.Connection,
                            changed: list[tuple[int, str, str | None, bool | None]], *,
                            logged: bool) -> None:
        """FTS5's trigger indexes the new text; the place is told of the chunks not
        written in this transaction (its keyword postings, if it keeps some)."""
        texts = [(text, row) for row, text, keywords, _ in changed if keywords is not None]
        conn.executemany("UPDATE chunks SET questions_text = ? WHERE rowid = ?", texts)
        conn.executemany("UPDATE chunks SET enriched = ? WHERE rowid = ?",
                         [(flag, row) for row, _, _, flag in changed if flag is not None])
        if not logged:
            self._place.text_changed(conn, [row for _, row in texts])

    @staticmethod
    def _next_rowids(conn: sqlite3.Connection, table: str, count: int) -> range:
        top = conn.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {table}").fetchone()[0]
        return range(top + 1, top + 1 + count)

    @guarded
    def _after_write(self) -> None:
        """The place's pending writes (a background compaction, a send)."""
        self._place.after_write()

    def settle(self) -> None:
        self._place.settle()

    # -- where the vectors are kept ----------------------------------------------------
    def set_vector_backend(self, backend: VectorBackend) -> str:
        """The place the setting names (:mod:`isotope.stores.vector_place`) for a new
        index, once it has claimed what it holds (a collection another index uses is
        refused before anything is written); an index keeps the place it was made with
        (:meth:`fixed_settings`). Sends the vector writes a crash left pending when the
        writer lock is free."""
        place = chosen("sqlite", backend)
        made = self.get_meta("vector_backend")
        if (made is None and not is_default("sqlite", place.name) and not self.read_only
                and not self._rows("SELECT 1 FROM sources LIMIT 1")):
            new = place.new(self, backend)
            claimed = place(self, new, backend.options)
            try:
                claimed.claim()
                self.set_meta("vector_backend", new)
            except BaseException:
                claimed.close()
                raise
            self._use(claimed)
        elif isinstance(made, dict):
            self._use(open_place("sqlite", self, made, backend.options))
        if self._place.made and not self.read_only and any(self._place.pending(k)
                                                           for k in KINDS):
            try:  # (what a crash left pending, when no other process writes)
                with self.writer():
                    self._place.send()
            except (StoreError, IndexLocked) as exc:
                log.warning("%s", exc)
        return self._place.setting

    def _access_changed(self, conn: sqlite3.Connection, uris: Sequence[str]) -> None:
        """The place is told (one that keeps who may see beside the vectors)."""
        self._place.relabel(conn, uris)

    def set_vector_index(self, policy: str) -> None:
        self._place.tune("vector_index", policy)
        self._tuned["vector_index"] = policy

    def set_keyword_index(self, policy: str) -> None:
        self._place.tune("keyword_index", policy)
        self._tuned["keyword_index"] = policy

    @guarded
    def compact(self) -> dict[str, str]:
        """Fold the pending vector writes into the place (new bases of the implementation
        the ``vector_index`` policy wants), and give freed pages back. Returns what holds
        each kind. Run it under the writer lock."""
        self._place.settle()
        done = self._place.compact()
        if not self.read_only:
            conn = self._conn()
            release(conn)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._place.tidy()
        return done

    def _dim(self) -> int | None:
        dim = (self.get_meta("embedding") or {}).get("dim")
        return int(dim) if dim else None

    # -- reads -------------------------------------------------------------------------
    @guarded
    def search(self, kind: Kind, vector: Vectors, k: int,
               filters: Sequence[Condition] = ()) -> list[Hit]:
        return self._hits(kind, self._place.search(kind, vector, k, filters))

    @guarded
    def search_by_chunk(
        self, kind: Kind, vector: Vectors, k: int, per_chunk: int = 3,
        filters: Sequence[Condition] = (),
    ) -> list[tuple[str, list[Hit]]]:
        if k <= 0:
            return []
        groups = search_groups(self._place.searchable(kind, filters), vector, k, per_chunk)
        hits = self._hits(kind, [hit for _, found in groups for hit in found])
        by_chunk: dict[str, list[Hit]] = {}
        for hit in hits:
            by_chunk.setdefault(hit.chunk_id, []).append(hit)
        return list(by_chunk.items())

    def _chunks_meeting(self, filters: Sequence[Condition]) -> npt.NDArray[np.int64]:
        return self._rows_meeting("chunks", filters)

    def _rows_meeting(self, kind: Kind, filters: Sequence[Condition]
                      ) -> npt.NDArray[np.int64]:
        """The rowids (sorted) of the items of ``kind`` whose chunks meet ``filters``,
        kept until the index next changes (a principal's searches ask the same again):
        read source first (its conditions, an access list's among them, tested once per
        source), then its chunks and their items through their indexes."""
        state = self.get_meta("state")
        key = (kind, tuple(filters))
        known = self._meeting.get(key)
        if known is not None and known[0] == state:
            return known[1]
        clause, params = where(filters)
        items = ("" if kind == "chunks" else
                 f" CROSS JOIN {kind} t ON t.chunk_id = c.id")
        found = np.sort(np.fromiter(
            (r[0] for r in self._conn().execute(
                f"SELECT {'c' if kind == 'chunks' else 't'}.rowid FROM sources s CROSS JOIN "
                f"chunks c ON c.source = s.uri{items} WHERE {clause}", params)),
            dtype=np.int64))
        if len(self._meeting) >= 64:
            self._meeting.clear()
        self._meeting[key] = (state, found)
        return found

    @guarded
    def keyword_search(self, kind: Kind, query: str, k: int,
                       filters: Sequence[Condition] = ()) -> list[Hit]:
        words = query_words(query)
        if not words or k <= 0:
            return []
        postings = self._place.keywords(kind)
        if postings is not None:  # the saved postings (large kinds): FTS5's ranking
            # (with filters, among the rows that meet them: a condition, not a cut)
            allowed = self._rows_meeting(kind, filters) if filters else None
            scored = postings.search(words, k, allowed)
            if scored is not None:
                return self._hits(kind, scored)
        match = " OR ".join(f'"{t}"' for t in words)
        restrict, params = "", list[Any]()
        if filters:
            clause, params = where(filters)
            join = "c.id = t.chunk_id" if kind != "chunks" else "c.rowid = t.rowid"
            restrict = (f" AND rowid IN (SELECT t.rowid FROM {kind} t JOIN chunks c ON {join}"
                        f" JOIN sources s ON s.uri = c.source WHERE {clause})")
        found = self._conn().execute(
            f"SELECT rowid, bm25({kind}_fts) FROM {kind}_fts WHERE {kind}_fts MATCH ?"
            f"{restrict} ORDER BY bm25({kind}_fts), rowid LIMIT ?",
            (match, *params, k),
        ).fetchall()
        return self._hits(kind, [(int(r), -float(s)) for r, s in found])

    def keyword_layer(self, kind: Kind) -> KeywordLayer | None:
        """The saved keyword postings ``kind`` is searched with (None: FTS5 answers)."""
        keywords: KeywordLayer | None = self._place.keywords(kind)
        return keywords

    @guarded
    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._conn().execute(sql, params).fetchall()

    @guarded
    def _vectors_of(self, kind: Kind, rows: list[int]) -> dict[int, Vectors]:
        if not rows:
            return {}  # (without loading the kind's vectors)
        return self._place.get(kind, rows)

    def inspect(self) -> Inspection:
        """See :func:`isotope.stores.sqlite_check.inspect`."""
        found = inspect(self._conn(), self.snapshot, self._place,
                        self.table_rows, self._lost_rows, read_only=self.read_only,
                        db=self.directory / DB_NAME)
        if not found.storage_damaged:
            found.problems += self._keyword_drift()  # (one read)
        return found

    def repair(self, embed: Embedder | None = None) -> None:
        """Rebuild the keyword indexes (each chunk's questions' text written again from its
        questions), drop orphan rows that no source owns, and have the place rebuild
        each kind's vectors to hold exactly its rows: those without a readable vector are
        embedded again from their text with ``embed`` (without it, they stay missing and
        `check` names them). Sources that lost rows are for the caller to ingest again or
        remove (:meth:`damaged_sources`)."""
        with self._write() as conn:
            conn.execute("DELETE FROM chunks WHERE source NOT IN (SELECT uri FROM sources)")
            conn.execute("DELETE FROM atoms WHERE chunk_id NOT IN (SELECT id FROM chunks)")
            conn.execute("DELETE FROM questions WHERE atom_id NOT IN (SELECT id FROM atoms) "
                         "OR chunk_id NOT IN (SELECT id FROM chunks)")
            for table in ("dropped_questions", *GRAPH_TABLES):
                conn.execute(f"DELETE FROM {table} WHERE chunk_id NOT IN (SELECT id FROM chunks)")
            self._expand_all(conn)
            for kind in KINDS:
                conn.execute(f"INSERT INTO {kind}_fts({kind}_fts) VALUES ('rebuild')")
        self._place.repair(self.table_rows, lambda kind: None if embed is None
                           else partial(self._embed_rows, kind, embed))

    def disk_size(self) -> int:
        return sum(p.stat().st_size for p in self.directory.rglob("*") if p.is_file())


def _blob(vector: Vectors) -> bytes:
    """A logged vector: float16 (half the bytes to write; the HNSW index keeps int8, and
    float16 changes a cosine by less than 0.001)."""
    return np.asarray(vector, dtype=np.float16).tobytes()


def _disk_full(folder: Path) -> bool:
    """Whether the file system holding ``folder`` has (almost) no space left."""
    import shutil

    try:
        return shutil.disk_usage(folder).free < 256 * 1024
    except OSError:
        return False
