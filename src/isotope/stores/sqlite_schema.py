"""The SQLite store's schema, applied as the named steps of
:mod:`isotope.stores.schema_steps` in SQLite's spelling: a new index applies steps 1..N,
an index of schema k applies k+1..N, in one transaction. Tests build an index of an older
schema by applying steps 1..k."""

from __future__ import annotations

import json
import sqlite3

from isotope.stores import SCHEMA_VERSION
from isotope.stores.schema_steps import FTS_COLUMNS, fts, spelled

__all__ = ["FTS_COLUMNS", "STEPS", "fts", "schema_version", "set_meta", "upgrade"]

STEPS = spelled("sqlite")
"""The steps by number (:mod:`isotope.stores.schema_steps` names and spells them)."""
assert max(STEPS) == SCHEMA_VERSION, "a new step raises isotope.stores.SCHEMA_VERSION"


def set_meta(conn: sqlite3.Connection, key: str, value: object) -> None:
    """Store ``value`` (as JSON) under ``key`` in the meta table, on ``conn``'s
    transaction."""
    conn.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                 "SET value = excluded.value", (key, json.dumps(value)))


def schema_version(conn: sqlite3.Connection) -> int | None:
    """The schema an index is at (None: no isotope tables)."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except sqlite3.OperationalError:
        return None
    return int(json.loads(row[0])) if row else None


def upgrade(conn: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Apply the steps after the database's schema (none: an empty database) up to
    ``target``, in one write transaction; returns the schema it is at. Another process
    may have upgraded it meanwhile: the version is read inside the transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = schema_version(conn) or 0
        for step in range(version + 1, target + 1):
            statements = STEPS[step]
            assert isinstance(statements, list)  # (no SQLite step looks at a server)
            for statement in statements:
                conn.execute(statement)
            set_meta(conn, "schema_version", step)
            version = step
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return version
