"""The embedded default store: one directory holding a SQLite database (WAL mode).

SQLite is the source of truth for sources, chunks, atoms, questions and their vectors;
FTS5 tables (kept in step by triggers) serve keyword search. Vector search is exact: the
vectors of a kind are held as one contiguous float32 matrix and scored with one matrix
product. The matrix is cached in ``vectors/`` beside the database, in files named by the
index's state id: a random id that every write replaces, so a cache file can only ever
describe the one database state it was built from (a counter could repeat after a database
file is restored from a copy). A cache file is also spot-checked against the table when
loaded and compared row by row by :meth:`SQLiteStore.check`; a stale, missing or wrong
cache is rebuilt from SQLite.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt

from isotope.ann import search_groups
from isotope.ann.exact import ExactIndex
from isotope.embedders import Vectors
from isotope.errors import IndexDamaged, IndexLocked, InvalidIndex, IsotopeError, StoreError
from isotope.filters import Condition
from isotope.models import Atom, Chunk, Question, Source, content_hash
from isotope.stores import (
    KINDS,
    SCHEMA_VERSION,
    Hit,
    Inspection,
    Kind,
    SourceBatch,
    SourceInfo,
    Store,
    StoredChunk,
)
from isotope.stores.sqlite_schema import schema_version, upgrade

log = logging.getLogger(__name__)
DB_NAME = "isotope.db"

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _writable(directory: Path, db: Path) -> bool:
    """Whether the index can be written: its folder (for SQLite's side files) and its
    database file."""
    return os.access(directory, os.W_OK) and (not db.exists() or os.access(db, os.W_OK))


def _connect(db: Path, read_only: bool) -> sqlite3.Connection:
    """A connection to ``db``. A read-only index (a read-only folder or file system) is
    opened with ``mode=ro``, or, when SQLite cannot create the WAL side files it would
    need for that, as ``immutable``, but only when no write waits in the WAL file
    (``immutable`` would not see it)."""
    if not read_only:
        conn = sqlite3.connect(db, timeout=60, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn
    from urllib.parse import quote

    path = quote(str(db.resolve()))
    wal = db.with_name(db.name + "-wal")
    pending = wal.exists() and wal.stat().st_size > 0
    for mode in ("mode=ro",) if pending else ("mode=ro", "immutable=1"):
        conn = sqlite3.connect(f"file:{path}?{mode}", uri=True, timeout=60,
                               isolation_level=None, check_same_thread=False)
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError:
            conn.close()
    raise sqlite3.OperationalError(
        "unable to open the read-only database" + (
            f": recent writes wait in {wal.name}; open the index once where it can be "
            "written (or copy it with its -wal file to a writable folder)" if pending else ""))


def _store_error(db: Path, exc: sqlite3.DatabaseError) -> IsotopeError:
    """The named isotope error for a failure of SQLite on ``db``."""
    text = str(exc)
    if "full" in text:
        return StoreError(f"the disk holding {db} is full ({text}); nothing of this write "
                          "was stored: free some space and run the same command again")
    if "readonly" in text or "read-only" in text:
        return StoreError(f"the index at {db.parent} is read-only ({text}); copy it to a "
                          "writable folder to change it")
    if "locked" in text or "busy" in text:
        return IndexLocked(f"the index at {db.parent} is busy ({text}); try again, or "
                           "wait longer (--wait SECONDS)")
    return IndexDamaged(f"the index file {db} is damaged ({text}); `isotope check` names "
                        "the sources affected, or ingest into a new index")


def _guarded(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """``method`` with SQLite's errors turned into named isotope errors that name the
    index file."""
    import functools

    @functools.wraps(method)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except sqlite3.DatabaseError as exc:
            store = args[0]
            assert isinstance(store, SQLiteStore)
            raise _store_error(store.directory / DB_NAME, exc) from exc

    return run


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
        elif not create and db.stat().st_size == 0:  # SQLite would write a header in it
            raise InvalidIndex(f"{db} is not an isotope index (it is empty); give the right "
                               "--index, or delete the file and ingest again")
        self._local = threading.local()
        self._indexes: dict[Kind, tuple[str | None, ExactIndex]] = {}
        """Each kind's vector index with the state it is of."""
        self.read_only = not _writable(self.directory, db)
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
        if not self.read_only and self.get_meta("state") is None:
            self.set_meta("state", uuid.uuid4().hex)

    # -- connections -------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            db = self.directory / DB_NAME
            try:
                conn = _connect(db, self.read_only)
            except sqlite3.DatabaseError as exc:
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
                conn.execute("INSERT INTO meta(key, value) VALUES ('state', ?) ON "
                             "CONFLICT(key) DO UPDATE SET value = excluded.value",
                             (json.dumps(uuid.uuid4().hex),))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        log.debug("rollback failed", exc_info=True)
                raise
        except sqlite3.DatabaseError as exc:
            raise _store_error(self.directory / DB_NAME, exc) from exc

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
            raise _store_error(self.directory / DB_NAME, exc) from exc
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
        import fcntl

        path = self.directory / "write.lock"
        if self.read_only:
            raise StoreError(f"the index at {self.directory} is read-only; copy it to a "
                             "writable folder to change it")
        with open(path, "a+") as fh:
            deadline = time.monotonic() + wait
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        fh.seek(0)
                        holder = fh.read().strip() or "unknown"
                        raise IndexLocked(
                            f"another process (pid {holder}) is writing to the index at "
                            f"{self.directory}; wait for it to finish, or let this one wait "
                            "(--wait SECONDS, or Isotope.open(..., lock_wait=SECONDS))"
                        ) from None
                    time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            try:
                fh.seek(0)
                fh.truncate()
                fh.write(str(os.getpid()))
                fh.flush()
                yield
            finally:
                fh.seek(0)
                fh.truncate()
                fcntl.flock(fh, fcntl.LOCK_UN)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- meta --------------------------------------------------------------------------
    @_guarded
    def get_meta(self, key: str) -> Any:
        row = self._conn().execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    @_guarded
    def set_meta(self, key: str, value: Any) -> None:
        self._conn().execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, json.dumps(value)),
        )

    # -- writes ------------------------------------------------------------------------
    @_guarded
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
            hashes = batch.chunk_hashes or [content_hash(c.text) for c in batch.chunks]
            conn.executemany(
                'INSERT INTO chunks(id, source, idx, start, "end", text, metadata, vector, '
                "hash, context) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (c.id, source.uri, c.index, c.start, c.end, c.text,
                     json.dumps(c.metadata), _blob(v), h, c.context)
                    for c, v, h in zip(batch.chunks, batch.chunk_vectors, hashes, strict=True)
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

    @_guarded
    def delete_source(self, uri: str) -> bool:
        with self._write() as conn:
            return conn.execute("DELETE FROM sources WHERE uri=?", (uri,)).rowcount > 0

    # -- reads -------------------------------------------------------------------------
    def _index(self, kind: Kind) -> ExactIndex:
        """The vector index of ``kind`` as of the index's current state: from memory,
        from ``vectors/`` (files named by state id, spot-checked against the table), or
        built from SQLite."""
        state = self.get_meta("state")
        cached = self._indexes.get(kind)
        if cached and state is not None and cached[0] == state:
            return cached[1]
        loaded = self._load_index(kind, state)
        if loaded is not None:
            self._indexes[kind] = (state, loaded)
            return loaded
        state, built = self._build_index(kind)
        if state is not None:
            self._save_index(kind, state, built)
        self._indexes[kind] = (state, built)
        return built

    def _build_index(self, kind: Kind) -> tuple[str | None, ExactIndex]:
        """Every sound vector of ``kind`` from the table, with the state it is of."""
        conn = self._conn()
        with self.snapshot():
            state = self.get_meta("state")
            data = conn.execute(f"SELECT t.rowid, {_CHUNK_ROWID[kind]}, t.vector FROM {kind} t "
                                "ORDER BY t.rowid").fetchall()
        size = self._vector_bytes(data)
        sound = [r for r in data if len(r[2]) == size and r[1] is not None]
        if len(sound) < len(data):  # `check` names their sources, `repair` redoes them
            log.warning("%d %s of the index at %s are damaged (a vector of the wrong size, "
                        "or no chunk) and left out of search; run `isotope check`",
                        len(data) - len(sound), kind, self.directory)
        index = ExactIndex()
        if sound:
            index.add(np.fromiter((r[0] for r in sound), dtype=np.int64, count=len(sound)),
                      np.fromiter((r[1] for r in sound), dtype=np.int64, count=len(sound)),
                      np.frombuffer(b"".join(r[2] for r in sound),
                                    dtype=np.float32).reshape(len(sound), -1))
        return state, index

    def _vector_bytes(self, data: Sequence[Sequence[Any]]) -> int:
        """The size of a sound vector: the index's dimension, else the commonest size."""
        dim = (self.get_meta("embedding") or {}).get("dim")
        if dim:
            return 4 * int(dim)
        sizes = [len(r[2]) for r in data]
        return max(set(sizes), key=sizes.count) if sizes else 0

    def _stamp(self, kind: Kind) -> str | None:
        """The state the saved vector index of ``kind`` is of (None: none saved, or its
        stamp is unreadable)."""
        try:
            stamp = json.loads((self.directory / "vectors" / f"{kind}.json").read_text())
            return str(stamp["state"])
        except Exception:
            return None

    def _saved_index(self, kind: Kind, state: str | None) -> ExactIndex | None:
        """The saved index of ``state``, if its stamp and files are there and readable."""
        if state is None or self._stamp(kind) != state:
            return None
        return ExactIndex.load(self.directory / "vectors", f"{kind}-{state}")

    def _load_index(self, kind: Kind, state: str | None) -> ExactIndex | None:
        """The saved index of ``state`` if it agrees with the table on a sample of rows."""
        found = self._saved_index(kind, state)
        if found is None:
            return None
        rng = np.random.default_rng()
        sample = rng.choice(len(found), size=min(8, len(found)), replace=False)
        if self._differences(kind, found, sample):
            log.warning("the vector cache of %s in %s does not match the index; rebuilding it",
                        kind, self.directory / "vectors")
            return None
        return found

    def _differences(self, kind: Kind, found: ExactIndex,
                     positions: Sequence[int] | npt.NDArray[np.intp]) -> list[int]:
        """SQLite rowids among ``positions`` of a vector index whose vector or chunk there
        differs from the table's."""
        if not len(positions):
            return []
        ids, groups, vectors = found.items(positions)
        rows = [int(i) for i in ids]
        marks = ",".join("?" * len(rows))
        stored = {r[0]: (r[1], r[2]) for r in self._conn().execute(
            f"SELECT t.rowid, {_CHUNK_ROWID[kind]}, t.vector FROM {kind} t "
            f"WHERE t.rowid IN ({marks})", rows)}
        wrong = []
        for row, group, vector in zip(rows, groups, vectors, strict=True):
            chunk, blob = stored.get(row, (None, b""))
            if chunk != int(group) or blob != np.asarray(vector, dtype=np.float32).tobytes():
                wrong.append(row)
        return wrong

    def _save_index(self, kind: Kind, state: str, index: ExactIndex) -> None:
        folder = self.directory / "vectors"
        try:
            index.save(folder, f"{kind}-{state}")
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                json.dump({"state": state}, fh)
            os.replace(tmp, folder / f"{kind}.json")
            for old in folder.glob(f"{kind}-*.npy"):  # other states
                if not old.name.startswith(f"{kind}-{state}."):
                    old.unlink(missing_ok=True)
        except OSError:  # a read-only index still answers, just without the cache
            log.debug("cannot write the vector cache in %s", folder, exc_info=True)

    @_guarded
    def search(self, kind: Kind, vector: Vectors, k: int,
               filters: Sequence[Condition] = ()) -> list[Hit]:
        found = self._index(kind).search(vector, k, self._allowed(filters))
        return self._hits(kind, [(item, score) for item, _, score in found])

    @_guarded
    def search_by_chunk(
        self, kind: Kind, vector: Vectors, k: int, per_chunk: int = 3,
        filters: Sequence[Condition] = (),
    ) -> list[tuple[str, list[Hit]]]:
        if k <= 0:
            return []
        groups = search_groups(self._index(kind), vector, k, per_chunk,
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
        where, params = _where(filters)
        return np.fromiter(
            (r[0] for r in self._conn().execute(
                f"SELECT c.rowid FROM chunks c JOIN sources s ON s.uri = c.source "
                f"WHERE {where}", params)),
            dtype=np.int64,
        )

    @_guarded
    def keyword_search(self, kind: Kind, query: str, k: int,
                       filters: Sequence[Condition] = ()) -> list[Hit]:
        terms = re.findall(r"\w+", query.lower())
        if not terms or k <= 0:
            return []
        match = " OR ".join(f'"{t}"' for t in dict.fromkeys(terms))
        restrict, params = "", list[Any]()
        if filters:
            where, params = _where(filters)
            join = "c.id = t.chunk_id" if kind != "chunks" else "c.rowid = t.rowid"
            restrict = (f" AND rowid IN (SELECT t.rowid FROM {kind} t JOIN chunks c ON {join}"
                        f" JOIN sources s ON s.uri = c.source WHERE {where})")
        found = self._conn().execute(
            f"SELECT rowid, bm25({kind}_fts) FROM {kind}_fts WHERE {kind}_fts MATCH ?"
            f"{restrict} ORDER BY bm25({kind}_fts) LIMIT ?",
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

    @_guarded
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

    @_guarded
    def get_source(self, uri: str) -> Source | None:
        row = self._conn().execute(
            "SELECT uri, content_hash, size, mtime, loader, ingested_at, metadata, status, "
            "root FROM sources WHERE uri=?", (uri,),
        ).fetchone()
        return _source(row) if row else None

    @_guarded
    def sources(self) -> list[SourceInfo]:
        rows = self._conn().execute(
            "SELECT s.uri, s.content_hash, s.size, s.mtime, s.loader, s.ingested_at, s.metadata,"
            " s.status, s.root, (SELECT COUNT(*) FROM chunks c WHERE c.source = s.uri),"
            " (SELECT COUNT(*) FROM atoms a JOIN chunks c ON a.chunk_id = c.id"
            "   WHERE c.source = s.uri),"
            " (SELECT COUNT(*) FROM questions q JOIN chunks c ON q.chunk_id = c.id"
            "   WHERE c.source = s.uri)"
            " FROM sources s ORDER BY s.uri"
        ).fetchall()
        return [SourceInfo(_source(r[:9]), r[9], r[10], r[11]) for r in rows]

    @_guarded
    def counts(self) -> dict[str, int]:
        conn = self._conn()
        return {
            table: int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            for table in ("sources", "chunks", "atoms", "questions")
        }

    @_guarded
    def stored_chunks(self, uri: str) -> dict[str, StoredChunk]:
        conn = self._conn()
        found: dict[str, StoredChunk] = {}
        with self.snapshot():
            chunks = conn.execute(
                "SELECT id, hash, vector, context FROM chunks WHERE source=? AND hash IS NOT "
                "NULL", (uri,)).fetchall()
            for chunk_id, digest, vector, context in chunks:
                atoms = conn.execute(
                    'SELECT id, idx, start, "end", text, vector FROM atoms WHERE chunk_id=? '
                    "ORDER BY idx", (chunk_id,)).fetchall()
                questions = conn.execute(
                    "SELECT atom_id, text, vector FROM questions WHERE chunk_id=? "
                    "ORDER BY rowid", (chunk_id,)).fetchall()
                found[digest] = StoredChunk(
                    vector=_array([vector]),
                    atoms=[Atom(id=a[0], chunk_id=chunk_id, index=a[1], start=a[2], end=a[3],
                                text=a[4]) for a in atoms],
                    atom_vectors=_array([a[5] for a in atoms]),
                    questions=[Question(atom_id=q[0], chunk_id=chunk_id, text=q[1])
                               for q in questions],
                    question_vectors=_array([q[2] for q in questions]),
                    context=context,
                )
        return found

    def inspect(self) -> Inspection:
        """SQLite's own check, foreign keys, provenance (every question has its atom and
        chunk, every atom its chunk, every chunk its source), what each source stored
        against what it holds now, vector sizes, the keyword indexes against their tables,
        and the vector cache against the tables, row by row. Each problem names the
        sources it touches."""
        conn = self._conn()
        problems: list[str] = []
        damaged: set[str] = set()
        storage_damaged = False

        def found(count: int, what: str, uris: set[str]) -> None:
            if count:
                named = sorted(uris)
                more = f" and {len(named) - 5} more" if len(named) > 5 else ""
                problems.append(f"{count} {what}" + (
                    f" (sources: {', '.join(named[:5])}{more})" if named else ""))
                damaged.update(uris)

        try:
            with self.snapshot():
                for (row,) in conn.execute("PRAGMA quick_check"):
                    if row != "ok":
                        problems.append(f"sqlite: {row}")
                        storage_damaged = True
                for table, rowid, parent, _ in conn.execute("PRAGMA foreign_key_check"):
                    problems.append(f"{table} row {rowid} points to a missing {parent} row")
                for what, sql in _ORPHANS.items():
                    uris = [r[0] for r in conn.execute(sql)]
                    found(len(uris), what, {u for u in uris if u is not None})
                for uri, counts, *now in conn.execute(_COUNTS):
                    if counts is not None and json.loads(counts) != now:
                        stored = json.loads(counts)
                        lost = ", ".join(f"{n - m} {kind}" for kind, n, m in
                                         zip(("chunks", "atoms", "questions"), stored, now,
                                             strict=True) if n != m)
                        found(1, f"source lost rows since it was stored ({lost})", {uri})
                dim = (self.get_meta("embedding") or {}).get("dim")
                for kind in KINDS:
                    rows = conn.execute(f"SELECT COUNT(*) FROM {kind}").fetchone()[0]
                    if dim:
                        uris = [r[0] for r in conn.execute(
                            f"SELECT c.source FROM {kind} t LEFT JOIN chunks c ON "
                            f"c.rowid = {_CHUNK_ROWID[kind]} WHERE length(t.vector) != ?",
                            (4 * dim,))]
                        found(len(uris), f"{kind} with a vector that is not {dim}-d",
                              {u for u in uris if u is not None})
                    indexed = conn.execute(
                        f"SELECT COUNT(*) FROM {kind}_fts_docsize").fetchone()[0]
                    if indexed != rows:
                        problems.append(f"keyword index of {kind} has {indexed} rows, the "
                                        f"table {rows}")
                    try:  # FTS5 runs this check as a write: not on a read-only index
                        if not self.read_only:
                            conn.execute(f"INSERT INTO {kind}_fts({kind}_fts, rank) "
                                         "VALUES ('integrity-check', 1)")
                    except sqlite3.OperationalError as exc:  # busy: not checked this time
                        log.info("keyword index of %s not checked: %s", kind, exc)
                    except sqlite3.DatabaseError as exc:
                        problems.append(f"keyword index of {kind}: {exc}")
                    problems.extend(self._check_vector_cache(kind, rows))
        except sqlite3.DatabaseError as exc:
            storage_damaged = True
            problems.append(
                f"the database file {self.directory / DB_NAME} is damaged ({exc}): it cannot "
                "be repaired in place; ingest the sources again into a new index (and "
                "restore this one from a backup if you have one)")
        return Inspection(problems, sorted(damaged), storage_damaged)

    def _check_vector_cache(self, kind: Kind, rows: int) -> list[str]:
        """The saved vector index of the current state, if any, holds exactly the table's
        vectors (compared row by row, in slices)."""
        state = self.get_meta("state")
        if state is None or self._stamp(kind) != state:
            return []  # none, or stale: rebuilt from the tables when needed
        found = self._saved_index(kind, state)
        if found is None:
            return [f"vector cache of {kind} is unreadable (`isotope check --repair` drops "
                    "it; it is rebuilt on the next query)"]
        wrong = sum(len(self._differences(kind, found, range(a, min(len(found), a + 500))))
                    for a in range(0, len(found), 500))
        width = found.vectors.shape[1] if len(found) else 0
        sound = self._conn().execute(
            f"SELECT COUNT(*) FROM {kind} t WHERE length(t.vector) = ? AND "
            f"{_CHUNK_ROWID[kind]} IS NOT NULL", (4 * width,)).fetchone()[0]
        if wrong or sound != len(found) or (not len(found) and rows):
            return [f"vector cache of {kind} disagrees with the table ({wrong} of "
                    f"{len(found)} rows differ; the table has {sound} sound rows): "
                    "`isotope check --repair` drops it, and it is rebuilt on the next query"]
        return []

    def repair(self) -> None:
        """Rebuild the keyword indexes, drop orphan rows that no source owns and the
        vector cache (rebuilt on demand). Sources that lost rows are for the caller to
        ingest again or remove (:meth:`damaged_sources`)."""
        with self._write() as conn:
            conn.execute("DELETE FROM chunks WHERE source NOT IN (SELECT uri FROM sources)")
            conn.execute("DELETE FROM atoms WHERE chunk_id NOT IN (SELECT id FROM chunks)")
            conn.execute("DELETE FROM questions WHERE atom_id NOT IN (SELECT id FROM atoms) "
                         "OR chunk_id NOT IN (SELECT id FROM chunks)")
            for kind in KINDS:
                conn.execute(f"INSERT INTO {kind}_fts({kind}_fts) VALUES ('rebuild')")
        for path in (self.directory / "vectors").glob("*"):
            path.unlink(missing_ok=True)
        self._indexes.clear()

    def disk_size(self) -> int:
        return sum(p.stat().st_size for p in self.directory.rglob("*") if p.is_file())


def _array(blobs: list[bytes]) -> Vectors:
    if not blobs:
        return np.zeros((0, 0), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1).copy()


_CHUNK_ROWID: dict[Kind, str] = {
    "questions": "(SELECT c.rowid FROM chunks c WHERE c.id = t.chunk_id)",
    "atoms": "(SELECT c.rowid FROM chunks c WHERE c.id = t.chunk_id)",
    "chunks": "t.rowid",
}
"""SQL for the rowid of the chunk of an item ``t`` of each kind."""

_ORPHANS = {
    "questions without their atom": "SELECT c.source FROM questions q LEFT JOIN chunks c ON "
    "c.id = q.chunk_id WHERE NOT EXISTS (SELECT 1 FROM atoms a WHERE a.id = q.atom_id)",
    "questions without their chunk": "SELECT c.source FROM questions q LEFT JOIN chunks c ON "
    "c.id = q.chunk_id WHERE EXISTS (SELECT 1 FROM atoms a WHERE a.id = q.atom_id) AND NOT "
    "EXISTS (SELECT 1 FROM atoms a WHERE a.id = q.atom_id AND a.chunk_id = q.chunk_id)",
    "atoms without their chunk": "SELECT NULL FROM atoms a WHERE NOT EXISTS "
    "(SELECT 1 FROM chunks c WHERE c.id = a.chunk_id)",
    "chunks without their source": "SELECT c.source FROM chunks c WHERE NOT EXISTS "
    "(SELECT 1 FROM sources s WHERE s.uri = c.source)",
}
"""Rows whose parent is gone, each query giving the source involved (NULL if unknown)."""

_COUNTS = (
    "SELECT s.uri, s.counts, (SELECT COUNT(*) FROM chunks c WHERE c.source = s.uri), "
    "(SELECT COUNT(*) FROM atoms a JOIN chunks c ON a.chunk_id = c.id WHERE c.source = s.uri),"
    " (SELECT COUNT(*) FROM questions q JOIN chunks c ON q.chunk_id = c.id "
    "WHERE c.source = s.uri) FROM sources s")
"""Each source's stored counts (JSON, NULL before schema 4) and what it holds now."""

_OPS = {"eq": "=", "ne": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_COLUMNS = {"ingested_at": "s.ingested_at", "size": "s.size"}


def _where(conditions: Sequence[Condition]) -> tuple[str, list[Any]]:
    """SQL over chunks ``c`` joined to sources ``s`` meeting every condition; values
    (and metadata keys) are bound parameters."""
    parts: list[str] = []
    params: list[Any] = []
    for cond in conditions:
        if cond.key == "source":  # globs resolved by isotope.filters
            parts.append("(" + " OR ".join("c.source GLOB ?" for _ in cond.values) + ")")
            params += list(cond.values)
            continue
        if cond.key == "type":
            marks = ",".join("?" * len(cond.values))
            test = (f"(s.loader IN ({marks}) OR json_extract(s.metadata, '$.type') "
                    f"IN ({marks}))")
            parts.append(f"NOT {test}" if cond.op == "ne" else test)
            params += [*cond.values, *cond.values]
            continue
        op = _OPS[cond.op]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool)
                      for v in cond.values)
        if cond.key in _COLUMNS:
            column = _COLUMNS[cond.key]
            test = " OR ".join(f"{column} {op} ?" for _ in cond.values)
            parts.append(f"NOT ({test})" if cond.op == "ne" else f"({test})")
            params += list(cond.values)
            continue
        # A metadata value of the chunk or of its source; a list matches if any item does.
        value = ("CAST(j.value AS REAL)" if numeric else "j.value")
        kind = ("j.type IN ('integer', 'real') OR (j.type = 'text' AND "
                "trim(j.value) GLOB '[0-9+-.]*')") if numeric else "j.type = 'text'"
        test = " OR ".join(f"{value} {op} ?" for _ in cond.values)
        exists = (f"EXISTS (SELECT 1 FROM json_each(c.metadata, ?) j WHERE ({kind}) AND "
                  f"({test})) OR EXISTS (SELECT 1 FROM json_each(s.metadata, ?) j WHERE "
                  f"({kind}) AND ({test}))")
        path = f'$."{cond.key}"'
        parts.append(f"NOT ({exists})" if cond.op == "ne" else f"({exists})")
        params += [path, *cond.values, path, *cond.values]
    return " AND ".join(parts) or "1", params


def _blob(vector: Vectors) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def _source(row: Sequence[Any]) -> Source:
    return Source(
        uri=row[0], content_hash=row[1], size=row[2], mtime=row[3], loader=row[4],
        ingested_at=datetime.fromisoformat(row[5]), metadata=json.loads(row[6]),
        status=row[7], root=row[8],
    )
