"""Connections to the embedded store's SQLite database: opening it (read-only indexes
included), the single-writer lock, and SQLite's errors as named isotope errors."""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ParamSpec, TypeVar

from isotope.errors import IndexDamaged, IndexLocked, IsotopeError, StoreError

DB_NAME = "isotope.db"

_P = ParamSpec("_P")
_R = TypeVar("_R")


def writable(directory: Path, db: Path) -> bool:
    """Whether the index can be written: its folder (for SQLite's side files) and its
    database file."""
    return os.access(directory, os.W_OK) and (not db.exists() or os.access(db, os.W_OK))


WAL_LIMIT = 32 * 1024 * 1024
"""Bytes of WAL file kept after a checkpoint (``journal_size_limit``)."""


def _lower(text: str | None) -> str | None:
    return text.lower() if isinstance(text, str) else text


def connect(db: Path, read_only: bool) -> sqlite3.Connection:
    """A connection to ``db``, with ``unicode_lower`` (``lower`` of every letter, not
    only ASCII's). A read-only index (a read-only folder or file system) is opened with
    ``mode=ro``, or, when SQLite cannot create the WAL side files it would need for that,
    as ``immutable``, but only when no write waits in the WAL file (``immutable`` would
    not see it)."""
    conn = _connect(db, read_only)
    conn.create_function("unicode_lower", 1, _lower, deterministic=True)
    return conn


def _connect(db: Path, read_only: bool) -> sqlite3.Connection:
    if not read_only:
        new = not db.exists() or db.stat().st_size == 0
        conn = sqlite3.connect(db, timeout=60, isolation_level=None, check_same_thread=False)
        if new:  # before anything is written: pages freed later go back to the disk
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        # the WAL file shrinks back to this after a checkpoint: while a long read (a
        # compaction's) holds it, a bulk load grew it past twice the database (383 MB
        # beside 157 MB in the 300k scale build), and SQLite keeps a WAL at its largest
        conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT}")
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


def store_error(db: Path, exc: sqlite3.DatabaseError) -> IsotopeError:
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
    if any(sign in text.lower() for sign in ("malformed", "corrupt", "not a database",
                                              "disk image", "file is not")):
        return IndexDamaged(f"the index file {db} is damaged ({text}); `isotope check` "
                            "names the sources affected, or ingest into a new index")
    return IsotopeError(f"the index at {db.parent} could not answer ({text})")


def guarded(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """``method`` with SQLite's errors turned into named isotope errors that name the
    index file."""
    @functools.wraps(method)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except sqlite3.DatabaseError as exc:
            directory = getattr(args[0], "directory")  # noqa: B009 (the store's folder)
            raise store_error(Path(directory) / DB_NAME, exc) from exc

    return run


@contextmanager
def write_lock(directory: Path, wait: float = 0.0) -> Iterator[None]:
    """The single-writer lock: an advisory lock on ``write.lock`` in the index
    directory, released by the system if the process dies."""
    import fcntl

    path = directory / "write.lock"
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
                        f"{directory}; wait for it to finish, or let this one wait "
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


def release(conn: sqlite3.Connection) -> None:
    """Give the database's free pages (the folded log's) back to the file system. Run as
    a script: stepped once, as ``execute`` does, the pragma frees one page only."""
    if not conn.in_transaction:
        conn.executescript("PRAGMA incremental_vacuum;")
