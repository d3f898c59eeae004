"""Read replicas of a PostgreSQL index: streaming standbys of the primary that searches
are spread across, while every write goes to the primary.

- **Which replica.** Each read (a store's ``snapshot``) takes the next healthy replica in
  turn. A replica is healthy when it answers, is a standby of this index (or the primary
  itself) and lags at most ``max_lag`` seconds (its replay behind what it has received, by
  the time of the last transaction it replayed). What a replica says is checked again
  when it is :data:`PROBE_EVERY` seconds old.
- **A replica that stops answering** is left out for :data:`DOWN_FOR` seconds; a search
  that was reading from it is made again elsewhere (:meth:`PostgresStore.reading`), so no
  search fails for it. With no healthy replica, reads go to the primary.
- **Read your writes.** After a write by this process, a read goes to a replica only once
  the replica has replayed the primary's WAL up to that write (its position is read from
  the primary when the write commits). A replica that has is taken at once; else the
  first of them to replay it, polling, up to ``wait`` seconds; then the read goes to the
  primary. The query log's rows are not such writes (each search would wait for the
  last one's).
- **A replica that hangs** (answers no statement: a stopped process, a full disk) is cut
  off after :data:`ANSWER_WITHIN` seconds of one search or probe: its socket is shut so
  the read fails and is made again elsewhere.
- **A replica cut off from the primary** (its WAL receiver not streaming) has replayed
  all it received, so its replay position says nothing of its lag: while the primary
  answers, its lag is counted from when it was first seen cut off. While the primary does
  not answer either, the replicas are what there is: they go on serving."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from isotope.errors import StoreError

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

PROBE_EVERY = 1.0
"""Seconds a replica's health and lag are trusted before they are read again."""
DOWN_FOR = 5.0
"""Seconds a replica that failed is left out before it is tried again."""
CONNECT_TIMEOUT = 2
"""Seconds to wait for a replica's connection (the primary waits longer)."""
POLL = 0.02
"""Seconds between two looks at a replica's replay position (read your writes)."""
ANSWER_WITHIN = 5.0
"""Seconds a search (all its reads) or a probe may wait on a replica before the replica
is cut off and the search made again elsewhere."""
_PROBE = ("SELECT pg_is_in_recovery(), pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN "
          "pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, '0/0')::bigint, CASE WHEN "
          "NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() "
          "THEN 0 ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END, "
          "NOT pg_is_in_recovery() OR EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE "
          "status = 'streaming')")


