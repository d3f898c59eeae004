"""The embedded store's integrity check: everything ``isotope check`` looks at, each
problem naming the sources it touches."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from isotope.stores import KINDS, Inspection
from isotope.stores.sqlite_sql import CHUNK_ROWID, COUNTS, ORPHANS
from isotope.stores.sqlite_vectors import VectorCache

log = logging.getLogger(__name__)


def inspect(conn: sqlite3.Connection, snapshot: Callable[[], AbstractContextManager[None]],
            vectors: VectorCache, meta: Callable[[str], Any], *, read_only: bool,
            db: Path) -> Inspection:
    """SQLite's own check, foreign keys, provenance (every question has its atom and
    chunk, every atom its chunk, every chunk its source), what each source stored
    against what it holds now, vector sizes, the keyword indexes against their tables,
    and the vector cache against the tables, row by row. Each problem names the
    sources it touches."""
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
            for uri, counts, *now in conn.execute(COUNTS):
                if counts is not None and json.loads(counts) != now:
                    stored = json.loads(counts)
                    lost = ", ".join(f"{n - m} {kind}" for kind, n, m in
                                     zip(("chunks", "atoms", "questions"), stored, now,
                                         strict=True) if n != m)
                    found(1, f"source lost rows since it was stored ({lost})", {uri})
            dim = (meta("embedding") or {}).get("dim")
            for kind in KINDS:
                rows = conn.execute(f"SELECT COUNT(*) FROM {kind}").fetchone()[0]
                if dim:
                    uris = [r[0] for r in conn.execute(
                        f"SELECT c.source FROM {kind} t LEFT JOIN chunks c ON "
                        f"c.rowid = {CHUNK_ROWID[kind]} WHERE length(t.vector) != ?",
                        (4 * dim,))]
                    found(len(uris), f"{kind} with a vector that is not {dim}-d",
                          {u for u in uris if u is not None})
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
                problems.extend(vectors.check(kind, rows))
    except sqlite3.DatabaseError as exc:
        storage_damaged = True
        problems.append(
            f"the database file {db} is damaged ({exc}): it cannot "
            "be repaired in place; ingest the sources again into a new index (and "
            "restore this one from a backup if you have one)")
    return Inspection(problems, sorted(damaged), storage_damaged)
