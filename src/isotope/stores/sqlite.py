"""The embedded default store: one directory holding a SQLite database (WAL mode).

SQLite is the source of truth for sources, chunks, atoms, questions and their vectors;
FTS5 tables (kept in step by triggers) serve keyword search. Vector search is exact: the
vectors of a kind are held as one contiguous float32 matrix and scored with one matrix
product. The matrix is cached in ``vectors/`` beside the database, stamped with the
index's generation (bumped by every write), so a new process loads it without reading
every row; a stale or missing cache is rebuilt from SQLite.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from isotope.embedders import Vectors
from isotope.errors import InvalidIndex
from isotope.models import Chunk, Source
from isotope.stores import KINDS, SCHEMA_VERSION, Hit, Kind, SourceBatch, SourceInfo, Store

log = logging.getLogger(__name__)
DB_NAME = "isotope.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    uri TEXT PRIMARY KEY, content_hash TEXT NOT NULL, size INTEGER NOT NULL,
    mtime REAL, loader TEXT NOT NULL, ingested_at TEXT NOT NULL, metadata TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL REFERENCES sources(uri) ON DELETE CASCADE,
    idx INTEGER NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL,
    text TEXT NOT NULL, metadata TEXT NOT NULL, vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_source ON chunks(source);
CREATE TABLE IF NOT EXISTS atoms (
    rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
    chunk_id TEXT NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL, start INTEGER, "end" INTEGER, text TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS atoms_chunk ON atoms(chunk_id);
CREATE TABLE IF NOT EXISTS questions (
    rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
    atom_id TEXT NOT NULL REFERENCES atoms(id) ON DELETE CASCADE,
    chunk_id TEXT NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS questions_atom ON questions(atom_id);
"""
_FTS = """
CREATE VIRTUAL TABLE IF NOT EXISTS {t}_fts USING fts5(
    text, content='{t}', content_rowid='rowid', tokenize='porter unicode61');
CREATE TRIGGER IF NOT EXISTS {t}_ai AFTER INSERT ON {t} BEGIN
    INSERT INTO {t}_fts(rowid, text) VALUES (new.rowid, new.text); END;
CREATE TRIGGER IF NOT EXISTS {t}_ad AFTER DELETE ON {t} BEGIN
    INSERT INTO {t}_fts({t}_fts, rowid, text) VALUES ('delete', old.rowid, old.text); END;
"""


