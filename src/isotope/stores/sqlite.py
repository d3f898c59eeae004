"""The embedded default store: one directory holding a SQLite database (WAL mode).

SQLite is the source of truth for sources, chunks, atoms, questions and their vectors;
FTS5 tables (kept in step by triggers) serve keyword search. Vector search goes to one
vector index per kind (``sqlite_vectors``). Its parts: connections, the writer lock and
errors (``sqlite_connection``), the schema's numbered steps (``sqlite_schema``), filters
as SQL (``sqlite_sql``) and the integrity check (``sqlite_check``).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from isotope.ann import search_groups
from isotope.embedders import Vectors
from isotope.errors import IndexDamaged, InvalidArgument, InvalidIndex, StoreError
from isotope.filters import Condition
from isotope.models import (
    Atom,
    Chunk,
    DroppedQuestion,
    GeneratedQuestion,
    Question,
    Source,
    content_hash,
)
from isotope.stores import (
    KINDS,
    SCHEMA_VERSION,
    ChunkQuestions,
    Hit,
    Inspection,
    Kind,
    PendingChunk,
    SourceBatch,
    SourceInfo,
    Store,
    StoredChunk,
    as_generated,
    draw_questions,
    dropped_by_chunk,
)
from isotope.stores.keywords import query_words
from isotope.stores.sqlite_check import inspect
from isotope.stores.sqlite_connection import (
    DB_NAME,
    connect,
    guarded,
    store_error,
    writable,
    write_lock,
)
from isotope.stores.sqlite_schema import schema_version, set_meta, upgrade
from isotope.stores.sqlite_sql import CHUNK_ROWID, where
from isotope.stores.sqlite_vectors import KEYWORD_POLICIES, POLICIES, VectorStore, release

log = logging.getLogger(__name__)



_KEPT = ("SELECT c.source, c.id, c.idx, a.id, a.idx, a.text, q.text, 1, '', q.rowid "
         "FROM questions q JOIN atoms a ON a.id = q.atom_id JOIN chunks c ON c.id = q.chunk_id "
         "WHERE {where}")
_DROPPED = ("SELECT c.source, c.id, c.idx, a.id, a.idx, a.text, d.text, 0, d.reason, d.rowid "
            "FROM dropped_questions d JOIN chunks c ON c.id = d.chunk_id "
            "LEFT JOIN atoms a ON a.id = d.atom_id WHERE {where}")
"""A generated question kept (searched) or dropped, with its chunk and atom: columns
source, chunk id, chunk index, atom id, atom index, atom, text, kept, reason, row."""


class SQLiteStore(Store):
    """An index in a directory: ``isotope.db`` plus the vector indexes in ``vectors/``."""

    def __init__(self, directory: str | Path, *, create: bool = True) -> None:
        self.directory = Path(directory)
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
        self._vectors = VectorStore(self.directory / "vectors", self._conn, self.snapshot,
                                    self.get_meta, self._dim)
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
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that gives the index a new state id. If it fails, nothing
        of it is stored, and the error that made it fail is the one raised (SQLite may
        already have rolled back, e.g. when the disk is full)."""
        if self.read_only:
            raise StoreError(f"the index at {self.directory} is read-only; copy it to a "
                             "writable folder to change it")
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
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
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- meta --------------------------------------------------------------------------
    @guarded
    def get_meta(self, key: str) -> Any:
        row = self._conn().execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    @guarded
    def set_meta(self, key: str, value: Any) -> None:
        set_meta(self._conn(), key, value)

    # -- writes ------------------------------------------------------------------------
    @guarded
    def add(self, batch: SourceBatch) -> None:
        source = batch.source
        with self._write() as conn:
            conn.execute("DELETE FROM sources WHERE uri=?", (source.uri,))
            if batch.replaces:
                conn.execute("DELETE FROM sources WHERE uri=?", (batch.replaces,))
            conn.execute(
                "INSERT INTO sources(uri, content_hash, size, mtime, loader, ingested_at, "
                "metadata, status, root, counts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    source.uri, source.content_hash, source.size, source.mtime, source.loader,
                    (source.ingested_at or datetime.now(UTC)).isoformat(),
                    json.dumps(source.metadata), source.status, source.root,
                    json.dumps([len(batch.chunks), len(batch.atoms), len(batch.questions)]),
                ),
            )
            # rows numbered here, so that their vectors can be logged with them
            chunk_rows = self._next_rowids(conn, "chunks", len(batch.chunks))
            atom_rows = self._next_rowids(conn, "atoms", len(batch.atoms))
            question_rows = self._next_rowids(conn, "questions", len(batch.questions))
            chunk_row = dict(zip((c.id for c in batch.chunks), chunk_rows, strict=True))
            hashes = batch.chunk_hashes or [content_hash(c.text) for c in batch.chunks]
            conn.executemany(
                'INSERT INTO chunks(rowid, id, source, idx, start, "end", text, metadata, '
                "vector, hash, context, enriched) VALUES (?, ?, ?, ?, ?, ?, ?, ?, X'', ?, ?, ?)",
                [
                    (r, c.id, source.uri, c.index, c.start, c.end, c.text,
                     json.dumps(c.metadata), h, c.context, int(c.id not in batch.pending))
                    for r, c, h in zip(chunk_rows, batch.chunks, hashes, strict=True)
                ],
            )
            conn.executemany(
                'INSERT INTO atoms(rowid, id, chunk_id, idx, start, "end", text, vector) '
                "VALUES (?, ?, ?, ?, ?, ?, ?, X'')",
                [(r, a.id, a.chunk_id, a.index, a.start, a.end, a.text)
                 for r, a in zip(atom_rows, batch.atoms, strict=True)],
            )
            conn.executemany(
                "INSERT INTO questions(rowid, id, atom_id, chunk_id, text, vector) "
                "VALUES (?, ?, ?, ?, ?, X'')",
                [(r, q.id, q.atom_id, q.chunk_id, q.text)
                 for r, q in zip(question_rows, batch.questions, strict=True)],
            )
            conn.executemany(
                "INSERT INTO vector_log(kind, item, grp, vector) VALUES (?, ?, ?, ?)",
                [*(("chunks", r, r, _blob(v))
                   for r, v in zip(chunk_rows, batch.chunk_vectors, strict=True)),
                 *(("atoms", r, chunk_row.get(a.chunk_id), _blob(v))
                   for r, a, v in zip(atom_rows, batch.atoms, batch.atom_vectors, strict=True)),
                 *(("questions", r, chunk_row.get(q.chunk_id), _blob(v))
                   for r, q, v in zip(question_rows, batch.questions, batch.question_vectors,
                                      strict=True))],
            )
            self._add_dropped(conn, batch.dropped)
        self._after_write()

    @staticmethod
    def _add_dropped(conn: sqlite3.Connection, dropped: Sequence[DroppedQuestion]) -> None:
        conn.executemany(
            "INSERT INTO dropped_questions(chunk_id, atom_id, text, reason) VALUES (?,?,?,?)",
            [(d.chunk_id, d.atom_id, d.text, d.reason) for d in dropped])

    @guarded
    def add_questions(self, done: Sequence[ChunkQuestions]) -> None:
        with self._write() as conn:
            for item in done:
                found = conn.execute("SELECT rowid, source FROM chunks WHERE id = ?",
                                     (item.chunk_id,)).fetchone()
                if found is None:  # replaced or deleted meanwhile
                    continue
                chunk_row, uri = found
                had = conn.execute("DELETE FROM questions WHERE chunk_id = ?",
                                   (item.chunk_id,)).rowcount
                rows = self._next_rowids(conn, "questions", len(item.questions))
                conn.executemany(
                    "INSERT INTO questions(rowid, id, atom_id, chunk_id, text, vector) "
                    "VALUES (?, ?, ?, ?, ?, X'')",
                    [(r, q.id, q.atom_id, item.chunk_id, q.text)
                     for r, q in zip(rows, item.questions, strict=True)])
                conn.executemany(
                    "INSERT INTO vector_log(kind, item, grp, vector) VALUES (?, ?, ?, ?)",
                    [("questions", r, chunk_row, _blob(v))
                     for r, v in zip(rows, item.vectors, strict=True)])
                conn.execute("DELETE FROM dropped_questions WHERE chunk_id = ?",
                             (item.chunk_id,))
                self._add_dropped(conn, [d.model_copy(update={"chunk_id": item.chunk_id})
                                         for d in item.dropped])
                conn.execute("UPDATE chunks SET enriched = ? WHERE rowid = ?",
                             (int(item.complete), chunk_row))
                conn.execute(  # what the source holds, for `check`
                    "UPDATE sources SET counts = json_set(counts, '$[2]', "
                    "json_extract(counts, '$[2]') + ?) WHERE uri = ? AND counts IS NOT NULL",
                    (len(rows) - had, uri))
        self._after_write()

    @guarded
    def pending_chunks(self, limit: int, *, after: str | None = None,
                       sources: Sequence[str] | None = None) -> list[PendingChunk]:
        sql, params = "SELECT id FROM chunks WHERE enriched = 0", list[Any]()
        if sources is not None:  # (one JSON parameter: no limit on how many)
            sql += " AND source IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(list(sources)))
        if after is not None:
            sql += " AND id > ?"
            params.append(after)
        with self.snapshot():
            conn = self._conn()
            ids = [r[0] for r in conn.execute(f"{sql} ORDER BY id LIMIT ?", (*params, limit))]
            chunks = self.get_chunks(ids)
            marks = ",".join("?" * len(ids))
            atoms = conn.execute(
                f'SELECT rowid, id, chunk_id, idx, start, "end", text FROM atoms '
                f"WHERE chunk_id IN ({marks}) ORDER BY chunk_id, idx", ids).fetchall()
            vectors = self._vectors_of("atoms", [a[0] for a in atoms])
        by_chunk: dict[str, list[tuple[Any, ...]]] = {}
        for atom in atoms:
            by_chunk.setdefault(atom[2], []).append(atom)
        found = []
        for chunk_id in ids:
            own = [a for a in by_chunk.get(chunk_id, []) if a[0] in vectors]
            found.append(PendingChunk(
                chunk=chunks[chunk_id],
                atoms=[Atom(id=a[1], chunk_id=a[2], index=a[3], start=a[4], end=a[5],
                            text=a[6]) for a in own],
                atom_vectors=_stack([vectors[a[0]] for a in own])))
        return found

    @guarded
    def count_waiting(self, sources: Sequence[str] | None = None) -> int:
        if sources is None:
            return int(self._conn().execute(
                "SELECT COUNT(*) FROM chunks WHERE enriched = 0").fetchone()[0])
        return int(self._conn().execute(
            "SELECT COUNT(*) FROM chunks WHERE enriched = 0 AND source IN "
            "(SELECT value FROM json_each(?))", (json.dumps(list(sources)),)).fetchone()[0])

    @guarded
    def without_questions(self, chunk_ids: Sequence[str]) -> set[str]:
        if not chunk_ids or self._conn().execute(
                "SELECT 1 FROM chunks WHERE enriched = 0 LIMIT 1").fetchone() is None:
            return set()
        marks = ",".join("?" * len(chunk_ids))
        return {r[0] for r in self._conn().execute(
            f"SELECT id FROM chunks WHERE enriched = 0 AND id IN ({marks})", list(chunk_ids))}

    @staticmethod
    def _next_rowids(conn: sqlite3.Connection, table: str, count: int) -> range:
        top = conn.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {table}").fetchone()[0]
        return range(top + 1, top + 1 + count)

    def _after_write(self) -> None:
        """Compact, in the background, the vectors of each kind whose log has grown, when
        this process holds the writer lock (a write without it leaves that to the next
        write, or to :meth:`compact`)."""
        if self._writing:
            for kind in KINDS:
                self._vectors.compact_later(kind, self._write)

    @guarded
    def delete_source(self, uri: str) -> bool:
        with self._write() as conn:
            deleted = conn.execute("DELETE FROM sources WHERE uri=?", (uri,)).rowcount > 0
        self._after_write()
        return deleted

    def settle(self) -> None:
        self._vectors.wait()

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
        found = self._vectors.index(kind).search(vector, k, self._allowed(filters))
        return self._hits(kind, [(item, score) for item, _, score in found])

    @guarded
    def search_by_chunk(
        self, kind: Kind, vector: Vectors, k: int, per_chunk: int = 3,
        filters: Sequence[Condition] = (),
    ) -> list[tuple[str, list[Hit]]]:
        if k <= 0:
            return []
        groups = search_groups(self._vectors.index(kind), vector, k, per_chunk,
                               self._allowed(filters))
        hits = self._hits(kind, [hit for _, found in groups for hit in found])
        by_chunk: dict[str, list[Hit]] = {}
        for hit in hits:
            by_chunk.setdefault(hit.chunk_id, []).append(hit)
        return list(by_chunk.items())

    def _allowed(self, filters: Sequence[Condition]) -> npt.NDArray[np.int64] | None:
        """The rowids of the chunks meeting ``filters`` (None: no filter)."""
        if not filters:
            return None
        clause, params = where(filters)
        return np.fromiter(
            (r[0] for r in self._conn().execute(
                f"SELECT c.rowid FROM chunks c JOIN sources s ON s.uri = c.source "
                f"WHERE {clause}", params)),
            dtype=np.int64,
        )

    @guarded
    def keyword_search(self, kind: Kind, query: str, k: int,
                       filters: Sequence[Condition] = ()) -> list[Hit]:
        words = query_words(query)
        if not words or k <= 0:
            return []
        postings = self._vectors.keywords(kind) if not filters else None
        if postings is not None:  # the saved postings (large kinds): FTS5's ranking
            scored = postings.search(words, k)
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

    def _hits(self, kind: Kind, scored: list[tuple[int, float]]) -> list[Hit]:
        if not scored:
            return []
        marks = ",".join("?" * len(scored))
        conn = self._conn()
        if kind == "questions":
            sql = (f"SELECT q.rowid, q.chunk_id, q.text, a.text FROM questions q "
                   f"JOIN atoms a ON a.id = q.atom_id WHERE q.rowid IN ({marks})")
        elif kind == "atoms":
            sql = f"SELECT rowid, chunk_id, text, text FROM atoms WHERE rowid IN ({marks})"
        else:
            sql = f"SELECT rowid, id, text, '' FROM chunks WHERE rowid IN ({marks})"
        found = {r[0]: r for r in conn.execute(sql, [row for row, _ in scored])}
        return [
            Hit(kind, found[row][1], score, found[row][2], found[row][3])
            for row, score in scored
            if row in found
        ]

    @guarded
    def get_chunks(self, ids: Sequence[str]) -> dict[str, Chunk]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        found = self._conn().execute(
            f'SELECT id, source, idx, start, "end", text, metadata, context FROM chunks '
            f"WHERE id IN ({marks})",
            list(ids),
        )
        return {
            r[0]: Chunk(id=r[0], source=r[1], index=r[2], start=r[3], end=r[4], text=r[5],
                        metadata=json.loads(r[6]), context=r[7])
            for r in found
        }

    @guarded
    def get_source(self, uri: str) -> Source | None:
        row = self._conn().execute(
            "SELECT uri, content_hash, size, mtime, loader, ingested_at, metadata, status, "
            "root FROM sources WHERE uri=?", (uri,),
        ).fetchone()
        return _source(row) if row else None

    @guarded
    def sources(self) -> list[SourceInfo]:
        rows = self._conn().execute(
            "SELECT s.uri, s.content_hash, s.size, s.mtime, s.loader, s.ingested_at, s.metadata,"
            " s.status, s.root, (SELECT COUNT(*) FROM chunks c WHERE c.source = s.uri),"
            " (SELECT COUNT(*) FROM atoms a JOIN chunks c ON a.chunk_id = c.id"
            "   WHERE c.source = s.uri),"
            " (SELECT COUNT(*) FROM questions q JOIN chunks c ON q.chunk_id = c.id"
            "   WHERE c.source = s.uri),"
            " (SELECT COUNT(*) FROM chunks c WHERE c.source = s.uri AND c.enriched = 0)"
            " FROM sources s ORDER BY s.uri"
        ).fetchall()
        return [SourceInfo(_source(r[:9]), r[9], r[10], r[11], pending=r[12]) for r in rows]

    @guarded
    def counts(self) -> dict[str, int]:
        conn = self._conn()
        found = {
            table: int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            for table in ("sources", "chunks", "atoms", "questions")
        }
        # waiting for their questions (a partial index: as cheap as there are such chunks)
        found["chunks_waiting"] = self.count_waiting()
        found["sources_waiting"] = int(conn.execute(
            "SELECT COUNT(DISTINCT source) FROM chunks WHERE enriched = 0").fetchone()[0])
        return found

    @guarded
    def stored_chunks(self, uri: str) -> dict[str, StoredChunk]:
        conn = self._conn()
        found: dict[str, StoredChunk] = {}
        with self.snapshot():
            chunks = conn.execute(
                "SELECT rowid, id, hash, context FROM chunks WHERE source=? AND hash IS NOT "
                "NULL AND enriched = 1", (uri,)).fetchall()
            if not chunks:
                return found
            parts = []
            for chunk_row, chunk_id, digest, context in chunks:
                atoms = conn.execute(
                    'SELECT rowid, id, idx, start, "end", text FROM atoms WHERE chunk_id=? '
                    "ORDER BY idx", (chunk_id,)).fetchall()
                questions = conn.execute(
                    "SELECT rowid, atom_id, text FROM questions WHERE atom_id IN "
                    "(SELECT id FROM atoms WHERE chunk_id=?) ORDER BY rowid",
                    (chunk_id,)).fetchall()
                parts.append((chunk_row, chunk_id, digest, context, atoms, questions))
            dropped = dropped_by_chunk(self._dropped(conn, [p[1] for p in parts]))
            vectors = {
                "chunks": self._vectors_of("chunks", [p[0] for p in parts]),
                "atoms": self._vectors_of("atoms", [a[0] for p in parts for a in p[4]]),
                "questions": self._vectors_of("questions",
                                              [q[0] for p in parts for q in p[5]])}
        for chunk_row, chunk_id, digest, context, atoms, questions in parts:
            rows = [chunk_row, *(a[0] for a in atoms), *(q[0] for q in questions)]
            if not all(r in vectors[kind] for r, kind in zip(rows, (
                    "chunks", *("atoms" for _ in atoms), *("questions" for _ in questions)),
                    strict=True)):
                continue  # a vector is missing: this chunk is made again
            found[digest] = StoredChunk(
                vector=np.stack([vectors["chunks"][chunk_row]]),
                atoms=[Atom(id=a[1], chunk_id=chunk_id, index=a[2], start=a[3], end=a[4],
                            text=a[5]) for a in atoms],
                atom_vectors=_stack([vectors["atoms"][a[0]] for a in atoms]),
                questions=[Question(atom_id=q[1], chunk_id=chunk_id, text=q[2])
                           for q in questions],
                question_vectors=_stack([vectors["questions"][q[0]] for q in questions]),
                context=context,
                dropped=dropped.get(chunk_id, []),
            )
        return found

    @staticmethod
    def _dropped(conn: sqlite3.Connection, chunk_ids: list[str]) -> list[DroppedQuestion]:
        return [DroppedQuestion(chunk_id=r[0], atom_id=r[1], text=r[2], reason=r[3])
                for r in conn.execute(
                    "SELECT chunk_id, atom_id, text, reason FROM dropped_questions WHERE "
                    "chunk_id IN (SELECT value FROM json_each(?)) ORDER BY rowid",
                    (json.dumps(chunk_ids),))]

    @guarded
    def generated_questions(self, *, source: str | None = None,
                            chunk_id: str | None = None, sample: int | None = None,
                            seed: int | None = None) -> list[GeneratedQuestion]:
        conn = self._conn()
        if sample is not None:  # drawn among the row numbers, then only those rows read
            kept, dropped = draw_questions(
                [r for (r,) in conn.execute("SELECT rowid FROM questions")],
                [r for (r,) in conn.execute("SELECT rowid FROM dropped_questions")],
                sample, seed)
            among = "{}.rowid IN (SELECT value FROM json_each(?))"
            rows = [*conn.execute(_KEPT.format(where=among.format("q")), (json.dumps(kept),)),
                    *conn.execute(_DROPPED.format(where=among.format("d")),
                                  (json.dumps(dropped),))]
            return as_generated(rows, shuffle=True, seed=seed)
        where, value = (("c.source = ?", source) if source is not None
                        else ("c.id = ?", chunk_id))
        return as_generated(conn.execute(
            f"{_KEPT.format(where=where)} UNION ALL {_DROPPED.format(where=where)} "
            "ORDER BY 3, 1, 2, 5, 8 DESC, 10", (value, value)).fetchall())

    @guarded
    def meta_items(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self._conn().execute("SELECT key, value FROM meta")}

    @guarded
    def export_source(self, uri: str) -> SourceBatch | None:
        with self.snapshot():
            source = self.get_source(uri)
            if source is None:
                return None
            conn = self._conn()
            chunks = conn.execute(
                'SELECT rowid, id, idx, start, "end", text, metadata, context, hash, enriched '
                "FROM chunks WHERE source = ? ORDER BY idx, rowid", (uri,)).fetchall()
            marks = ",".join("?" * len(chunks))
            ids = [c[1] for c in chunks]
            atoms = conn.execute(
                f'SELECT rowid, id, chunk_id, idx, start, "end", text FROM atoms '
                f"WHERE chunk_id IN ({marks}) ORDER BY rowid", ids).fetchall()
            questions = conn.execute(
                f"SELECT rowid, atom_id, chunk_id, text FROM questions "
                f"WHERE chunk_id IN ({marks}) ORDER BY rowid", ids).fetchall()
            dropped = self._dropped(conn, ids)
            vectors: dict[str, dict[int, Vectors]] = {
                "chunks": self._vectors_of("chunks", [r[0] for r in chunks]),
                "atoms": self._vectors_of("atoms", [r[0] for r in atoms]),
                "questions": self._vectors_of("questions", [r[0] for r in questions])}
        lost = [kind for kind, rows in (("chunks", chunks), ("atoms", atoms),
                                        ("questions", questions))
                if any(r[0] not in vectors[kind] for r in rows)]
        if lost:
            raise IndexDamaged(f"{uri}: vectors of its {', '.join(lost)} are missing in "
                               f"{self.directory}; run `isotope check --repair` first")
        return SourceBatch(
            source=source,
            chunks=[Chunk(id=c[1], source=uri, index=c[2], start=c[3], end=c[4], text=c[5],
                          metadata=json.loads(c[6]), context=c[7]) for c in chunks],
            atoms=[Atom(id=a[1], chunk_id=a[2], index=a[3], start=a[4], end=a[5], text=a[6])
                   for a in atoms],
            questions=[Question(atom_id=q[1], chunk_id=q[2], text=q[3]) for q in questions],
            chunk_vectors=_stack([vectors["chunks"][c[0]] for c in chunks]),
            atom_vectors=_stack([vectors["atoms"][a[0]] for a in atoms]),
            question_vectors=_stack([vectors["questions"][q[0]] for q in questions]),
            chunk_hashes=[c[8] or content_hash(c[5]) for c in chunks],
            pending={c[1] for c in chunks if not c[9]},
            dropped=dropped)

    def _vectors_of(self, kind: Kind, rows: list[int]) -> dict[int, Vectors]:
        ids, vectors = self._vectors.index(kind).get(np.array(rows, dtype=np.int64))
        return dict(zip((int(i) for i in ids), vectors, strict=True))

    def inspect(self) -> Inspection:
        """See :func:`isotope.stores.sqlite_check.inspect`."""
        return inspect(self._conn(), self.snapshot, self._vectors, self.table_rows,
                       read_only=self.read_only, db=self.directory / DB_NAME)

    def repair(self, embed: Callable[[list[str]], Vectors] | None = None) -> None:
        """Rebuild the keyword indexes, drop orphan rows that no source owns, and rebuild
        each kind's vectors to hold exactly its rows: those without a readable vector are
        embedded again from their text with ``embed`` (without it, they stay missing and
        `check` names them). Sources that lost rows are for the caller to ingest again or
        remove (:meth:`damaged_sources`)."""
        with self._write() as conn:
            conn.execute("DELETE FROM chunks WHERE source NOT IN (SELECT uri FROM sources)")
            conn.execute("DELETE FROM atoms WHERE chunk_id NOT IN (SELECT id FROM chunks)")
            conn.execute("DELETE FROM questions WHERE atom_id NOT IN (SELECT id FROM atoms) "
                         "OR chunk_id NOT IN (SELECT id FROM chunks)")
            conn.execute("DELETE FROM dropped_questions WHERE chunk_id NOT IN "
                         "(SELECT id FROM chunks)")
            for kind in KINDS:
                conn.execute(f"INSERT INTO {kind}_fts({kind}_fts) VALUES ('rebuild')")
        for kind in KINDS:
            embed_rows = None if embed is None else partial(self._embed_rows, kind, embed)
            self._vectors.rebuild(kind, self._write, self.table_rows(kind), embed_rows)

    def table_rows(self, kind: Kind) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Every rowid of ``kind`` (sorted) with the rowid of its chunk."""
        rows = self._conn().execute(
            f"SELECT t.rowid, {CHUNK_ROWID[kind]} FROM {kind} t ORDER BY t.rowid").fetchall()
        sound = [r for r in rows if r[1] is not None]
        return (np.fromiter((r[0] for r in sound), dtype=np.int64, count=len(sound)),
                np.fromiter((r[1] for r in sound), dtype=np.int64, count=len(sound)))

    def _embed_rows(self, kind: Kind, embed: Callable[[list[str]], Vectors],
                    rows: npt.NDArray[np.int64]) -> Vectors:
        """Vectors of items of ``kind`` made again from their stored text (a chunk's with
        its context, as ingest embeds it)."""
        marks = ",".join("?" * len(rows))
        params = [int(r) for r in rows]
        if kind == "chunks":
            ids = dict(self._conn().execute(
                f"SELECT rowid, id FROM chunks WHERE rowid IN ({marks})", params).fetchall())
            chunks = self.get_chunks(list(ids.values()))
            texts = [chunks[ids[r]].search_text for r in params]
        else:
            found = dict(self._conn().execute(
                f"SELECT rowid, text FROM {kind} WHERE rowid IN ({marks})", params).fetchall())
            texts = [found[r] for r in params]
        return embed(texts)

    def disk_size(self) -> int:
        return sum(p.stat().st_size for p in self.directory.rglob("*") if p.is_file())


def _stack(vectors: list[Vectors]) -> Vectors:
    if not vectors:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack(vectors).astype(np.float32)


def _blob(vector: Vectors) -> bytes:
    """A logged vector: float16 (half the bytes to write; the HNSW index keeps int8, and
    float16 changes a cosine by less than 0.001)."""
    return np.asarray(vector, dtype=np.float16).tobytes()


def _source(row: Sequence[Any]) -> Source:
    return Source(
        uri=row[0], content_hash=row[1], size=row[2], mtime=row[3], loader=row[4],
        ingested_at=datetime.fromisoformat(row[5]), metadata=json.loads(row[6]),
        status=row[7], root=row[8],
    )


def _disk_full(folder: Path) -> bool:
    """Whether the file system holding ``folder`` has (almost) no space left."""
    import shutil

    try:
        return shutil.disk_usage(folder).free < 256 * 1024
    except OSError:
        return False
