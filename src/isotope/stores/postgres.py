"""The server store: an index in a PostgreSQL database with pgvector
(``pip install 'isotopedb[postgres]'``), at ``postgresql://user@host/db?schema=NAME``.

The vectors live in the vector place the index names (:mod:`isotope.stores.vector_place`:
by default the rows' own vector columns), handed each write's vectors in its
transaction. Keyword search (``postgres_keywords``) is BM25 from the server's bm25 indexes
(pg_textsearch) or computed in SQL from postings made by FTS5's own tokenizer
(``postgres_sql``), ranked as the embedded store ranks.

Many writers: there is no index-wide writer lock. Each write is one transaction that
first takes a transaction-level advisory lock on its source, so two processes ingesting
different sources both make progress and the same source written twice at once is
serialised. A search runs in one REPEATABLE READ transaction (:meth:`snapshot`), so it
never sees a source half replaced.

What is here is what hangs together on this engine's connection and lock rules:
connections per thread, the read replicas a search may read (``postgres_replicas``), the
advisory locks and retried transactions of many writers, writes with ``COPY`` postings,
bulk loads, and check/repair; the schema is ``postgres_schema``. The writes and reads
both engines share are in :mod:`isotope.stores.sql_core`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import random
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from isotope.embedders import Embedder, Vectors
from isotope.errors import IndexLocked, InvalidIndex, IsotopeError, StoreError
from isotope.models import Condition
from isotope.stores import (
    KINDS,
    SCHEMA_VERSION,
    Hit,
    Inspection,
    Kind,
    VectorBackend,
    describe,
)
from isotope.stores.keywords import Tokenizer
from isotope.stores.postgres_keywords import KeywordSearch
from isotope.stores.postgres_replicas import (
    CONNECT_TIMEOUT,
    DOWN_FOR,
    PROBE_EVERY,
    ReplicaFailed,
    Replicas,
    share,
    shared,
)
from isotope.stores.postgres_schema import (
    bm25_indexes,
    chunk_postings,
    close_quietly,
    connect,
    replicas_in,
    schema_version,
    split_location,
    store_error,
    upgrade,
)
from isotope.stores.postgres_sql import build_memory, where
from isotope.stores.sql_core import SQLStore
from isotope.stores.sql_dialect import POSTGRES
from isotope.stores.vector_place import VectorPlace, chosen, is_default, open_place

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

PARAMETERS = 30_000
"""Bound values per INSERT statement (under PostgreSQL's limit of 65,535)."""
BM25_REPLICATED = (1, 2)
"""The pg_textsearch release from which its indexes reach read replicas: 1.0 and 1.1 keep
recent rows in shared memory and write their segments outside the WAL, so a standby's
bm25 index is empty or behind (a search there read 'could not read blocks 0..0')."""
WRITE_RETRIES = 6
"""Times a write the server aborted to break a deadlock is made (then its error stands)."""
T = TypeVar("T")
_WRITTEN: dict[tuple[str, str], int] = {}
"""Per server and schema: the primary's WAL position after this process's last write
(read your writes)."""
_WRITTEN_LOCK = threading.Lock()
_WAL_POSITION = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
"""The primary's WAL position, in bytes (what a replica must have replayed)."""


class PostgresStore(KeywordSearch, SQLStore):
    """An index in a schema of a PostgreSQL database."""

    concurrent_writers = True
    dialect = POSTGRES
    conditions_sql = staticmethod(where)

    def __init__(self, location: str, *, create: bool = True) -> None:
        try:
            import pgvector  # noqa: F401
            import psycopg  # noqa: F401
        except ImportError as exc:
            from isotope.errors import MissingDependency

            raise MissingDependency.from_import(exc, "an index in PostgreSQL",
                                                "postgres") from exc
        self.location = location
        self.where = describe(location)
        self._url, self.schema = split_location(location)
        self._local = threading.local()
        self._tokenizer = Tokenizer()
        self._dims: int | None = None
        self._bulk = False
        self._conns: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()
        self._conns_lock = threading.Lock()
        self._replicas: Replicas | None = None
        self._primary_seen: tuple[float, int | None] = (float("-inf"), None)
        self._primary_lock = threading.Lock()
        self._build_memory = "auto"
        """The ``hnsw_build_memory`` setting (a bm25 index build's memory too)."""
        self._tuned: dict[str, Any] = {}
        """The settings given to the place (given again to a place chosen later)."""
        self._options: dict[str, Any] = {}
        """The place's own settings given with ``vector_backend``."""
        self._identity: int | None = None
        """The primary's system identifier (its standbys have the same)."""
        self._place: VectorPlace = open_place("postgres", self, None)
        """Where the vectors live (the default until the index's meta is read)."""
        self.set_read_replicas([])  # (those the location names)
        conn = self._conn()
        version = self._guard(lambda: schema_version(conn, self.schema))
        if version is None and not create:
            raise InvalidIndex(f"no index at {self.where} (schema {self.schema} has no "
                               "isotope tables); create one with `isotope ingest` or give "
                               "another ?schema=")
        if (version or 0) < SCHEMA_VERSION:
            upgrade(conn, self.schema, location)
            self._wrote(conn, always=True)  # (a replica read waits for the new tables)
        elif version != SCHEMA_VERSION:
            raise InvalidIndex(f"{self.where} has index schema {version}; this isotope reads "
                               f"schema {SCHEMA_VERSION}. Upgrade isotope")
        try:  # (a role may not read the control file: then replicas are not compared)
            self._identity = int(self._rows(
                "SELECT system_identifier FROM pg_control_system()")[0][0])
        except Exception:
            log.debug("the primary's system identifier cannot be read", exc_info=True)
        found = self._rows("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        if found and tuple(int(p) for p in re.findall(r"\d+", found[0][0])[:2]) < (0, 8):
            raise InvalidIndex(f"{self.where}: the server's pgvector is {found[0][0]}; isotope "
                               "needs 0.8 or newer (iterative index scans): ALTER EXTENSION "
                               "vector UPDATE after installing it")
        self.keyword_engine = str(self.get_meta("keyword_engine") or "postings")
        """``pg_textsearch`` (bm25 indexes in the server) or ``postings`` (isotope's own
        postings tables, for a server without pg_textsearch or an index made before it)."""
        if self.keyword_engine == "postings":
            self._said_postings()
        found = self._rows("SELECT extversion FROM pg_extension WHERE extname = "
                           "'pg_textsearch'")
        made = self.get_meta("bm25_version")
        self._bm25_replicated = all(
            _version(str(v)) >= BM25_REPLICATED for v in (found[0][0] if found else "0",
                                                          made or "0"))
        """Whether the index's bm25 indexes reach read replicas: made, and the server
        runs, with pg_textsearch 1.2 or newer (an index made by 1.0 or 1.1 stays behind
        on the standbys after an upgrade until it is made again: REINDEX); else keyword
        searches read the primary."""
        if isinstance(made := self.get_meta("vector_backend"), dict):
            # (an index made with another place reads it however it is opened: the
            # place's settings come with set_vector_backend)
            self._place = open_place("postgres", self, made)

    def _conn(self) -> psycopg.Connection[Any]:
        reading = getattr(self._local, "reading", None)
        if reading is not None:  # inside a snapshot read from a replica
            return reading[1]  # type: ignore[no-any-return]
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = connect(self._url, self.schema, self.location)
            self._local.conn = conn
            with self._conns_lock:
                self._conns.add(conn)
        return conn

    def _guard(self, call: Callable[[], Any]) -> Any:
        import psycopg

        try:
            return call()
        except psycopg.Error as exc:
            raise store_error(self.location, exc) from exc

    def _rows(self, sql: str, params: Any = None, *, prepare: bool | None = None
              ) -> list[tuple[Any, ...]]:
        """A read's rows (``prepare``: psycopg's, None: prepared once a connection has run
        it five times)."""
        import psycopg

        try:
            with self._watched():
                return self._conn().execute(sql, params, prepare=prepare).fetchall()
        except psycopg.Error as exc:
            raise self._read_error(exc) from exc

    def _watched(self) -> contextlib.AbstractContextManager[None]:
        """A statement on a read replica is cut off if it has not answered within
        ``ANSWER_WITHIN`` (the search is then made again elsewhere)."""
        reading = getattr(self._local, "reading", None)
        if self._replicas is None:
            return contextlib.nullcontext()
        if reading is None:  # (a read a replica-served search makes on the primary)
            return self._replicas.watched(self._conn()) if getattr(
                self._local, "watch_primary", False) else contextlib.nullcontext()
        return self._replicas.watched(reading[1])

    def _read_error(self, exc: Exception) -> Exception:
        """The error of a failed read: :class:`ReplicaFailed` when a replica's connection
        broke (the read is made again elsewhere), else the store's."""
        import psycopg

        reading = getattr(self._local, "reading", None)
        if reading is not None and self._replicas is not None and (
                reading[1].broken or reading[1].closed
                or isinstance(exc, psycopg.OperationalError)):
            return self._replicas.lost(reading[0], exc)
        return store_error(self.location, exc, writing=False)

    def _vectors_of(self, kind: Kind, rows: list[int]) -> dict[int, Vectors]:
        if not rows:
            return {}
        self._stored_dim()  # (another process may have given the index a place since)
        return self._place.get(kind, rows)

    @contextmanager
    def _write(self, *sources: str, lock: str | None = None
               ) -> Iterator[psycopg.Connection[Any]]:
        """One write transaction holding the advisory lock of each source it touches
        (two-key locks: the index's schema, the source; taken in key order), or of
        ``lock``."""
        import psycopg

        conn = self._conn()
        if conn.info.transaction_status != 0:  # inside a snapshot: not a place to write
            raise IsotopeError("a write inside a snapshot() is not supported")
        try:
            with conn.transaction():
                if sources:
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtext(%s), k) FROM (SELECT DISTINCT "
                        "hashtext(u) AS k FROM unnest(%s::text[]) u) keys ORDER BY k",
                        (self.schema, list(sources)))
                if lock:
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s)::bigint << 32)",
                                 (lock,))
                yield conn
        except psycopg.Error as exc:
            raise store_error(self.location, exc) from exc
        if not getattr(self._local, "log_only", False):
            self._wrote(conn)

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One REPEATABLE READ transaction; on a read replica when there are healthy ones
        that have replayed this process's writes (see
        :mod:`isotope.stores.postgres_replicas`)."""
        import psycopg

        held = getattr(self._local, "reading", None) or (None, getattr(self._local, "conn",
                                                                        None))
        if held[1] is not None and not held[1].closed and held[1].info.transaction_status:
            yield  # (inside a read already)
            return
        picked = getattr(self._local, "replica", None)  # (reading() chose it)
        if picked is not None:
            self._local.reading = picked
            conn = picked[1]
        else:
            conn = self._conn()
        try:
            with self._watched():
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            try:
                yield
            except BaseException:
                if not conn.closed and not conn.broken:
                    conn.execute("ROLLBACK")
                raise
            with self._watched():
                conn.execute("COMMIT")
        except psycopg.Error as exc:
            raise self._read_error(exc) from exc
        finally:
            self._local.reading = None

    def _on_replica(self) -> bool:
        return (getattr(self._local, "reading", None) or getattr(self._local, "replica",
                                                                 None)) is not None

    # -- read replicas -----------------------------------------------------------------
    def set_read_replicas(self, urls: Sequence[str], max_lag: float = 5.0,
                          wait: float = 1.0) -> None:
        if self._replicas is not None:
            self._replicas.close()
        self._replicas = None
        urls = [*replicas_in(self.location), *urls]
        if urls:
            bad = [describe(u) for u in urls if not str(u).startswith(("postgresql://",
                                                                        "postgres://"))]
            if bad:
                raise InvalidIndex(f"read replicas must be postgresql:// URLs: {', '.join(bad)}")
            self._replicas = Replicas([split_location(str(u))[0] for u in urls],
                                      self.schema, max_lag, wait, self._primary_position,
                                      lambda: (self._identity, SCHEMA_VERSION))

    def _primary_position(self) -> int | None:
        """The primary's WAL position (bytes; None: it does not answer), read on a
        connection of its own by one thread at a time, at most once per
        :data:`PROBE_EVERY` seconds (once per :data:`DOWN_FOR` while it does not answer);
        the other threads take the last answer meanwhile."""
        if not self._primary_lock.acquire(blocking=False):
            return self._primary_seen[1]
        try:
            seen, position = self._primary_seen
            if time.monotonic() - seen < (PROBE_EVERY if position is not None else DOWN_FOR):
                return position
            try:
                conn = connect(self._url, self.schema, self.location, timeout=CONNECT_TIMEOUT)
                try:
                    found = conn.execute(_WAL_POSITION).fetchone()
                finally:
                    close_quietly(conn)
                position = int(found[0]) if found else None
            except Exception:
                position = None
            self._primary_seen = (time.monotonic(), position)
            return position
        finally:
            self._primary_lock.release()

    def replicas(self) -> list[dict[str, Any]]:
        return self._replicas.status() if self._replicas is not None else []

    def reading(self, call: Callable[[], T]) -> T:
        """``call()`` (a search: its snapshots) on one read replica, chosen once, made
        again on another (or the primary) if that one stops answering. Reads outside
        it (an ingest's, a copy's, learning's) read the primary."""
        if (self._replicas is None or getattr(self._local, "in_reading", False)
                or not self._place.in_rows):
            return call()  # (no replicas, or inside a read already: its pick holds, even
            # the primary when no replica was healthy; with the vectors outside the rows,
            # the primary: the log and the place are read together, as of now)
        self._local.in_reading = True
        try:
            for _ in range(len(self._replicas.replicas) + 1):
                key = (self._url, self.schema)
                self._local.replica = self._replicas.pick(max(_WRITTEN.get(key, -1),
                                                              shared(key)))
                try:
                    return call()
                except ReplicaFailed:
                    continue  # (left out now: the next pick is another replica or primary)
                finally:
                    self._local.replica = None
            return call()
        finally:
            self._local.in_reading = False

    def log_query(self, entry: Any, keep_days: float) -> None:
        """The query log's row is no write a later search must wait for (read your
        writes): searches would each wait for the last one's log row."""
        self._local.log_only = True
        try:
            super().log_query(entry, keep_days)
        finally:
            self._local.log_only = False

    def _wrote(self, conn: psycopg.Connection[Any], *, always: bool = False) -> None:
        """A write committed on ``conn``: later reads of this process wait for a replica
        that has replayed it (its WAL position, read now; only with replicas, unless
        ``always``)."""
        if self._replicas is None and not always:
            return
        try:
            row = conn.execute(_WAL_POSITION).fetchone()
        except Exception:  # (the write is committed; a replica may not show it at once)
            log.warning("%s: the primary did not say where its last write is; a search on "
                        "a replica may miss it for a moment", self.where, exc_info=True)
            return
        with _WRITTEN_LOCK:
            key = (self._url, self.schema)
            _WRITTEN[key] = max(_WRITTEN.get(key, -1), int(row[0]) if row else -1)
        share(key, _WRITTEN[key])

    @contextmanager
    def writer(self, wait: float = 0.0) -> Iterator[None]:
        """Writers run side by side (each write locks only its sources), except while
        :meth:`repair` holds the index: this takes the index's lock shared."""
        with self._index_lock(wait, shared=True):
            yield

    def _index_lock(self, wait: float, *, shared: bool) -> AbstractContextManager[None]:
        return self._advisory(f"isotope-index:{self.schema}", wait, shared=shared, busy=(
            f"{self.where} is being repaired by another process; try again when it is "
            "done (or pass --wait SECONDS)"))

    @contextmanager
    def _advisory(self, key: str, wait: float, *, shared: bool, busy: str
                  ) -> Iterator[None]:
        """The advisory lock ``key`` of this connection's session; IndexLocked (``busy``)
        after ``wait`` seconds of another session holding it."""
        how = "_shared" if shared else ""
        deadline = time.monotonic() + wait
        while not self._rows(f"SELECT pg_try_advisory_lock{how}(hashtext(%s))", (key,))[0][0]:
            if time.monotonic() >= deadline:
                raise IndexLocked(busy)
            time.sleep(0.2)
        try:
            yield
        finally:
            self._rows(f"SELECT pg_advisory_unlock{how}(hashtext(%s))", (key,))

    def close(self) -> None:
        self._place.close()
        if self._replicas is not None:
            self._replicas.close()
        with self._conns_lock:
            for conn in list(self._conns):
                close_quietly(conn)
            self._conns.clear()
        self._local.conn = None

    # -- where the vectors are kept ----------------------------------------------------
    def set_vector_backend(self, backend: VectorBackend) -> str:
        """The place the setting names (:mod:`isotope.stores.vector_place`; the default
        is the rows' own vector columns) for a new index, once it has
        claimed what it holds (a collection another index uses is refused before
        anything is written); an index keeps what it was made with
        (:meth:`fixed_settings`). Sends what a crash left pending when no other process
        is sending."""
        place = chosen("postgres", backend)
        made = self.get_meta("vector_backend")
        if made is None and not is_default("postgres", place.name) and not self._rows(
                "SELECT 1 FROM sources LIMIT 1"):
            new = place.new(self, backend)
            with self._write(lock=f"isotope-dim:{self.schema}") as conn:
                row = conn.execute("SELECT value FROM meta WHERE key = 'vector_backend'"
                                   ).fetchone()
                empty = not conn.execute("SELECT 1 FROM sources UNION ALL SELECT 1 FROM meta "
                                         "WHERE key = 'vector_dim' LIMIT 1").fetchone()
                if row is None and empty:  # (no other process wrote or made it so meanwhile)
                    from psycopg.types.json import Jsonb

                    claimed = place(self, new, backend.options)
                    claimed.prepare(conn)
                    try:  # (refused: the transaction, and so the index, is left as it was)
                        claimed.claim()
                    finally:
                        claimed.close()
                    conn.execute("INSERT INTO meta(key, value) VALUES ('vector_backend', %s)",
                                 (Jsonb(new),))
            made = self.get_meta("vector_backend")
        self._options = backend.options
        if isinstance(made, dict):
            self._use(open_place("postgres", self, made, backend.options))
            if any(self._place.pending(k) for k in KINDS):
                try:  # (what a crash left pending)
                    self._place.after_write()
                except StoreError as exc:
                    log.warning("%s", exc)
        return self._place.setting

    def _after_write(self) -> None:
        self._place.after_write()

    def _access_changed(self, conn: psycopg.Connection[Any], uris: Sequence[str]) -> None:
        """The place is told (one that keeps who may see beside the vectors logs their
        items again, to send their metadata after the write)."""
        self._follow_backend()
        self._place.relabel(conn, uris)

    def set_meta(self, key: str, value: Any) -> None:
        from psycopg.types.json import Jsonb

        self._rows("INSERT INTO meta(key, value) VALUES (%s, %s) ON CONFLICT (key) DO "
                   "UPDATE SET value = excluded.value RETURNING key", (key, Jsonb(value)))
        self._wrote(self._conn())

    # -- writes ------------------------------------------------------------------------
    def _ensure_dim(self, dim: int) -> None:
        """Record the vectors' dimension and have the place make each kind's search index
        that is missing, once per index, in a transaction of its own (committed before
        any row is written, so a write that fails later cannot undo them); then refuse
        vectors of another dimension. The catalog is read first, without a lock: ``CREATE
        INDEX IF NOT EXISTS`` takes a lock on its table even when the index is there, and
        four writers' first writes deadlocked on it against each other's inserts. The
        first vectors also fix what the place fixes with them (``pg_vector_index``)."""
        if self._dims == dim:
            return
        self._follow_backend()
        stored = self.get_meta("vector_dim")
        if stored is not None and int(stored) != dim:
            raise InvalidIndex(f"{self.where} holds vectors of {stored} dimensions, not "
                               f"{dim}; use the index's embedding model")
        if stored is None or (not self._bulk and self._place.missing_indexes()):
            with self._write(lock=f"isotope-dim:{self.schema}") as conn:
                row = conn.execute("SELECT value FROM meta WHERE key = 'vector_dim'"
                                   ).fetchone()
                if row is not None and int(row[0]) != dim:
                    raise InvalidIndex(f"{self.where} holds vectors of {row[0]} dimensions, "
                                       f"not {dim}; use the index's embedding model")
                if row is None:  # (given another place meanwhile by another process?)
                    self._follow_backend()
                    self._place.first_vectors(conn, dim)
                if not self._bulk:  # (again if a bulk load was cut short before making them)
                    self._place.make_indexes(conn, dim)
                if row is None:
                    conn.execute("INSERT INTO meta(key, value) VALUES ('vector_dim', %s)",
                                 (json.dumps(dim),))
        self._dims = dim

    def missing_indexes(self, conn: psycopg.Connection[Any] | None = None) -> list[Kind]:
        """The kinds whose vector index is missing (a bulk load cut short leaves them so:
        searches then scan every row; :meth:`check` says so and :meth:`repair` makes
        them). None where the place keeps no index in the database."""
        return self._place.missing_indexes(conn)

    def _indexes(self, conn: psycopg.Connection[Any] | None) -> set[str]:
        rows = (conn.execute if conn is not None else self._conn().execute)(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s", (self.schema,)
        ).fetchall()
        return {r[0] for r in rows}

    def _build_indexes(self) -> None:
        """Make the missing bm25 and vector indexes, each in a transaction of its own
        (a vector index by the place, with the memory its graph wants)."""
        for kind in self.missing_bm25():
            with self._write(lock=f"isotope-dim:{self.schema}") as conn:
                memory = build_memory(self._build_memory, 0, 0)
                conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (memory,))
                for statement in bm25_indexes(self.schema, (kind,)):
                    conn.execute(statement)
        dim = self._stored_dim()
        if dim is not None:
            self._place.build_indexes(dim)

    def set_vector_build(self, index: str = "hnsw", memory: str = "auto",
                         workers: int = 0) -> None:
        self._tuned.update({"pg_vector_index": index, "build": (memory, workers)})
        self._place.tune("pg_vector_index", index)
        self._place.tune("build", (memory, workers))
        self._build_memory = memory

    @contextmanager
    def bulk(self) -> Iterator[None]:
        """Load an empty index faster: its vector and bm25 indexes are made once at the
        end (a build over all the rows) instead of grown row by row. Vector searches
        meanwhile scan exactly; keyword searches find nothing (and say so once). A load
        cut short leaves them missing; the next bulk load (``copy --resume``), write or
        repair makes them."""
        if self.counts()["sources"]:
            try:
                yield
            finally:
                self._build_indexes()
            return
        with self._write() as conn:
            self._place.drop_indexes(conn)
            for kind in KINDS if self.keyword_engine == "pg_textsearch" else ():
                # (qualified: a name not in the schema is looked for along the search
                # path, and another index's in public would go)
                conn.execute(f'DROP INDEX IF EXISTS "{self.schema}".{kind}_bm25')
        self._bulk, self._dims = True, None
        try:
            yield
        finally:
            self._bulk = False
            self._dims = None
            self._build_indexes()

    def _stored_dim(self) -> int | None:
        if self._dims is None:
            value = self.get_meta("vector_dim")
            if value is not None:
                self._follow_backend()
            self._dims = int(value) if value is not None else None
        return self._dims

    def _follow_backend(self) -> None:
        """Another process may have given this empty index another place since it was
        opened here: read so before its first vectors are read or written."""
        if not self._place.made and isinstance(made := self.get_meta("vector_backend"),
                                               dict):
            self._use(open_place("postgres", self, made, self._options))

    def _retried(self, write: Callable[[], T]) -> T:
        """``write`` (one transaction), made again when the server aborted it to break a
        deadlock or a serialization conflict with another writer (nothing of it was
        stored), up to :data:`WRITE_RETRIES` times with a growing, jittered pause."""
        for attempt in range(WRITE_RETRIES):
            try:
                return write()
            except StoreError as exc:
                if not exc.retry or attempt == WRITE_RETRIES - 1:
                    raise
                log.info("%s; writing again", exc)
                time.sleep(random.uniform(0.05, 0.2) * 2**attempt)
        raise AssertionError("unreachable")

    # -- writes (the algorithms are sql_core's) ------------------------------------------
    def _add_rows(self, conn: psycopg.Connection[Any], kind: Kind, columns: str,
                  values: list[tuple[Any, ...]], vectors: Vectors,
                  chunk_rows: Sequence[int | None], texts: Sequence[str]) -> list[int]:
        """Rows with their vectors where the place keeps them in the rows (its column),
        handed to the place in the same transaction, and, with the ``postings`` keyword
        engine, their postings made by FTS5's tokenizer (``COPY``); a bm25 index
        (pg_textsearch) reads the rows' text itself."""
        terms = self._terms(texts) if self.keyword_engine == "postings" else None
        counts = [n for _, n in terms] if terms is not None else [0] * len(values)
        column = self._place.column(kind, vectors)
        if column is None:  # (the vectors are elsewhere, the column empty)
            rows = self._insert(conn, kind, f"{columns}, ntok", [
                (*value, n) for value, n in zip(values, counts, strict=True)])
        else:
            rows = self._insert(conn, kind, f"{columns}, ntok, vector", [
                (*value, n, v) for value, n, v in zip(values, counts, column, strict=True)])
        self._place.add(conn, kind, rows, chunk_rows, vectors)
        if terms is not None:
            self._postings(conn, kind, rows, terms)
        return rows

    def _set_questions_text(self, conn: psycopg.Connection[Any],
                            changed: list[tuple[int, str, str | None, bool | None]], *,
                            logged: bool) -> None:
        """One write of each row (its text and its waiting flag together); a bm25 index
        (pg_textsearch) reads the new text from the row, isotope's postings are made
        again from it."""
        conn.cursor().executemany(
            "UPDATE chunks SET questions_text = %s, enriched = coalesce(%s, enriched) WHERE "
            "row = %s", [(text, flag, row) for row, text, _, flag in changed])
        remade = [(row, keywords) for row, _, keywords, _ in changed if keywords is not None]
        if remade and self.keyword_engine == "postings":
            chunk_postings(conn, remade, self._tokenizer)

    @staticmethod
    def _insert(conn: psycopg.Connection[Any], table: str, columns: str,
                values: list[tuple[Any, ...]]) -> list[int]:
        """Insert rows (the first column their id) and return their row numbers in the
        order given; in statements of at most PARAMETERS bound values (PostgreSQL's
        limit is 65,535), so a source of any size fits."""
        if not values:
            return []
        width = len(values[0])
        per = max(1, PARAMETERS // width)
        rows: dict[str, int] = {}
        for start in range(0, len(values), per):
            part = values[start:start + per]
            marks = ",".join("(" + ",".join(["%s"] * width) + ")" for _ in part)
            for row, item in conn.execute(
                    f"INSERT INTO {table} ({columns}) VALUES {marks} RETURNING row, id",
                    [v for value in part for v in value]).fetchall():
                rows[item] = int(row)
        return [rows[value[0]] for value in values]

    # -- reads -------------------------------------------------------------------------
    def search(self, kind: Kind, vector: Vectors, k: int,
               filters: Sequence[Condition] = ()) -> list[Hit]:
        self._stored_dim()  # (first: another process may have given it a place since)
        return self._hits(kind, self._place.search(kind, vector, k, filters))


    def first_pool(self, kind: Kind, k: int, per_chunk: int) -> int:
        """Sized for the kind (a chunk is one item; it has a few atoms and many
        questions): an HNSW search costs with its pool, and the contract's widening
        catches the rare query that needs more."""
        return {"chunks": k, "atoms": 3 * k, "questions": 4 * k}[kind]

    # -- integrity ---------------------------------------------------------------------
    def inspect(self) -> Inspection:
        """Rows lost since each source was stored (its counts), keyword statistics that
        drifted from the rows (the ``postings`` engine; foreign keys keep rows from
        losing their parents), bm25 indexes a bulk load cut short left missing, and what
        the place finds (vector indexes left missing, vectors not those of the rows)."""
        found = Inspection()
        with self._place.still(60.0), self.snapshot():  # (no send while compared)
            for uri, lost in self._lost_rows():
                found.problems.append(f"{uri}: source lost rows since it was stored ({lost})")
                found.damaged_sources.append(uri)
            for kind in KINDS if self.keyword_engine == "postings" else ():
                n, total = self._rows(f"SELECT count(*), coalesce(sum(ntok), 0) FROM {kind}")[0]
                stats = self._rows("SELECT coalesce(sum(n), 0), coalesce(sum(total), 0) FROM "
                                   "kw_stats WHERE kind = %s", (kind,))[0]
                if (int(n), int(total)) != (int(stats[0]), int(stats[1])):
                    found.problems.append(f"keyword statistics of {kind} drifted ({stats[0]} "
                                          f"rows counted, {n} held); run check --repair")
                drifted = self._rows(
                    f"SELECT count(*) FROM (SELECT term, sum(n) AS n FROM {kind}_df GROUP BY "
                    f"term HAVING sum(n) <> 0) d FULL JOIN (SELECT term, count(*) AS n FROM "
                    f"{kind}_terms GROUP BY term) t USING (term) WHERE d.n IS DISTINCT FROM "
                    f"t.n")[0][0]
                if drifted:
                    found.problems.append(f"the document frequencies of {drifted} terms of "
                                          f"{kind} drifted; run check --repair")
            found.problems += self._keyword_drift()
            for kind in self.missing_bm25():
                found.problems.append(
                    f"the bm25 index of {kind} is missing (a bulk load was cut short): "
                    "keyword searches of it fail; run check --repair")
            found.problems += self._place.problems(self.table_rows)
        return found

    def repair(self, embed: Embedder | None = None) -> None:
        """Write each chunk's questions' text again from its questions where it differs,
        recount the keyword statistics from the rows (the ``postings`` engine; rows,
        vectors and postings are kept together by transactions and foreign keys), make
        the vector and bm25 indexes a bulk load cut short did not, and have the place
        mend its vectors. Holds the index's lock exclusively."""
        with self._index_lock(60.0, shared=False):
            with self._write() as conn:
                self._expand_all(conn)
            if self.keyword_engine == "postings":
                with self._write() as conn:
                    conn.execute("DELETE FROM kw_stats")
                    for kind in KINDS:
                        conn.execute(f"INSERT INTO kw_stats SELECT %s, 0, count(*), "
                                     f"coalesce(sum(ntok), 0) FROM {kind}", (kind,))
                        conn.execute(f"DELETE FROM {kind}_df")
                        conn.execute(f"INSERT INTO {kind}_df SELECT term, 0, count(*) FROM "
                                     f"{kind}_terms GROUP BY term")
            self._build_indexes()  # those a bulk load cut short did not make
            self._place.repair(self.table_rows, lambda kind: None if embed is None else
                               functools.partial(self._embed_rows, kind, embed))

    def disk_size(self) -> int | None:
        rows = self._rows("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class "
                          "c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
                          "AND c.relkind IN ('r', 'm')", (self.schema,))
        return int(rows[0][0])

    def drop(self) -> None:
        """Remove the whole index (its schema) from the database."""
        holds = self._rows("SELECT 1 FROM pg_extension e JOIN pg_namespace n ON n.oid = "
                           "e.extnamespace WHERE e.extname = 'vector' AND n.nspname = %s",
                           (self.schema,))
        if holds:
            raise IsotopeError(f"{self.where}: the vector extension lives in schema "
                               f"{self.schema}; dropping it would take every index's vectors "
                               "with it")
        self._place.drop()  # (its vectors first: a failure leaves the index)
        with self._write() as conn:
            conn.execute(f'DROP SCHEMA "{self.schema}" CASCADE')

def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])