class SQLiteStore(Store):
    """An index in a directory: ``isotope.db`` plus the ``vectors/`` cache."""

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
        self._local = threading.local()
        self._matrices: dict[Kind, _Vectors] = {}
        conn = self._conn()
        version = self._schema_version(conn)
        if version is None:
            conn.executescript(
                "BEGIN IMMEDIATE;" + _SCHEMA + "".join(_FTS.format(t=t) for t in KINDS)
                + "INSERT OR IGNORE INTO meta VALUES ('generation', '0');"
                + f"INSERT OR IGNORE INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}');"
                + "COMMIT;"
            )
        elif version != SCHEMA_VERSION:
            raise InvalidIndex(
                f"{self.directory} has index schema {version}; this isotope reads schema "
                f"{SCHEMA_VERSION}. Upgrade isotope, or re-ingest into a new index"
            )

    # -- connections -------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self.directory / DB_NAME, timeout=60, isolation_level=None,
                    check_same_thread=False,
                )
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("PRAGMA foreign_keys=ON")
            except sqlite3.DatabaseError as exc:
                raise InvalidIndex(
                    f"{self.directory / DB_NAME} is not a readable isotope index ({exc})"
                ) from exc
            self._local.conn = conn
        return conn

    @staticmethod
    def _schema_version(conn: sqlite3.Connection) -> int | None:
        try:
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.OperationalError:
            return None
        except sqlite3.DatabaseError as exc:
            raise InvalidIndex(f"not a readable isotope index ({exc})") from exc
        return int(json.loads(row[0])) if row else None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that bumps the index generation."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('generation', '1') ON CONFLICT(key) "
                "DO UPDATE SET value = CAST(value AS INTEGER) + 1"
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- meta --------------------------------------------------------------------------
    def get_meta(self, key: str) -> Any:
        row = self._conn().execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def set_meta(self, key: str, value: Any) -> None:
        self._conn().execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, json.dumps(value)),
        )

    # -- writes ------------------------------------------------------------------------
    def add(self, batch: SourceBatch) -> None:
        source = batch.source
        with self._write() as conn:
            conn.execute("DELETE FROM sources WHERE uri=?", (source.uri,))
            conn.execute(
                "INSERT INTO sources(uri, content_hash, size, mtime, loader, ingested_at, "
                "metadata) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    source.uri, source.content_hash, source.size, source.mtime, source.loader,
                    (source.ingested_at or datetime.now(UTC)).isoformat(),
                    json.dumps(source.metadata),
                ),
            )
            conn.executemany(
                'INSERT INTO chunks(id, source, idx, start, "end", text, metadata, vector) '
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (c.id, source.uri, c.index, c.start, c.end, c.text,
                     json.dumps(c.metadata), _blob(v))
                    for c, v in zip(batch.chunks, batch.chunk_vectors, strict=True)
                ],
            )
            conn.executemany(
                'INSERT INTO atoms(id, chunk_id, idx, start, "end", text, vector) '
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (a.id, a.chunk_id, a.index, a.start, a.end, a.text, _blob(v))
                    for a, v in zip(batch.atoms, batch.atom_vectors, strict=True)
                ],
            )
            conn.executemany(
                "INSERT INTO questions(id, atom_id, chunk_id, text, vector) VALUES (?, ?, ?, ?, ?)",
                [
                    (q.id, q.atom_id, q.chunk_id, q.text, _blob(v))
                    for q, v in zip(batch.questions, batch.question_vectors, strict=True)
                ],
            )

    def delete_source(self, uri: str) -> bool:
        with self._write() as conn:
            return conn.execute("DELETE FROM sources WHERE uri=?", (uri,)).rowcount > 0

    # -- reads -------------------------------------------------------------------------
    def _matrix(self, kind: Kind) -> _Vectors:
        """The vectors of ``kind`` as of the current generation, from memory, from the
        ``vectors/`` cache (immutable files named by generation), or rebuilt from SQLite."""
        generation = int(self.get_meta("generation") or 0)
        cached = self._matrices.get(kind)
        if cached and cached.generation == generation:
            return cached
        folder = self.directory / "vectors"
        try:
            if json.loads((folder / f"{kind}.json").read_text())["generation"] == generation:
                index = np.load(folder / f"{kind}-{generation}.idx.npy")
                matrix = np.load(folder / f"{kind}-{generation}.npy", mmap_mode="r")
                if index.shape == (2, len(matrix)):
                    found = _Vectors(generation, index[0], index[1], matrix)
                    self._matrices[kind] = found
                    return found
        except (OSError, ValueError, KeyError):
            pass
        conn = self._conn()
        chunk_rowid = {
            "questions": "(SELECT c.rowid FROM chunks c WHERE c.id = t.chunk_id)",
            "atoms": "(SELECT c.rowid FROM chunks c WHERE c.id = t.chunk_id)",
            "chunks": "t.rowid",
        }[kind]
        conn.execute("BEGIN")
        try:
            generation = int(self.get_meta("generation") or 0)
            data = conn.execute(
                f"SELECT t.rowid, {chunk_rowid}, t.vector FROM {kind} t ORDER BY t.rowid"
            ).fetchall()
        finally:
            conn.execute("COMMIT")
        rows = np.fromiter((r[0] for r in data), dtype=np.int64, count=len(data))
        groups = np.fromiter((r[1] for r in data), dtype=np.int64, count=len(data))
        if data:
            matrix = np.frombuffer(b"".join(r[2] for r in data), dtype=np.float32)
            matrix = matrix.reshape(len(data), -1)
        else:
            matrix = np.zeros((0, 0), dtype=np.float32)
        built = _Vectors(generation, rows, groups, matrix)
        self._matrices[kind] = built
        self._save_matrix(kind, built)
        return built

    def _save_matrix(self, kind: Kind, vectors: _Vectors) -> None:
        folder = self.directory / "vectors"
        generation = vectors.generation
        try:
            folder.mkdir(exist_ok=True)
            index = np.vstack([vectors.rows, vectors.groups])
            for name, array in ((f"{kind}-{generation}.idx.npy", index),
                                (f"{kind}-{generation}.npy", vectors.matrix)):
                fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
                with os.fdopen(fd, "wb") as fh:
                    np.save(fh, array)
                os.replace(tmp, folder / name)
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                json.dump({"generation": generation}, fh)
            os.replace(tmp, folder / f"{kind}.json")
            for old in folder.glob(f"{kind}-*.npy"):  # older generations
                if not old.name.startswith(f"{kind}-{generation}."):
                    old.unlink(missing_ok=True)
        except OSError:  # a read-only index still answers, just without the cache
            log.debug("cannot write the vector cache in %s", folder, exc_info=True)

    def search(self, kind: Kind, vector: Vectors, k: int) -> list[Hit]:
        found = self._matrix(kind)
        if not len(found.rows) or k <= 0:
            return []
        scores = found.matrix @ np.asarray(vector, dtype=np.float32)
        top = _top(scores, k)
        return self._hits(kind, [(int(found.rows[i]), float(scores[i])) for i in top])

    def search_by_chunk(
        self, kind: Kind, vector: Vectors, k: int, per_chunk: int = 3
    ) -> list[tuple[str, list[Hit]]]:
        found = self._matrix(kind)
        if not len(found.rows) or k <= 0:
            return []
        scores = found.matrix @ np.asarray(vector, dtype=np.float32)
        pool = max(64, 4 * k * per_chunk)
        while True:
            top = _top(scores, pool)
            picked: dict[int, list[int]] = {}
            for i in top:
                group = picked.get(int(found.groups[i]))
                if group is None:
                    if len(picked) < k:
                        picked[int(found.groups[i])] = [int(i)]
                elif len(group) < per_chunk:
                    group.append(int(i))
            if len(picked) >= k or pool >= len(scores):
                break
            pool *= 4
        chosen = [i for group in picked.values() for i in group]
        hits = self._hits(kind, [(int(found.rows[i]), float(scores[i])) for i in chosen])
        by_chunk: dict[str, list[Hit]] = {}
        for hit in hits:
            by_chunk.setdefault(hit.chunk_id, []).append(hit)
        return list(by_chunk.items())

    def keyword_search(self, kind: Kind, query: str, k: int) -> list[Hit]:
        terms = re.findall(r"\w+", query.lower())
        if not terms or k <= 0:
            return []
        match = " OR ".join(f'"{t}"' for t in dict.fromkeys(terms))
        found = self._conn().execute(
            f"SELECT rowid, bm25({kind}_fts) FROM {kind}_fts WHERE {kind}_fts MATCH ? "
            f"ORDER BY bm25({kind}_fts) LIMIT ?",
            (match, k),
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

    def get_chunks(self, ids: Sequence[str]) -> dict[str, Chunk]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        found = self._conn().execute(
            f'SELECT id, source, idx, start, "end", text, metadata FROM chunks '
            f"WHERE id IN ({marks})",
            list(ids),
        )
        return {
            r[0]: Chunk(id=r[0], source=r[1], index=r[2], start=r[3], end=r[4], text=r[5],
                        metadata=json.loads(r[6]))
            for r in found
        }

    def get_source(self, uri: str) -> Source | None:
        row = self._conn().execute(
            "SELECT uri, content_hash, size, mtime, loader, ingested_at, metadata "
            "FROM sources WHERE uri=?", (uri,),
        ).fetchone()
        return _source(row) if row else None

    def sources(self) -> list[SourceInfo]:
        rows = self._conn().execute(
            "SELECT s.uri, s.content_hash, s.size, s.mtime, s.loader, s.ingested_at, s.metadata,"
            " (SELECT COUNT(*) FROM chunks c WHERE c.source = s.uri),"
            " (SELECT COUNT(*) FROM atoms a JOIN chunks c ON a.chunk_id = c.id"
            "   WHERE c.source = s.uri),"
            " (SELECT COUNT(*) FROM questions q JOIN chunks c ON q.chunk_id = c.id"
            "   WHERE c.source = s.uri)"
            " FROM sources s ORDER BY s.uri"
        ).fetchall()
        return [SourceInfo(_source(r[:7]), r[7], r[8], r[9]) for r in rows]

    def counts(self) -> dict[str, int]:
        conn = self._conn()
        return {
            table: int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            for table in ("sources", "chunks", "atoms", "questions")
        }

    def disk_size(self) -> int:
        return sum(p.stat().st_size for p in self.directory.rglob("*") if p.is_file())


@dataclass(frozen=True)
class _Vectors:
    """All vectors of one kind: SQLite rowids, the rowid of each one's chunk, the matrix."""

    generation: int
    rows: npt.NDArray[np.int64]
    groups: npt.NDArray[np.int64]
    matrix: Vectors


def _top(scores: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    """Indices of the ``k`` highest scores, best first."""
    k = min(k, len(scores))
    top = np.argpartition(-scores, k - 1)[:k]
    ordered: npt.NDArray[np.intp] = top[np.argsort(-scores[top], kind="stable")]
    return ordered


def _blob(vector: Vectors) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def _source(row: Sequence[Any]) -> Source:
    return Source(
        uri=row[0], content_hash=row[1], size=row[2], mtime=row[3], loader=row[4],
        ingested_at=datetime.fromisoformat(row[5]), metadata=json.loads(row[6]),
    )
