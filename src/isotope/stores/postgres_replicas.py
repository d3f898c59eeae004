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
  off when one statement of a search or probe has waited :data:`ANSWER_WITHIN` seconds:
  its socket is shut so the read fails and is made again elsewhere.
- **A replica cut off from the primary** (its WAL receiver not running) has replayed all
  it received, so its replay position says nothing of its lag: while the primary answers
  and has written past it, its lag is counted from when it was first seen so. While the
  primary does not answer either, the replicas are what there is: they go on serving."""

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from isotope.errors import StoreError
from isotope.stores.postgres_schema import close_quietly, schema_version

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

PROBE_EVERY = 1.0
"""Seconds a replica's health and lag are trusted before they are read again."""
DOWN_FOR = 5.0
"""Seconds a replica that failed is left out before it is tried again."""
CONNECT_TIMEOUT = 2
"""Seconds to wait for a replica's connection (the primary waits longer)."""
KEEPALIVE = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
             "keepalives_count": 3, "tcp_user_timeout": 10_000}
"""A replica whose network goes away (packets dropped) is found out in about 10 s, even
between statements (ignored on Unix sockets)."""
POLL = 0.02
"""Seconds between two looks at a replica's replay position (read your writes)."""
ANSWER_WITHIN = 5.0
"""Seconds one statement of a search or probe may wait on a replica before the replica is
cut off and the search made again elsewhere."""
_PROBE = ("SELECT pg_is_in_recovery(), pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN "
          "pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END, '0/0')::bigint, CASE WHEN "
          "NOT pg_is_in_recovery() OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() "
          "THEN 0 ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END, "
          "NOT pg_is_in_recovery() OR EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE "
          "status IS NULL OR status = 'streaming')")
"""Whether it is a standby, its replay position (bytes), its lag by the time of what it
replayed, and whether its WAL receiver runs (a role without pg_read_all_stats reads the
receiver's status as NULL: a receiver that is there counts as streaming)."""
_IDENTITY = "SELECT system_identifier FROM pg_control_system()"
"""The cluster's system identifier (a standby made from the primary has the primary's;
a role refused the function is not compared)."""


def _identity(conn: psycopg.Connection[Any]) -> int | None:
    """A server's system identifier (None: the role may not read it)."""
    try:
        with conn.transaction():  # (a refusal rolls back this block alone)
            row = conn.execute(_IDENTITY).fetchone()
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != "42501":  # (insufficient privilege)
            raise
        return None
    return int(row[0]) if row else None


class Watchdog:
    """Cuts off connections whose statement has not answered by its deadline: one daemon
    thread for the process, woken at the nearest deadline. A server that answers nothing
    (a stopped process) would otherwise hold a read for ever, and neither keepalives nor a
    server-side timeout see it (the kernel still acknowledges what is sent)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._armed: dict[int, tuple[float, psycopg.Connection[Any]]] = {}
        self._fired: set[int] = set()
        self._next = 0
        self._thread: threading.Thread | None = None

    def arm(self, conn: psycopg.Connection[Any], within: float) -> int:
        with self._lock:
            self._next += 1
            self._armed[self._next] = (time.monotonic() + within, conn)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._watch, daemon=True,
                                                name="isotope-replica-watchdog")
                self._thread.start()
            self._lock.notify()
            return self._next

    def disarm(self, token: int) -> bool:
        """Stop watching; whether the connection was cut off (it must not be used again).
        Once this returns, the watchdog no longer touches it."""
        with self._lock:
            self._armed.pop(token, None)
            if token in self._fired:
                self._fired.discard(token)
                return True
            return False

    def _watch(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                for token, (deadline, conn) in list(self._armed.items()):
                    if deadline <= now:  # (under the lock: disarm waits for the cut)
                        del self._armed[token]
                        self._fired.add(token)
                        _cut(conn)
                waits = [deadline for deadline, _ in self._armed.values()]
                self._lock.wait(timeout=max(0.0, min(waits) - now) if waits else 60.0)


def _cut(conn: psycopg.Connection[Any]) -> None:
    """Shut the connection's socket: the statement waiting on it fails at once."""
    try:
        with socket.socket(fileno=os.dup(conn.fileno())) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # (closed already, by its thread or Replicas.close)
        log.debug("cutting off a replica connection failed", exc_info=True)


