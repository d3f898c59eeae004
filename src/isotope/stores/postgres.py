"""The server store: an index in a PostgreSQL database with pgvector
(``pip install 'isotopedb[postgres]'``), at ``postgresql://user@host/db?schema=NAME``.

Rows and vectors live together (``halfvec``, half the bytes of float32; a cosine moves by
less than 0.001); each kind has an HNSW index (cosine) made when the first vectors show
their dimension. Filtered vector searches use pgvector's iterative index scans and fall
back to an exact scan of the matching rows if those still return fewer than asked, so a
filter never silently shortens the results. Keyword search is BM25 computed in SQL from
postings made by FTS5's own tokenizer (``postgres_sql``), ranked as the embedded store
ranks.

Many writers: there is no index-wide writer lock. Each write is one transaction that
first takes a transaction-level advisory lock on its source, so two processes ingesting
different sources both make progress and the same source written twice at once is
serialised. A search runs in one REPEATABLE READ transaction (:meth:`snapshot`), so it
never sees a source half replaced.

Why one module of this size: what is left here is what only this engine does, and it
hangs together on the same connection and lock rules: connections per thread, the
advisory locks and retried transactions of many writers, writes with ``COPY`` postings,
the HNSW indexes and bulk loads, filtered vector search with its exact fallback, and
check/repair. The writes and reads both engines share are in
:mod:`isotope.stores.sql_core`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import random
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from isotope.embedders import Embedder, Vectors
from isotope.errors import IndexLocked, InvalidArgument, InvalidIndex, IsotopeError, StoreError
from isotope.models import Condition
from isotope.settings import is_vector_backend
from isotope.stores import (
    KINDS,
    SCHEMA_VERSION,
    Hit,
    Inspection,
    Kind,
    VectorBackend,
    describe,
)
from isotope.stores import postgres_chroma as chroma_rows
from isotope.stores.chroma_vectors import ChromaPlace, ChromaVectors, place_of
from isotope.stores.keywords import K1, Tokenizer, query_terms, query_words
from isotope.stores.postgres_replicas import (
    CONNECT_TIMEOUT,
    DOWN_FOR,
    PROBE_EVERY,
    ReplicaFailed,
    Replicas,
)
from isotope.stores.postgres_schema import (
    bm25_indexes,
    chunk_postings,
    close_quietly,
    connect,
    keywords_query,
    replicas_in,
    schema_version,
    split_location,
    store_error,
    upgrade,
)
from isotope.stores.postgres_sql import (
    ITEM_CHUNK,
    bm25_pruned,
    idf,
    term_stats,
    where,
)
from isotope.stores.sql_core import SQLStore
from isotope.stores.sql_dialect import POSTGRES

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

EF_SEARCH = 200
"""HNSW candidates per search (pgvector's default is 40: too few for the hybrid pool)."""
MAX_SCAN_TUPLES = 40_000
"""How far an iterative filtered scan goes before the exact fallback takes over."""
RARE_POSTINGS = 5_000
"""A keyword search first scores the items holding its rarest terms, up to this many
postings of them (at least one term): see :mod:`isotope.stores.postgres_sql`."""
EF_FILTERED = 1_000
"""HNSW candidates per filtered search that more than ``EXACT_CHUNKS`` chunks meet."""
EXACT_CHUNKS = 1_000
"""A filtered vector search whose conditions at most this many chunks meet scores their
items exactly (at a million questions, a principal who sees 1% of the sources: 590
chunks)."""
PARAMETERS = 30_000
"""Bound values per INSERT statement (under PostgreSQL's limit of 65,535)."""
BUILD_BYTES_PER_VECTOR = 1_200
"""About what one 384-dimension halfvec takes in an HNSW graph being built in memory
(its vector, its neighbour lists, pgvector's element); scaled by the dimension."""
BUILD_MEMORY = (64 << 20, 8 << 30)
"""The least and the most memory an ``auto`` HNSW build asks for (a graph that fits
builds several times faster than one pgvector has to spill to disk)."""
BM25_CUT_OFF = 100_000
"""How many matches a pg_textsearch index scan ranks at most (its TP_MAX_QUERY_LIMIT):
a filtered keyword search that found fewer than asked among that many scores the rows
that meet the filter exactly."""
BM25_REPLICATED = (1, 2)
"""The pg_textsearch release from which its indexes reach read replicas: 1.0 and 1.1 keep
recent rows in shared memory and write their segments outside the WAL, so a standby's
bm25 index is empty or behind (a search there read 'could not read blocks 0..0')."""
BM25_FIRST = 256
"""The best rows a filtered keyword search reads first (at least 4 k; then 4 times more
each time too few of them meet the filters)."""
VECTOR_INDEXES = ("hnsw", "diskann")
"""What the question vectors may be indexed with (the ``pg_vector_index`` setting);
atoms and chunks always have HNSW."""
DISKANN_RESCORE = 50
"""pgvectorscale's default candidates re-ranked with full vectors (at least k are)."""
WRITE_RETRIES = 6
"""Times a write the server aborted to break a deadlock is made (then its error stands)."""
T = TypeVar("T")
_WRITTEN: dict[tuple[str, str], int] = {}
"""Per server and schema: the primary's WAL position after this process's last write
(read your writes)."""
_WRITTEN_LOCK = threading.Lock()


def _shared_file(key: tuple[str, str]) -> Path:
    """The file that holds the WAL position of the last write to an index made by any
    process of this user on this machine (``isotope serve --workers N``, an ingest beside
    a server): read your writes across processes. Named by a hash of the URL and schema
    (no password in a name), in a folder only this user may read."""
    import hashlib
    import stat
    import tempfile

    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    folder = Path(base) / f"isotope-writes-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    found = os.lstat(folder)  # (another user may have made it first: never theirs)
    if (not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid()
            or found.st_mode & 0o077):
        raise OSError(f"{folder} is not a folder of this user's alone")
    return folder / hashlib.sha256("\x00".join(key).encode()).hexdigest()[:32]


def _share(key: tuple[str, str], position: int) -> None:
    """Raise the shared position of ``key`` to ``position`` (never lower it)."""
    try:
        import fcntl

        fd = os.open(_shared_file(key), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.pread(fd, 32, 0).strip()
            if not held.isdigit() or int(held) < position:
                os.pwrite(fd, str(position).rjust(20).encode(), 0)
        finally:
            os.close(fd)  # (the lock goes with it)
    except (OSError, ImportError):  # (a read-only temporary folder, no fcntl: this
        # process's own writes only)
        log.debug("the write position could not be shared", exc_info=True)


def _shared(key: tuple[str, str]) -> int:
    """The shared position of ``key`` (-1: none)."""
    try:
        import fcntl

        fd = os.open(_shared_file(key), os.O_RDONLY | os.O_NOFOLLOW)
    except (OSError, ImportError):
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        held = os.pread(fd, 32, 0).strip()
        return int(held) if held.isdigit() else -1
    except OSError:
        return -1
    finally:
        os.close(fd)
_SAID: set[tuple[str, ...]] = set()
"""What was said once per process: an index keeping its own postings on a server with
pg_textsearch, a missing bm25 index."""
_WAL_POSITION = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
"""The primary's WAL position, in bytes (what a replica must have replayed)."""


class PostgresStore(SQLStore):
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
        self._build: tuple[str, int] = ("auto", 0)
        self._wanted_index = "hnsw"
        """The ``pg_vector_index`` setting (an index keeps the one it was made with)."""
        self._identity: int | None = None
        """The primary's system identifier (its standbys have the same)."""
        self._chroma: ChromaVectors | None = None
        """The Chroma server that keeps the vectors (``vector_backend``), if one does."""
        self._backend = VectorBackend("chroma")
        """The vector_backend setting given (its token and timeout)."""
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
            # (an index made with Chroma reads it however it is opened: the setting's
            # token and timeout come with set_vector_backend)
            self._chroma = self._chroma_of(made, VectorBackend("chroma"))

    def _said_postings(self) -> None:
        """An index that keeps its own postings on a server with pg_textsearch says once
        per process how to move to the server's BM25 (``isotope copy``)."""
        key = (self._url, self.schema)
        if key in _SAID or not self._rows(  # (pg_settings: no error for a role
                # that may not read the setting; its row is left out)
                "SELECT 1 FROM pg_extension WHERE extname = 'pg_textsearch' UNION ALL "
                "SELECT 1 FROM pg_settings WHERE name = 'shared_preload_libraries' AND "
                "setting ~ 'pg_textsearch'"):
            return
        _SAID.add(key)
        log.warning("%s was made before this server had pg_textsearch: its keyword search "
                    "reads isotope's own postings (twice the disk, slower on common words). "
                    "To use the server's BM25 index, copy it into a new schema: isotope copy "
                    "'%s' 'URL?schema=NEW' (docs/guides/postgresql.md, Upgrading)",
                    self.where, self.where)

    # -- connections -------------------------------------------------------------------
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
        self._stored_dim()  # (the index may keep its vectors in Chroma now)
        if self._chroma is not None:
            return self._chroma.get(kind, rows)
        return {int(row): vector.to_numpy() for row, vector in self._rows(
            f"SELECT row, vector FROM {kind} WHERE row = ANY(%s)", (rows,))}

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

    def _bm25_from_primary(self, kind: Kind, words: list[str], k: int,
                           filters: Sequence[Condition]) -> list[Hit]:
        """A keyword search of a search that reads a replica, made on the primary (in a
        snapshot of its own) where the server's pg_textsearch does not replicate its
        indexes (before 1.2). Each of its statements is cut off as a replica's are, after
        ``ANSWER_WITHIN`` seconds. While the primary does not answer (its position,
        probed at most once a second, or this read), the search goes on without its
        keyword signals (a warning says so): the replicas hold no usable bm25 index.
        Its rows come from the primary, which may be ahead of the replica: a chunk the
        replica does not hold yet is left out of the results."""
        if self._primary_position() is None:
            self._said_no_keywords()
            return []
        saved = (getattr(self._local, "reading", None), getattr(self._local, "replica", None))
        self._local.reading = self._local.replica = None
        self._local.watch_primary = True
        try:
            return self._bm25_search(kind, words, k, filters)
        except IsotopeError as exc:
            if not exc.unreachable:
                raise
            with self._primary_lock:
                self._primary_seen = (time.monotonic(), None)
            self._said_no_keywords()
            return []
        finally:
            self._local.reading, self._local.replica = saved
            self._local.watch_primary = False
            if self._replicas is not None:
                self._replicas.forget_hung()

    def _said_no_keywords(self) -> None:
        if time.monotonic() - getattr(self, "_said_at", float("-inf")) > 60:
            self._said_at = time.monotonic()
            log.warning("%s: the primary does not answer, and the read replicas hold no "
                        "usable bm25 index (pg_textsearch before 1.2 does not replicate "
                        "them): searches go on without keyword signals until it is back",
                        self.where)

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
                or self._chroma is not None):
            return call()  # (no replicas, or inside a read already: its pick holds, even
            # the primary when no replica was healthy; with Chroma, the primary: the log
            # and Chroma are read together, as of now)
        self._local.in_reading = True
        try:
            for _ in range(len(self._replicas.replicas) + 1):
                key = (self._url, self.schema)
                self._local.replica = self._replicas.pick(max(_WRITTEN.get(key, -1),
                                                              _shared(key)))
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
        _share(key, _WRITTEN[key])

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
        if self._chroma is not None:
            self._chroma.close()
        if self._replicas is not None:
            self._replicas.close()
        with self._conns_lock:
            for conn in list(self._conns):
                close_quietly(conn)
            self._conns.clear()
        self._local.conn = None

    # -- where the vectors are kept ----------------------------------------------------
    def set_vector_backend(self, backend: VectorBackend) -> str:
        """pgvector columns (``usearch``, the default, names the store's own vectors), or
        a Chroma server for a new index whose setting names one
        (:mod:`isotope.stores.postgres_chroma`), once its collections are claimed (a
        prefix another index uses is refused before anything is written); an index keeps
        what it was made with (:meth:`fixed_settings`). Sends what a crash left pending
        when no other process is sending."""
        if not is_vector_backend(backend.name):
            raise InvalidArgument(f"vector_backend {backend.name!r}: use usearch, chroma, or "
                                  "a server as chroma+http://HOST:PORT/PREFIX")
        made = self.get_meta("vector_backend")
        if made is None and backend.name != "usearch" and not self._rows(
                "SELECT 1 FROM sources LIMIT 1"):
            if backend.name == "chroma":
                raise InvalidArgument(
                    f"vector_backend = chroma keeps a Chroma folder inside an embedded index; "
                    f"{self.where} is on a server: give a Chroma server, "
                    "chroma+http://HOST:PORT/PREFIX (or leave vector_backend = usearch: "
                    "pgvector keeps the vectors)")
            place = place_of(backend.name, default_prefix=f"isotope-{uuid.uuid4().hex[:12]}",
                             tenant=backend.tenant, database=backend.database)
            with self._write(lock=f"isotope-dim:{self.schema}") as conn:
                row = conn.execute("SELECT value FROM meta WHERE key = 'vector_backend'"
                                   ).fetchone()
                empty = not conn.execute("SELECT 1 FROM sources UNION ALL SELECT 1 FROM meta "
                                         "WHERE key = 'vector_dim' LIMIT 1").fetchone()
                if row is None and empty:  # (no other process wrote or made it so meanwhile)
                    chroma_rows.prepare(conn, self.schema)
                    from psycopg.types.json import Jsonb

                    new = {"name": "chroma", "url": place.url, "prefix": place.prefix,
                           "tenant": place.tenant, "database": place.database,
                           "owner": uuid.uuid4().hex}
                    claimed = self._chroma_of(new, backend)
                    try:  # (refused: the transaction, and so the index, is left as it was)
                        claimed.claim()
                    finally:
                        claimed.close()
                    conn.execute("INSERT INTO meta(key, value) VALUES ('vector_backend', %s)",
                                 (Jsonb(new),))
            made = self.get_meta("vector_backend")
        name = "usearch" if not isinstance(made, dict) else str(made.get("url"))
        self._backend = backend
        if isinstance(made, dict):
            self._chroma = self._chroma_of(made, backend)
            if any(self._chroma.log_size(k) for k in KINDS):
                try:  # (what a crash left pending)
                    self._send()
                except StoreError as exc:
                    log.warning("%s", exc)
        return name

    def fixed_settings(self) -> dict[str, Any]:
        made = self.get_meta("vector_backend")
        held = self.get_meta("vector_dim") is not None
        if isinstance(made, dict):
            return {"vector_backend": str(made.get("url"))}
        fixed: dict[str, Any] = {"pg_vector_index": self.question_index} if held else {}
        if held or self._rows("SELECT 1 FROM sources LIMIT 1"):
            fixed["vector_backend"] = "usearch"
        return fixed

    def _chroma_of(self, made: dict[str, Any], backend: VectorBackend) -> ChromaVectors:
        """The Chroma collections the index's meta names (``made``)."""
        place = ChromaPlace(made.get("url"), str(made["prefix"]), made.get("tenant"),
                            made.get("database"), made.get("owner"))
        return ChromaVectors(place, Path(), chroma_rows.PostgresRows(self),
                             token=backend.token, timeout=backend.timeout)

    def _after_write(self) -> None:
        if self._chroma is not None:
            self._send()

    def _send(self, wait: float = 0.0) -> None:
        """Send the pending vector writes to Chroma, holding the index's send lock (one
        sender at a time). When another process holds it, that one sends these too: a
        sender looks at the log again after letting the lock go, and takes it again while
        entries wait (a writer commits before it tries the lock, so none is stranded)."""
        assert self._chroma is not None
        while True:
            try:
                with self._send_lock(wait):
                    while self._chroma.send():
                        pass
            except IndexLocked:
                return  # (the holder sends them)
            if not self._rows("SELECT EXISTS (SELECT 1 FROM vector_log)")[0][0]:
                return

    def _send_lock(self, wait: float) -> AbstractContextManager[None]:
        """The index's send lock: one process at a time sends to Chroma."""
        return self._advisory(f"isotope-chroma:{self.schema}", wait, shared=False, busy=(
            f"{self.where}: another process is sending vectors to Chroma; try again when "
            "it is done (or pass --wait SECONDS)"))

    def _access_changed(self, conn: psycopg.Connection[Any], uris: Sequence[str]) -> None:
        """With Chroma: the items of sources whose access lists changed are logged again,
        so that their metadata (who may see them) is sent after the write."""
        self._follow_backend()
        if self._chroma is not None:
            chroma_rows.relabel(conn, uris)

    # -- meta --------------------------------------------------------------------------

    def set_meta(self, key: str, value: Any) -> None:
        from psycopg.types.json import Jsonb

        self._rows("INSERT INTO meta(key, value) VALUES (%s, %s) ON CONFLICT (key) DO "
                   "UPDATE SET value = excluded.value RETURNING key", (key, Jsonb(value)))
        self._wrote(self._conn())

    # -- writes ------------------------------------------------------------------------
    def _ensure_dim(self, dim: int) -> None:
        """Record the vectors' dimension and make each kind's vector index that is
        missing, once per index, in a transaction of its own (committed before any row
        is written, so a write that fails later cannot undo them); then refuse vectors of
        another dimension. The catalog is read first, without a lock: ``CREATE INDEX IF
        NOT EXISTS`` takes a lock on its table even when the index is there, and four
        writers' first writes deadlocked on it against each other's inserts. The first
        vectors also fix the question vectors' index (``pg_vector_index``): diskann
        reads a ``vector(dim)`` column, made so while the table is empty."""
        if self._dims == dim:
            return
        self._follow_backend()
        stored = self.get_meta("vector_dim")
        if stored is not None and int(stored) != dim:
            raise InvalidIndex(f"{self.where} holds vectors of {stored} dimensions, not "
                               f"{dim}; use the index's embedding model")
        if stored is None or (not self._bulk and self.missing_indexes()):
            with self._write(lock=f"isotope-dim:{self.schema}") as conn:
                row = conn.execute("SELECT value FROM meta WHERE key = 'vector_dim'"
                                   ).fetchone()
                if row is not None and int(row[0]) != dim:
                    raise InvalidIndex(f"{self.where} holds vectors of {row[0]} dimensions, "
                                       f"not {dim}; use the index's embedding model")
                if row is None:  # (made Chroma's meanwhile by another process?)
                    self._follow_backend()
                if row is None and self._chroma is None:  # (with Chroma: no pgvector index)
                    self._choose_vector_index(conn, dim)
                if not self._bulk:  # (again if a bulk load was cut short before making them)
                    for kind in self.missing_indexes(conn):
                        conn.execute(self._index_sql(kind, dim))
                if row is None:
                    conn.execute("INSERT INTO meta(key, value) VALUES ('vector_dim', %s)",
                                 (json.dumps(dim),))
        self._dims = dim

    def _choose_vector_index(self, conn: psycopg.Connection[Any], dim: int) -> None:
        """Fix the question vectors' index to the ``pg_vector_index`` setting (their
        first vectors are being written); diskann needs pgvectorscale."""
        import psycopg

        chosen = self._wanted_index
        if chosen == "diskann":
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext('isotope-extension'))")
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vectorscale SCHEMA public")
            except psycopg.Error as exc:
                raise InvalidIndex(
                    f"{self.where}: pg_vector_index = diskann needs pgvectorscale on the "
                    f"server ({str(exc).strip().splitlines()[0]}); install it and run "
                    "`CREATE EXTENSION vectorscale` as a superuser, or use hnsw") from None
            conn.execute(f"ALTER TABLE questions ALTER COLUMN vector TYPE vector({dim})")
        conn.execute("INSERT INTO meta(key, value) VALUES ('pg_vector_index', %s) ON CONFLICT "
                     "(key) DO UPDATE SET value = excluded.value", (json.dumps(chosen),))
        self._question_index = chosen

    @property
    def question_index(self) -> str:
        """What this index's question vectors are indexed with: ``hnsw`` or ``diskann``
        (fixed by its first vectors; an index made before the setting has HNSW)."""
        found = getattr(self, "_question_index", None)
        if found is None:
            found = str(self.get_meta("pg_vector_index") or "hnsw")
            if self.get_meta("vector_dim") is not None:
                self._question_index = found
        return found

    def _index_name(self, kind: Kind) -> str:
        return f"{kind}_{self.question_index if kind == 'questions' else 'hnsw'}"

    def _index_sql(self, kind: Kind, dim: int) -> str:
        if kind == "questions" and self.question_index == "diskann":
            return ("CREATE INDEX IF NOT EXISTS questions_diskann ON questions USING diskann "
                    "(vector vector_cosine_ops)")
        return (f"CREATE INDEX IF NOT EXISTS {kind}_hnsw ON {kind} USING hnsw "
                f"((vector::halfvec({dim})) halfvec_cosine_ops)")

    def missing_indexes(self, conn: psycopg.Connection[Any] | None = None) -> list[Kind]:
        """The kinds whose vector index is missing (a bulk load cut short leaves them so:
        searches then scan every row; :meth:`check` says so and :meth:`repair` makes
        them). None where Chroma keeps the vectors."""
        if self._chroma is not None:
            return []
        return [kind for kind in KINDS if self._index_name(kind) not in self._indexes(conn)]

    def missing_bm25(self, conn: psycopg.Connection[Any] | None = None) -> list[Kind]:
        """The kinds whose bm25 index (pg_textsearch) is missing (a bulk load drops them
        and makes them at its end)."""
        if self.keyword_engine != "pg_textsearch":
            return []
        return [kind for kind in KINDS if f"{kind}_bm25" not in self._indexes(conn)]

    def _indexes(self, conn: psycopg.Connection[Any] | None) -> set[str]:
        rows = (conn.execute if conn is not None else self._conn().execute)(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s", (self.schema,)
        ).fetchall()
        return {r[0] for r in rows}

    def _build_indexes(self) -> None:
        """Make the missing bm25 and vector indexes, each in a transaction of its own,
        a vector index with the memory its graph wants. A parallel build that the server
        cannot give its shared memory (a small /dev/shm) is made again by one process."""
        for kind in self.missing_bm25():
            with self._write(lock=f"isotope-dim:{self.schema}") as conn:
                memory = build_memory(self._build[0], 0, 0)
                conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (memory,))
                for statement in bm25_indexes(self.schema, (kind,)):
                    conn.execute(statement)
        dim = self._stored_dim()
        if dim is None:
            return
        with self._write(lock=f"isotope-dim:{self.schema}") as conn:
            missing = self.missing_indexes(conn)
        for kind in missing:
            try:
                self._build_one(kind, dim, self._build[1])
            except StoreError as exc:
                if "shared memory" not in str(exc):
                    raise
                log.warning("%s: the parallel build of the %s vector index could not get "
                            "its shared memory (%s); building it in one process", self.where,
                            kind, exc)
                self._build_one(kind, dim, -1)

    def _build_one(self, kind: Kind, dim: int, workers: int) -> None:
        """Build ``kind``'s vector index (``workers``: parallel workers, 0: the server's
        setting, -1: none)."""
        with self._write(lock=f"isotope-dim:{self.schema}") as conn:
            if kind not in self.missing_indexes(conn):
                return
            found = conn.execute(f"SELECT count(*) FROM {kind}").fetchone()
            memory = build_memory(self._build[0], int(found[0]) if found else 0, dim)
            conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (memory,))
            if workers:
                conn.execute("SELECT set_config('max_parallel_maintenance_workers', %s, "
                             "true)", (str(max(workers, 0)),))

            def spilled(notice: Any) -> None:
                if "maintenance_work_mem" in (notice.message_primary or ""):
                    log.warning("%s: the %s HNSW graph outgrew %s of memory and is built "
                                "on disk, several times slower: raise the "
                                "hnsw_build_memory setting", self.where, kind, memory)

            conn.add_notice_handler(spilled)
            try:
                conn.execute(self._index_sql(kind, dim))
            finally:
                conn.remove_notice_handler(spilled)

    def set_vector_build(self, index: str = "hnsw", memory: str = "auto",
                         workers: int = 0) -> None:
        if index not in VECTOR_INDEXES:
            raise InvalidArgument(f"pg_vector_index {index!r}: use one of "
                                  f"{', '.join(VECTOR_INDEXES)}")
        self._wanted_index = index
        self._build = (memory, workers)

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
            for kind in KINDS:
                # (qualified: a name not in the schema is looked for along the search
                # path, and another index's in public would go)
                conn.execute(f'DROP INDEX IF EXISTS "{self.schema}".{kind}_hnsw')
                conn.execute(f'DROP INDEX IF EXISTS "{self.schema}".{kind}_diskann')
                if self.keyword_engine == "pg_textsearch":
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
        """Another process may have made this empty index keep its vectors in Chroma
        since it was opened here: read so before its first vectors are read or written."""
        if self._chroma is None and isinstance(made := self.get_meta("vector_backend"),
                                               dict):
            self._chroma = self._chroma_of(made, self._backend)

    def _terms(self, texts: Sequence[str]) -> list[tuple[dict[str, int], int]]:
        """Each text's term frequencies and length, as FTS5 counts them."""
        counts = self._tokenizer.texts(list(texts))
        return [(dict(c), sum(c.values())) for c in counts]

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
        """Rows with their vectors (``halfvec``; ``vector`` for questions indexed with
        diskann) and, with the ``postings`` keyword engine, their postings made by FTS5's
        tokenizer (``COPY``); a bm25 index (pg_textsearch) reads the rows' text itself."""
        from pgvector import HalfVector, Vector

        terms = self._terms(texts) if self.keyword_engine == "postings" else None
        counts = [n for _, n in terms] if terms is not None else [0] * len(values)
        if self._chroma is not None:  # (the vectors logged for Chroma, the column empty)
            rows = self._insert(conn, kind, f"{columns}, ntok", [
                (*value, n) for value, n in zip(values, counts, strict=True)])
            chroma_rows.log_rows(conn, kind, rows, chunk_rows, vectors)
        else:
            typed = Vector if kind == "questions" and self.question_index == "diskann" \
                else HalfVector
            rows = self._insert(conn, kind, f"{columns}, ntok, vector", [
                (*value, n, typed(v)) for value, n, v in zip(values, counts, vectors,
                                                              strict=True)])
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

    @staticmethod
    def _postings(conn: psycopg.Connection[Any], kind: str, rows: list[int],
                  terms: list[tuple[dict[str, int], int]]) -> None:
        if not rows:
            return
        with conn.cursor().copy(f"COPY {kind}_terms (term, item, tf, ntok) FROM STDIN"
                                ) as copy:
            for row, (counts, length) in zip(rows, terms, strict=True):
                for term, tf in counts.items():
                    copy.write_row((term, row, tf, length))

    # -- reads -------------------------------------------------------------------------
    def search(self, kind: Kind, vector: Vectors, k: int,
               filters: Sequence[Condition] = ()) -> list[Hit]:
        from pgvector import HalfVector, Vector

        dim = self._stored_dim()  # (first: the index may keep its vectors in Chroma now)
        if self._chroma is not None:
            found = self._chroma.search(kind, vector, k, filters)
            return self._hits(kind, [(item, score) for item, _, score in found])
        if k <= 0 or dim is None:
            return []
        flat = np.asarray(vector, dtype=np.float32).reshape(-1)
        diskann = kind == "questions" and self.question_index == "diskann"
        if diskann:  # (the column itself: diskann indexes no expression)
            query: Any = Vector(flat)
            distance = f"t.vector <=> %(q)s::vector({dim})"
        else:
            query = HalfVector(flat)
            distance = f"t.vector::halfvec({dim}) <=> %(q)s::halfvec({dim})"
        restrict, params = "", {"q": query, "k": k}
        few = False
        meeting = ""
        if filters:
            restrict, meeting = self._restrict(kind, filters, params)
        sql = (f"SELECT t.row, {distance} AS d FROM {kind} t {restrict} "
               "ORDER BY ORDER_BY LIMIT %(k)s")
        with self.snapshot():
            if filters:  # few chunks meet them: scored exactly at once (an index scan
                # would read up to MAX_SCAN_TUPLES rows of other chunks, then give up)
                few = self._few(meeting, params)
            # a filtered scan keeps the candidates that meet the conditions among the
            # nearest it visits: with many chunks meeting them (a principal who sees 10%
            # of a million questions), 200 candidates found 0.88 of the exact top 10
            wide = EF_FILTERED if filters else EF_SEARCH
            if diskann:  # (a diskann scan streams on past rows a filter rejects)
                self._rows("SELECT set_config('diskann.query_search_list_size', %s, true), "
                           "set_config('diskann.query_rescore', %s, true)",
                           (str(min(max(wide, k), 1000)),
                            str(min(max(DISKANN_RESCORE, k), 1000))))
            else:
                # rows deleted but not yet vacuumed, or filtered out, use up the
                # candidates of a plain scan: an iterative scan goes on, up to
                # MAX_SCAN_TUPLES (the three settings in one round trip, for this
                # transaction only)
                self._rows("SELECT set_config('hnsw.ef_search', %s, true), set_config("
                           "'hnsw.iterative_scan', 'relaxed_order', true), set_config("
                           "'hnsw.max_scan_tuples', %s, true)",
                           (str(min(max(wide, k), 1000)), str(MAX_SCAN_TUPLES)))
            found = [] if few else self._rows(sql.replace("ORDER_BY", distance), params)
            if len(found) < k:  # the index scan gave up: scan the rows exactly
                found = self._rows(sql.replace("ORDER_BY", f"0 + ({distance})"), params)
            found.sort(key=lambda r: (r[1], r[0]))
            return self._hits(kind, [(int(r[0]), 1.0 - float(r[1])) for r in found[:k]])

    @staticmethod
    def _restrict(kind: Kind, filters: Sequence[Condition], params: dict[str, Any]
                  ) -> tuple[str, str]:
        """(the WHERE clause that keeps the items of ``kind`` whose chunk meets
        ``filters``, the query of those chunks' ids); their values go into ``params``."""
        clause, values = where(filters)
        # source first: a source's conditions (its access list) tested once per source
        meeting = (f"SELECT c.id FROM sources s JOIN chunks c ON c.source = s.uri "
                   f"WHERE {_named(clause, values, params)}")
        return f"WHERE {ITEM_CHUNK[kind]} IN ({meeting})", meeting

    def _few(self, meeting: str, params: dict[str, Any]) -> bool:
        """Whether at most :data:`EXACT_CHUNKS` chunks meet a search's conditions."""
        return bool(self._rows(f"SELECT count(*) FROM ({meeting} LIMIT {EXACT_CHUNKS + 1}) f",
                               params)[0][0] <= EXACT_CHUNKS)

    def first_pool(self, kind: Kind, k: int, per_chunk: int) -> int:
        """Sized for the kind (a chunk is one item; it has a few atoms and many
        questions): an HNSW search costs with its pool, and the contract's widening
        catches the rare query that needs more."""
        return {"chunks": k, "atoms": 3 * k, "questions": 4 * k}[kind]

    def keyword_search(self, kind: Kind, query: str, k: int,
                       filters: Sequence[Condition] = ()) -> list[Hit]:
        words = query_words(query)
        if not words or k <= 0:
            return []
        if self.keyword_engine == "pg_textsearch":
            if self._bm25_replicated or not self._on_replica():
                return self._bm25_search(kind, words, k, filters)
            return self._bm25_from_primary(kind, words, k, filters)
        counted = query_terms(words, self._tokenizer)
        if not counted:
            return []
        params: dict[str, Any] = {"terms": sorted(counted), "k": k}
        restrict = ""
        if filters:
            clause, values = where(filters)
            restrict = (f"{ITEM_CHUNK[kind]} IN (SELECT c.id FROM chunks c JOIN sources s ON "
                        f"s.uri = c.source WHERE {_named(clause, values, params)})")
        with self.snapshot():
            stats = self._rows(term_stats(kind), params)
            n_items, total = next((int(r[1]), int(r[2])) for r in stats if r[0] is None)
            held = {str(r[0]): int(r[1]) for r in stats if r[0] is not None}
            if not held:
                return []
            weight = {t: idf(n_items, n, counted[t]) for t, n in held.items()}
            rarest = sorted(held, key=lambda t: (held[t], t))
            params.update(terms=rarest, idf=[weight[t] for t in rarest],
                          avgdl=max(total / max(n_items, 1), 1e-9))
            rare, postings = 1, held[rarest[0]]
            while rare < len(rarest) and postings + held[rarest[rare]] <= RARE_POSTINGS:
                postings += held[rarest[rare]]
                rare += 1
            while True:  # MaxScore (postgres_sql): exact once the k-th beats the rest
                found = self._rows(bm25_pruned(kind, restrict), {**params,
                                                                  "rare": rarest[:rare]})
                rest = sum(weight[t] for t in rarest[rare:]) * (K1 + 1)
                if rare == len(rarest) or (len(found) >= k and float(found[k - 1][1]) > rest):
                    break
                rare = min(len(rarest), rare * 2)
            return self._hits(kind, [(int(r[0]), float(r[1])) for r in found])

    def _bm25_search(self, kind: Kind, words: list[str], k: int,
                     filters: Sequence[Condition]) -> list[Hit]:
        """BM25 from the kind's bm25 index (pg_textsearch), ranked by an index scan whose
        scores the scan itself hands over (``bm25_get_current_score()``: scoring a row
        again in the select list reads its whole text, 75 us a chunk). With filters, the
        scan's best ``n`` rows are kept where they meet them, ``n`` growing until k are
        found or every match was seen (as an iterative vector scan reads on); where few
        chunks meet the filters, or the scan stopped at :data:`BM25_CUT_OFF` matches,
        the rows that meet them are scored exactly. A filter never shortens the results.
        While a bulk load has dropped the index, keyword search finds nothing (said)."""
        query = keywords_query(words)
        if not query.strip():
            return []
        params: dict[str, Any] = {"q": query, "k": k, "index": f"{self.schema}.{kind}_bm25"}
        order = "t.keywords <@> to_bm25query(%(q)s, %(index)s)"
        scan = (f"SELECT t.row, {ITEM_CHUNK[kind]} AS chunk, bm25_get_current_score() AS s "
                f"FROM {kind} t ORDER BY {order} LIMIT %(n)s")
        restrict = meeting = ""
        if filters:
            restrict, meeting = self._restrict(kind, filters, params)
        with self.snapshot():
            few = bool(filters) and self._few(meeting, params)
            found: list[tuple[Any, ...]] | None = None
            if not few:
                # the scores come from the index scan only: never a sequential scan for
                # it (the setting put back after). Its statements are never prepared:
                # pg_textsearch learns the query's index and LIMIT while a statement is
                # parsed, and a prepared one, parsed once, ranked every match at each
                # run (31 ms for a chunk search of the 300-passage index, not 1.1 ms)
                had, there = self._rows(
                    "SELECT current_setting('enable_seqscan'), to_regclass(%s) IS NOT NULL "
                    "FROM set_config('enable_seqscan', 'off', true)", (params["index"],))[0]
                try:
                    if not there:
                        self._said_no_index(kind)
                        return []
                    found = self._ranked(scan, meeting, params, k)
                finally:
                    self._rows("SELECT set_config('enable_seqscan', %s, true)", (had,))
            if found is None:  # scored exactly: the rows that meet the filters (OFFSET 0:
                # planned apart, never as a bm25 index scan, which stops at 100,000 rows)
                found = self._rows(
                    f"SELECT row, s FROM (SELECT t.row, {order} AS s FROM {kind} t "
                    f"{restrict} OFFSET 0) x WHERE s < 0 ORDER BY s, row LIMIT %(k)s", params,
                    prepare=False)
            scored = sorted((float(r[-1]), int(r[0])) for r in found if float(r[-1]) < 0)
            return self._hits(kind, [(row, -score) for score, row in scored])

    def _ranked(self, scan: str, meeting: str, params: dict[str, Any], k: int
                ) -> list[tuple[Any, ...]] | None:
        """The index scan's best rows (meeting the filters ``meeting`` names, reading on:
        4 k rows, then 4 times more each time too few of them meet them); None where it
        stopped at :data:`BM25_CUT_OFF` rows with fewer than k found."""
        if not meeting:
            return self._rows(scan, {**params, "n": k}, prepare=False)
        n = max(4 * k, BM25_FIRST)
        while True:
            rows = self._rows(
                f"WITH x AS MATERIALIZED ({scan}) (SELECT row, s FROM x WHERE chunk IN "
                f"({meeting}) ORDER BY s, row LIMIT %(k)s) UNION ALL SELECT NULL, count(*) "
                "FROM x", {**params, "n": n}, prepare=False)
            kept, seen = rows[:-1], int(rows[-1][1])
            if len(kept) >= k or (seen < n < BM25_CUT_OFF):  # (every match was seen)
                return kept
            if n >= BM25_CUT_OFF:
                return None
            n = min(n * 4, BM25_CUT_OFF)

    def _said_no_index(self, kind: Kind) -> None:
        key = (self._url, self.schema, kind)
        if key not in _SAID:
            _SAID.add(key)  # (once per process)
            log.warning("%s: the bm25 index of %s is missing (a bulk load is making it, or "
                        "was cut short: check --repair makes it); keyword search of %s finds "
                        "nothing meanwhile", self.where, kind, kind)

    # -- integrity ---------------------------------------------------------------------
    def inspect(self) -> Inspection:
        """Rows lost since each source was stored (its counts), keyword statistics that
        drifted from the rows (the ``postings`` engine; foreign keys keep rows from
        losing their parents), and vector or bm25 indexes a bulk load cut short left
        missing."""
        found = Inspection()
        with (self._send_lock(60.0) if self._chroma is not None else contextlib.nullcontext()),\
                self.snapshot():  # (with Chroma: no send while the two are compared)
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
            if self._chroma is not None:
                for kind in KINDS:
                    found.problems += [problem for problem, _ in self._chroma.check(
                        kind, self.table_rows(kind))]
            if self._stored_dim() is not None:
                for kind in self.missing_indexes():
                    found.problems.append(
                        f"the {self._index_name(kind).split('_')[-1]} index of {kind} is "
                        "missing (a bulk load was cut short): vector searches scan every "
                        "row; run check --repair")
        return found

    def repair(self, embed: Embedder | None = None) -> None:
        """Write each chunk's questions' text again from its questions where it differs,
        recount the keyword statistics from the rows (the ``postings`` engine; rows,
        vectors and postings are kept together by transactions and foreign keys), and
        make the vector and bm25 indexes a bulk load cut short did not. Holds the index's
        lock exclusively."""
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
            if self._chroma is not None:
                with self._send_lock(60.0):  # (no other sender while Chroma is mended)
                    while self._chroma.send():
                        pass
                    for kind in KINDS:
                        self._chroma.rebuild(kind, self.table_rows(kind), None if embed is
                                             None else functools.partial(self._embed_rows,
                                                                         kind, embed))

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
        if self._chroma is not None:  # (its collections first: a failure leaves the index)
            self._chroma.drop()
        with self._write() as conn:
            conn.execute(f'DROP SCHEMA "{self.schema}" CASCADE')


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def build_memory(setting: str, rows: int, dim: int) -> str:
    """The ``maintenance_work_mem`` of an HNSW build over ``rows`` vectors: the
    ``hnsw_build_memory`` setting, or for ``auto`` the graph's estimated size with a
    quarter more (a graph that outgrows it is built on disk, many times slower), within
    :data:`BUILD_MEMORY`."""
    if setting != "auto":
        return setting
    wanted = rows * BUILD_BYTES_PER_VECTOR * max(dim, 1) / 384 * 1.25
    return f"{int(min(max(wanted, BUILD_MEMORY[0]), BUILD_MEMORY[1])) >> 20}MB"


def _named(clause: str, values: list[Any], params: dict[str, Any]) -> str:
    """``clause`` with its positional ``%s`` turned into named parameters in ``params``."""
    parts = clause.split("%s")
    out = [parts[0]]
    for value, rest in zip(values, parts[1:], strict=True):
        name = f"f{len(params)}"
        params[name] = value
        out.append(f"%({name})s{rest}")
    return "".join(out)
