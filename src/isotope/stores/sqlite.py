"""The embedded default store: one directory holding a SQLite database (WAL mode).

SQLite is the source of truth for sources, chunks, atoms, questions and their vectors;
FTS5 tables (kept in step by triggers) serve keyword search. Vector search goes to one
vector index per kind (``sqlite_vectors``). Its parts: connections, the writer lock and
errors (``sqlite_connection``), the schema's numbered steps (``sqlite_schema``), filters
as SQL (``sqlite_sql``) and the integrity check (``sqlite_check``); the writes and reads
it shares with the PostgreSQL store are :mod:`isotope.stores.sql_core`. What is left here
is this engine's own: its transactions, rows numbered before they are written and their
vectors logged, vector and keyword search, compaction and repair.
"""

from __future__ import annotations

import contextlib
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
    InvalidArgument,
    InvalidIndex,
    StoreError,
)
from isotope.models import Condition
from isotope.settings import is_vector_backend
from isotope.stores import (
    KINDS,
    LOG_ONLY,
    SCHEMA_VERSION,
    Hit,
    Inspection,
    Kind,
    VectorBackend,
)
from isotope.stores.chroma_vectors import ChromaPlace, ChromaVectors, place_of
from isotope.stores.keywords import query_words
from isotope.stores.sql_core import SQLStore
from isotope.stores.sql_dialect import SQLITE
from isotope.stores.sql_graph import GRAPH_TABLES
from isotope.stores.sqlite_check import inspect
from isotope.stores.sqlite_chroma import SQLiteRows
from isotope.stores.sqlite_connection import (
    DB_NAME,
    connect,
    guarded,
    store_error,
    writable,
    write_lock,
)
from isotope.stores.sqlite_keywords import KeywordLayer
from isotope.stores.sqlite_schema import schema_version, set_meta, upgrade
from isotope.stores.sqlite_sql import where
from isotope.stores.sqlite_vectors import KEYWORD_POLICIES, POLICIES, VectorStore, release

log = logging.getLogger(__name__)