WATCHDOG = Watchdog()


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
    streaming: bool = True
    """Its WAL receiver runs (a standby that gets WAL from its primary)."""
    cut_since: float | None = None
    """When it was first seen without a WAL receiver and behind the primary."""

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
    primary_position: Callable[[], int | None] = lambda: None
    """The primary's WAL position now (bytes; None: it does not answer). A replica cut off
    from it lags only while it is behind a primary that answers."""
    primary_identity: Callable[[], tuple[int | None, int]] = lambda: (None, 0)
    """The primary's system identifier (None: unknown) and the schema step of the index
    there: a replica serves only as a standby of that cluster holding that step."""
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
            conn = connect(replica.url, self.schema, replica.url, timeout=CONNECT_TIMEOUT,
                           **KEEPALIVE)
            conns[replica.url] = conn
            with self._lock:
                self._conns.add(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in list(self._conns):
                close_quietly(conn)
            self._conns.clear()
        self._local.__dict__.pop("conns", None)

    # -- health ------------------------------------------------------------------------
    def probe(self, replica: Replica) -> None:
        """Read the replica's state now (healthy or not, its lag and replay position)."""
        try:
            conn = self.connection(replica)
            with self.watched(conn):
                standby, replayed, lag, streaming = conn.execute(  # type: ignore[misc]
                    _PROBE).fetchone()
                holds = schema_version(conn, self.schema)
                system = _identity(conn)
        except Exception as exc:  # (a connection refused, a server gone, a timeout)
            self.lost(replica, exc)
            return
        identity, step = self.primary_identity()
        wrong = ("it is not a standby (promoted, or a server of its own): its data may "
                 "differ from the primary's" if not standby else
                 "it is a standby of another server (its system identifier is not the "
                 "primary's)" if None not in (identity, system) and system != identity else
                 f"it does not hold this index (schema {self.schema}"
                 f"{'' if holds is None else f' at step {holds}'}, the primary's at step "
                 f"{step}); a standby of this primary replays it" if holds != step else None)
        if wrong is not None and standby and holds != step and system == identity:
            primary = self.primary_position()
            if primary is not None and int(replayed or 0) < primary:
                # (behind, not wrong: the index was made, or its schema moved, in WAL it
                # has not replayed yet; looked at again on the next read, not left out)
                replica.error = (f"catching up: it has not replayed this index's schema "
                                 f"(step {step}) yet")
                replica.replayed = int(replayed or 0)
                replica.lag_s = None
                replica.checked_at = time.monotonic()  # (looked at again within a second)
                return
        if wrong is not None:
            self.refuse(replica, wrong)
            return
        now = replica.checked_at = time.monotonic()
        replica.replayed = int(replayed or 0)
        lag = float(lag or 0.0)
        replica.streaming = bool(streaming)
        if streaming:
            replica.cut_since = None
        else:  # (everything it received is replayed: its own lag reads 0)
            primary = self.primary_position()
            if primary is not None and replica.replayed >= primary:
                replica.cut_since = None  # (nothing newer on the primary: not behind)
            elif primary is not None:
                replica.cut_since = replica.cut_since or now
                lag = max(lag, now - replica.cut_since)
            # (the primary does not answer either: the replicas are what there is)
        replica.lag_s = round(lag, 3)
        replica.error = None

    @contextlib.contextmanager
    def watched(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """Cut ``conn`` off if what runs inside (one statement) has not answered within
        :data:`ANSWER_WITHIN`; a connection cut off is dropped, and the error it raised is
        said as such (:meth:`lost`)."""
        token = WATCHDOG.arm(conn, ANSWER_WITHIN)
        try:
            yield
        finally:
            if WATCHDOG.disarm(token):
                self._local.hung = True
                self._drop(conn)

    def forget_hung(self) -> None:
        """A statement cut off was not on a replica (a read made on the primary)."""
        self._local.__dict__.pop("hung", None)

    def _drop(self, conn: psycopg.Connection[Any]) -> None:
        conns = self._local.__dict__.get("conns", {})
        for url, held in list(conns.items()):
            if held is conn:
                del conns[url]
        close_quietly(conn)

    def refuse(self, replica: Replica, why: str) -> None:
        """Leave out a replica that answers but is not one of this index (for
        :data:`DOWN_FOR` seconds, then looked at again), saying why once."""
        if replica.error != why:
            log.warning("read replica %s left out: %s", replica.shown, why)
        replica.error = why
        replica.down_until = time.monotonic() + DOWN_FOR
        replica.lag_s = None
        replica.checked_at = float("-inf")

    def lost(self, replica: Replica, exc: BaseException) -> ReplicaFailed:
        """Leave ``replica`` out for :data:`DOWN_FOR` seconds; the error to raise."""
        from isotope.redaction import redact

        said = str(exc).strip()
        first = redact(said.splitlines()[0] if said else type(exc).__name__, replica.url)
        if self._local.__dict__.pop("hung", False):
            first = f"did not answer within {ANSWER_WITHIN:g} s"
        replica.error = first
        replica.down_until = time.monotonic() + DOWN_FOR
        replica.lag_s = None
        replica.checked_at = float("-inf")
        conns = self._local.__dict__.get("conns", {})
        conn = conns.pop(replica.url, None)
        if conn is not None:
            close_quietly(conn)
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
            if error is None and not replica.streaming:
                error = "not receiving WAL from the primary" + (
                    "" if replica.cut_since is None else
                    f", behind it for {time.monotonic() - replica.cut_since:.0f} s")
            shown.append({"url": replica.shown, "healthy": replica.healthy
                          and (replica.lag_s or 0.0) <= self.max_lag, "lag_s": replica.lag_s,
                          "error": error})
        return shown


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


def share(key: tuple[str, str], position: int) -> None:
    """(read your writes, across processes) Raise the shared position of ``key`` to
    ``position`` (never lower it)."""
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


def shared(key: tuple[str, str]) -> int:
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