@contextlib.contextmanager
def answering(conn: psycopg.Connection[Any], within: float,
              hung: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Shut ``conn``'s socket when what runs inside takes more than ``within`` seconds
    (``hung()`` is called first): a server that answers nothing (a stopped process) would
    otherwise hold the read for ever, and neither keepalives nor a server-side timeout see
    it (the kernel still acknowledges)."""
    def cut() -> None:
        hung()
        try:
            with socket.socket(fileno=os.dup(conn.fileno())) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # (closed already)
            pass

    timer = threading.Timer(within, cut)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


class ReplicaFailed(StoreError):
    """A read replica stopped answering in the middle of a read (the read is made again
    on another replica or the primary)."""


@dataclass
class Replica:
    """One replica and what is known of it."""

    url: str
    shown: str
    """The URL with its password masked."""
    checked_at: float = float("-inf")
    down_until: float = 0.0
    lag_s: float | None = None
    replayed: int = -1
    """Its replay position (WAL bytes) when last checked."""
    error: str | None = None
    hung: bool = False
    """It did not answer within :data:`ANSWER_WITHIN` (its connection was cut)."""
    cut_since: float | None = None
    """When it was first seen not streaming WAL from the primary (None: streaming)."""

    @property
    def healthy(self) -> bool:
        return self.error is None


@dataclass
class Replicas:
    """The replicas of one index, shared by the store's threads (each has its own
    connection to each replica)."""

    urls: list[str]
    schema: str
    max_lag: float = 5.0
    wait: float = 1.0
    primary_answers: Callable[[], bool] = lambda: True
    """Whether the primary answers now (a replica cut off from it lags only while it
    does)."""
    replicas: list[Replica] = field(default_factory=list)
    _turn: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _local: threading.local = field(default_factory=threading.local)
    _conns: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)

    def __post_init__(self) -> None:
        from isotope.redaction import mask_location

        self.replicas = [Replica(url, mask_location(url)) for url in self.urls]

    # -- connections -------------------------------------------------------------------
    def connection(self, replica: Replica) -> psycopg.Connection[Any]:
        from isotope.stores.postgres_schema import connect

        conns: dict[str, Any] = self._local.__dict__.setdefault("conns", {})
        conn = conns.get(replica.url)
        if conn is None or conn.closed or conn.broken:
            conn = connect(replica.url, self.schema, replica.url, timeout=CONNECT_TIMEOUT)
            conns[replica.url] = conn
            with self._lock:
                self._conns.add(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in list(self._conns):
                try:
                    conn.close()
                except Exception:
                    log.debug("closing a replica connection failed", exc_info=True)
            self._conns.clear()
        self._local.__dict__.pop("conns", None)

    # -- health ------------------------------------------------------------------------
    def probe(self, replica: Replica) -> None:
        """Read the replica's state now (healthy or not, its lag and replay position)."""
        try:
            conn = self.connection(replica)
            with self.watched(replica, conn):
                _, replayed, lag, streaming = conn.execute(_PROBE).fetchone()  # type: ignore[misc]
        except Exception as exc:  # (a connection refused, a server gone, a timeout)
            self.lost(replica, exc)
            return
        now = replica.checked_at = time.monotonic()
        replica.replayed = int(replayed or 0)
        lag = float(lag or 0.0)
        if streaming:
            replica.cut_since = None
        else:  # (everything it received is replayed: its own lag reads 0)
            replica.cut_since = replica.cut_since or now
            if now - replica.cut_since > self.max_lag and self.primary_answers():
                lag = max(lag, now - replica.cut_since)
        replica.lag_s = round(lag, 3)
        replica.error = None

    def watched(self, replica: Replica, conn: psycopg.Connection[Any]
                ) -> contextlib.AbstractContextManager[None]:
        """Cut ``conn`` off if it does not answer within :data:`ANSWER_WITHIN`."""
        def hung() -> None:
            replica.hung = True

        return answering(conn, ANSWER_WITHIN, hung)

    def lost(self, replica: Replica, exc: BaseException) -> ReplicaFailed:
        """Leave ``replica`` out for :data:`DOWN_FOR` seconds; the error to raise."""
        from isotope.redaction import redact

        said = str(exc).strip()
        first = redact(said.splitlines()[0] if said else type(exc).__name__, replica.url)
        if replica.hung:
            replica.hung = False
            first = f"did not answer within {ANSWER_WITHIN:g} s"
        replica.error = first
        replica.down_until = time.monotonic() + DOWN_FOR
        replica.lag_s = None
        replica.checked_at = float("-inf")
        conns = self._local.__dict__.get("conns", {})
        conn = conns.pop(replica.url, None)
        if conn is not None:
            try:
                conn.close()
            except Exception:
                log.debug("closing a failed replica connection failed", exc_info=True)
        log.warning("read replica %s left out for %.0f s: %s", replica.shown, DOWN_FOR, first)
        return ReplicaFailed(f"read replica {replica.shown} stopped answering: {first}")

    def pick(self, written: int) -> tuple[Replica, psycopg.Connection[Any]] | None:
        """The next healthy replica that has replayed up to ``written`` (WAL bytes; -1:
        nothing written), with this thread's connection to it; None: read the primary."""
        with self._lock:
            start = self._turn
            self._turn = (self._turn + 1) % max(1, len(self.replicas))
        order = self.replicas[start:] + self.replicas[:start]
        deadline = time.monotonic() + self.wait
        looked = False
        while True:
            behind = []
            for replica in order:
                if time.monotonic() < replica.down_until:
                    continue
                if looked or time.monotonic() - replica.checked_at >= PROBE_EVERY:
                    self.probe(replica)
                if not replica.healthy or (replica.lag_s or 0.0) > self.max_lag:
                    continue
                if replica.replayed < written:  # read your writes: not yet replayed
                    behind.append(replica)
                    continue
                try:
                    return replica, self.connection(replica)
                except Exception as exc:
                    self.lost(replica, exc)
            if not behind or time.monotonic() >= deadline:
                return None
            order, looked = behind, True  # the first of them to replay the write
            time.sleep(POLL)

    def status(self) -> list[dict[str, Any]]:
        """Each replica's ``url`` (password masked), ``healthy`` and ``lag_s``, read now."""
        shown = []
        for replica in self.replicas:
            replica.down_until = 0.0  # (asked now: tried again now)
            self.probe(replica)
            error = replica.error
            if error is None and replica.cut_since is not None:
                error = (f"not receiving WAL from the primary for "
                         f"{time.monotonic() - replica.cut_since:.0f} s")
            shown.append({"url": replica.shown, "healthy": replica.healthy
                          and (replica.lag_s or 0.0) <= self.max_lag, "lag_s": replica.lag_s,
                          "error": error})
        return shown