class SQLiteStore(SQLStore):
    """An index in a directory: ``isotope.db`` plus the vector indexes in ``vectors/``."""

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
        self._vectors = VectorStore(self.directory / "vectors", self._conn, self.snapshot,
                                    self.get_meta, self._dim)
        self._chroma: ChromaVectors | None = None
        """Where the vectors are kept when Chroma holds them (``vector_backend``)."""
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
            if version:  # the vector cache files of schema 4 and before
                self._vectors.remove_old_cache()
        elif version != SCHEMA_VERSION:
            raise InvalidIndex(
                f"{self.directory} has index schema {version}; this isotope reads schema "
                f"{SCHEMA_VERSION}. Upgrade isotope, or re-ingest into a new index"
                + (" (the index is read-only, so it cannot be migrated in place)"
                   if self.read_only and (version or 0) < SCHEMA_VERSION else "")
            )
        if isinstance(made := self.get_meta("vector_backend"), dict):
            # (an index made with Chroma reads it however it is opened: the setting's
            # token and timeout come with set_vector_backend)
            self._chroma = self._chroma_of(made, VectorBackend("chroma"))
        if not self.read_only and self.get_meta("state") is None:
            self.set_meta("state", uuid.uuid4().hex)
        if not self.read_only:
            try:  # replaced vector files past their retirement, a crash's leftovers
                self._vectors.remove_stale()
            except OSError:
                log.info("tidying %s failed", self.directory / "vectors", exc_info=True)

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
        self._vectors.wait()  # a background compaction finishes its work
        if self._chroma is not None:
            self._chroma.close()
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
        conn.executemany(
            "INSERT INTO vector_log(kind, item, grp, vector) VALUES (?, ?, ?, ?)",
            [(kind, r, r if kind == "chunks" else grp, _blob(v))
             for r, grp, v in zip(rows, chunk_rows, vectors, strict=True)])
        return list(rows)

    def _set_questions_text(self, conn: sqlite3.Connection,
                            changed: list[tuple[int, str, str | None, bool | None]], *,
                            logged: bool) -> None:
        """FTS5's trigger indexes the new text; a chunk not written in this transaction
        is logged with an empty vector (its text changed, not its vector), so that the
        saved keyword postings score it from its text until the next compaction (not
        with Chroma: FTS5 answers there, and Chroma would take it for new metadata)."""
        texts = [(text, row) for row, text, keywords, _ in changed if keywords is not None]
        conn.executemany("UPDATE chunks SET questions_text = ? WHERE rowid = ?", texts)
        conn.executemany("UPDATE chunks SET enriched = ? WHERE rowid = ?",
                         [(flag, row) for row, _, _, flag in changed if flag is not None])
        if not logged and self._chroma is None:
            conn.executemany("INSERT INTO vector_log(kind, item, grp, vector) VALUES "
                             "('chunks', ?, ?, X'')", [(row, row) for _, row in texts])

    @staticmethod
    def _next_rowids(conn: sqlite3.Connection, table: str, count: int) -> range:
        top = conn.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {table}").fetchone()[0]
        return range(top + 1, top + 1 + count)

    @guarded
    def _after_write(self) -> None:
        """Compact, in the background, the vectors of each kind whose log has grown, when
        this process holds the writer lock (a write without it leaves that to the next
        write, or to :meth:`compact`)."""
        if self._chroma is not None:  # (sent under the writer lock: taken if free)
            if self._writing:
                self._send()
            else:
                with contextlib.suppress(IndexLocked), self.writer():
                    self._send()
            return
        if self._writing:
            for kind in KINDS:
                self._vectors.compact_later(kind, self._write)

    def settle(self) -> None:
        self._vectors.wait()

    # -- where the vectors are kept ----------------------------------------------------
    def set_vector_backend(self, backend: VectorBackend) -> str:
        """Chroma (embedded or a server) for a new index whose setting says so, once its
        collections are claimed (a prefix another index uses is refused before anything
        is written); an index keeps the backend it was made with (:meth:`fixed_settings`).
        Sends the vector writes a crash left pending when the writer lock is free."""
        if not is_vector_backend(backend.name):
            raise InvalidArgument(f"vector_backend {backend.name!r}: use usearch, chroma, or "
                                  "a server as chroma+http://HOST:PORT/PREFIX")
        made = self.get_meta("vector_backend")
        if (made is None and backend.name != "usearch" and not self.read_only
                and not self._rows("SELECT 1 FROM sources LIMIT 1")):
            place = place_of(backend.name, default_prefix=f"isotope-{uuid.uuid4().hex[:12]}",
                             tenant=backend.tenant, database=backend.database)
            made = {"name": "chroma", "url": place.url, "prefix": place.prefix,
                    "tenant": place.tenant, "database": place.database,
                    "owner": uuid.uuid4().hex}
            claimed = self._chroma_of(made, backend)
            try:
                claimed.claim()
                self.set_meta("vector_backend", made)
            except BaseException:
                claimed.close()
                raise
            self._chroma = claimed
        elif made is not None:
            self._chroma = self._chroma_of(made, backend)
        name = "usearch" if made is None else str(made.get("url") or made["name"])
        chroma = self._chroma if made is not None else None
        if chroma is not None and not self.read_only and any(chroma.log_size(k)
                                                             for k in KINDS):
            try:  # (what a crash left pending, when no other process writes)
                with self.writer():
                    self._send()
            except (StoreError, IndexLocked) as exc:
                log.warning("%s", exc)
        return name

    def fixed_settings(self) -> dict[str, Any]:
        made = self.get_meta("vector_backend")
        if isinstance(made, dict):
            return {"vector_backend": str(made.get("url") or made["name"])}
        return {"vector_backend": "usearch"} if self._rows(
            "SELECT 1 FROM sources LIMIT 1") else {}

    def _chroma_of(self, made: dict[str, Any], backend: VectorBackend) -> ChromaVectors:
        """The Chroma collections the index's meta names (``made``)."""
        place = ChromaPlace(made.get("url"), str(made["prefix"]), made.get("tenant"),
                            made.get("database"), made.get("owner"))
        rows = SQLiteRows(self._conn, lambda: self._write(LOG_ONLY), self._chunks_meeting)
        return ChromaVectors(place, self.directory / "chroma", rows, token=backend.token,
                             timeout=backend.timeout)

    def _send(self) -> None:
        """Send the pending vector writes to Chroma (under the writer lock)."""
        assert self._chroma is not None
        self._chroma.send()

    def _access_changed(self, conn: sqlite3.Connection, uris: Sequence[str]) -> None:
        """With Chroma: the items of sources whose access list changed are logged again,
        so that their metadata (who may see them) is sent with the next write."""
        if self._chroma is not None:
            SQLiteRows.relabel(conn, uris)

    def set_vector_index(self, policy: str) -> None:
        if policy not in POLICIES:
            raise InvalidArgument(f"vector_index {policy!r}: use one of {', '.join(POLICIES)}")
        self._vectors.policy = policy

    def set_keyword_index(self, policy: str) -> None:
        if policy not in KEYWORD_POLICIES:
            raise InvalidArgument(f"keyword_index {policy!r}: use one of "
                                  f"{', '.join(KEYWORD_POLICIES)}")
        self._vectors.keyword_policy = policy

    @guarded
    def compact(self) -> dict[str, str]:
        """Fold each kind's vector log into a new base of the implementation the
        ``vector_index`` policy wants, and give freed pages back. Returns each kind's base
        implementation. Run it under the writer lock."""
        done: dict[str, str] = {}
        self._vectors.wait()
        if self._chroma is not None:
            self._send()
            done = dict.fromkeys(KINDS, "chroma")
        else:
            for kind in KINDS:
                self._vectors.compact(kind, self._write, force=True)
                done[kind] = str(self._vectors.bases().get(kind, {}).get("impl", "exact"))
        if not self.read_only:
            conn = self._conn()
            release(conn)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._vectors.remove_stale()
        return done

    def _dim(self) -> int | None:
        dim = (self.get_meta("embedding") or {}).get("dim")
        return int(dim) if dim else None

    # -- reads -------------------------------------------------------------------------
    @guarded
    def search(self, kind: Kind, vector: Vectors, k: int,
               filters: Sequence[Condition] = ()) -> list[Hit]:
        if self._chroma is not None:
            found = self._chroma.search(kind, vector, k, filters)
        else:
            found = self._vectors.index(kind).search(vector, k, self._allowed(filters))
        return self._hits(kind, [(item, score) for item, _, score in found])

    @guarded
    def search_by_chunk(
        self, kind: Kind, vector: Vectors, k: int, per_chunk: int = 3,
        filters: Sequence[Condition] = (),
    ) -> list[tuple[str, list[Hit]]]:
        if k <= 0:
            return []
        if self._chroma is not None:
            groups = search_groups(self._chroma.searching(kind, filters), vector, k,
                                   per_chunk)
        else:
            groups = search_groups(self._vectors.index(kind), vector, k, per_chunk,
                                   self._allowed(filters))
        hits = self._hits(kind, [hit for _, found in groups for hit in found])
        by_chunk: dict[str, list[Hit]] = {}
        for hit in hits:
            by_chunk.setdefault(hit.chunk_id, []).append(hit)
        return list(by_chunk.items())

    def _chunks_meeting(self, filters: Sequence[Condition]) -> npt.NDArray[np.int64]:
        return self._rows_meeting("chunks", filters)

    def _allowed(self, filters: Sequence[Condition]) -> npt.NDArray[np.int64] | None:
        """The rowids of the chunks meeting ``filters``, sorted (None: no filter)."""
        if not filters:
            return None
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
        postings = self._vectors.keywords(kind) if self._chroma is None else None
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
        return self._vectors.keywords(kind)

    @guarded
    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._conn().execute(sql, params).fetchall()

    @guarded
    def _vectors_of(self, kind: Kind, rows: list[int]) -> dict[int, Vectors]:
        if not rows:
            return {}  # (without loading the kind's vectors)
        if self._chroma is not None:
            return self._chroma.get(kind, rows)
        ids, vectors = self._vectors.index(kind).get(np.array(rows, dtype=np.int64))
        return dict(zip((int(i) for i in ids), vectors, strict=True))

    def inspect(self) -> Inspection:
        """See :func:`isotope.stores.sqlite_check.inspect`."""
        found = inspect(self._conn(), self.snapshot, self._chroma or self._vectors,
                        self.table_rows, self._lost_rows, read_only=self.read_only,
                        db=self.directory / DB_NAME)
        if not found.storage_damaged:
            found.problems += self._keyword_drift()  # (one read)
        return found

    def repair(self, embed: Embedder | None = None) -> None:
        """Rebuild the keyword indexes (each chunk's questions' text written again from its
        questions), drop orphan rows that no source owns, and rebuild
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
        if self._chroma is not None:
            self._send()
        for kind in KINDS:
            embed_rows = None if embed is None else partial(self._embed_rows, kind, embed)
            if self._chroma is not None:
                self._chroma.rebuild(kind, self.table_rows(kind), embed_rows)
            else:
                self._vectors.rebuild(kind, self._write, self.table_rows(kind), embed_rows)

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
