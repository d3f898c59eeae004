"""The embedded store's integrity check: everything ``isotope check`` looks at, each
problem naming the sources it touches."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from isotope.ann import Ids
from isotope.stores import KINDS, Inspection, Kind
from isotope.stores.sqlite_sql import CHUNK_ROWID, ORPHANS
from isotope.stores.vector_place import VectorPlace

log = logging.getLogger(__name__)


def inspect(conn: sqlite3.Connection, snapshot: Callable[[], AbstractContextManager[None]],
            vectors: VectorPlace, table_rows: Callable[[Kind], tuple[Ids, Ids]],
            lost_rows: Callable[[], list[tuple[str, str]]], *, read_only: bool, db: Path
            ) -> Inspection:
    """SQLite's own check, foreign keys, provenance (every question has its atom and
    chunk, every atom its chunk, every chunk its source), what each source stored
    against what it holds now, the keyword indexes against their tables, and each
    kind's vectors against its rows (one vector per row, filed under its chunk). Each
    problem names the sources it touches."""
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
        with snapshot():
            for (row,) in conn.execute("PRAGMA quick_check"):
                if row != "ok":
                    problems.append(f"sqlite: {row}")
                    storage_damaged = True
            for table, rowid, parent, _ in conn.execute("PRAGMA foreign_key_check"):
                problems.append(f"{table} row {rowid} points to a missing {parent} row")
            for what, sql in ORPHANS.items():
                uris = [r[0] for r in conn.execute(sql)]
                found(len(uris), what, {u for u in uris if u is not None})
            for uri, lost in lost_rows():
                found(1, f"source lost rows since it was stored ({lost})", {uri})
            for kind in KINDS:
                rows = conn.execute(f"SELECT COUNT(*) FROM {kind}").fetchone()[0]
                indexed = conn.execute(
                    f"SELECT COUNT(*) FROM {kind}_fts_docsize").fetchone()[0]
                if indexed != rows:
                    problems.append(f"keyword index of {kind} has {indexed} rows, the "
                                    f"table {rows}")
                try:  # FTS5 runs this check as a write: not on a read-only index
                    if not read_only:
                        conn.execute(f"INSERT INTO {kind}_fts({kind}_fts, rank) "
                                     "VALUES ('integrity-check', 1)")
                except sqlite3.OperationalError as exc:  # busy: not checked this time
                    log.info("keyword index of %s not checked: %s", kind, exc)
                except sqlite3.DatabaseError as exc:
                    problems.append(f"keyword index of {kind}: {exc}")
                for problem, rows in vectors.check(kind, table_rows(kind)):
                    problems.append(problem + _sources(conn, kind, rows))
    except sqlite3.DatabaseError as exc:
        storage_damaged = True
        problems.append(
            f"the database file {db} is damaged ({exc}): it cannot "
            "be repaired in place; ingest the sources again into a new index (and "
            "restore this one from a backup if you have one)")
    return Inspection(problems, sorted(damaged), storage_damaged)


def _sources(conn: sqlite3.Connection, kind: Kind, rows: Ids) -> str:
    """`` (sources: a, b)``: the sources of some of ``rows`` of ``kind`` (none: empty)."""
    if not len(rows):
        return ""
    sample = [int(r) for r in rows[:500]]
    marks = ",".join("?" * len(sample))
    uris = sorted({r[0] for r in conn.execute(
        f"SELECT DISTINCT c.source FROM {kind} t JOIN chunks c ON c.rowid = "
        f"{CHUNK_ROWID[kind]} WHERE t.rowid IN ({marks})", sample)})
    more = f" and {len(uris) - 5} more" if len(uris) > 5 else ""
    return f" (sources: {', '.join(uris[:5])}{more})" if uris else ""
