"""The SQLite store's schema, as numbered steps from an empty database (as simonw/llm and
sqlite-utils keep theirs): a new index applies steps 1..N, an index of schema k applies
k+1..N, in one transaction. A step is never edited once released; a change is a new step.
Tests build an index of an older schema by applying steps 1..k."""

from __future__ import annotations

import json
import sqlite3

from isotope.stores import KINDS, SCHEMA_VERSION, Kind
from isotope.stores.keywords import TOKENIZE

_FTS = """
CREATE VIRTUAL TABLE IF NOT EXISTS {t}_fts USING fts5(
    {cols}, content='{t}', content_rowid='rowid', tokenize='{tokenize}');
CREATE TRIGGER IF NOT EXISTS {t}_ai AFTER INSERT ON {t} BEGIN
    INSERT INTO {t}_fts(rowid, {cols}) VALUES (new.rowid, {new}); END;
CREATE TRIGGER IF NOT EXISTS {t}_ad AFTER DELETE ON {t} BEGIN
    INSERT INTO {t}_fts({t}_fts, rowid, {cols}) VALUES ('delete', old.rowid, {old}); END;
"""
FTS_COLUMNS: dict[Kind, tuple[str, ...]] = {
    "questions": ("text",), "atoms": ("text",), "chunks": ("text", "context"),
}
"""Columns of each keyword index: a chunk is found by its text and its context."""


def fts(table: Kind, cols: tuple[str, ...] | None = None) -> list[str]:
    """The statements creating ``table``'s keyword index over ``cols`` (default: today's)
    and the triggers keeping it in step."""
    cols = cols or FTS_COLUMNS[table]
    script = _FTS.format(t=table, tokenize=TOKENIZE, cols=", ".join(cols),
                         new=", ".join(f"new.{c}" for c in cols),
                         old=", ".join(f"old.{c}" for c in cols))
    return [part.strip() for part in script.split(";\n") if part.strip()]


_TABLES_1 = [
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS sources (
    uri TEXT PRIMARY KEY, content_hash TEXT NOT NULL, size INTEGER NOT NULL,
    mtime REAL, loader TEXT NOT NULL, ingested_at TEXT NOT NULL, metadata TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS chunks (
    rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL REFERENCES sources(uri) ON DELETE CASCADE,
    idx INTEGER NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL,
    text TEXT NOT NULL, metadata TEXT NOT NULL, vector BLOB NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS chunks_source ON chunks(source)",
    """CREATE TABLE IF NOT EXISTS atoms (
    rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
    chunk_id TEXT NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL, start INTEGER, "end" INTEGER, text TEXT NOT NULL,
    vector BLOB NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS atoms_chunk ON atoms(chunk_id)",
    """CREATE TABLE IF NOT EXISTS questions (
    rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
    atom_id TEXT NOT NULL REFERENCES atoms(id) ON DELETE CASCADE,
    chunk_id TEXT NOT NULL, text TEXT NOT NULL, vector BLOB NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS questions_atom ON questions(atom_id)",
]

_CHUNK_OF = {
    "questions": "(SELECT c.rowid FROM chunks c WHERE c.id = t.chunk_id)",
    "atoms": "(SELECT c.rowid FROM chunks c WHERE c.id = t.chunk_id)",
    "chunks": "t.rowid",
}
"""The chunk rowid of an item ``t`` (as of step 5; a step's SQL never changes)."""

STEPS: dict[int, list[str]] = {
    # 1: sources, chunks, atoms, questions with their vectors; a keyword index of each
    1: [*_TABLES_1, *(s for t in KINDS for s in fts(t, ("text",)))],
    # 2: the source registry's status and ingest root; a hash per chunk
    2: ["ALTER TABLE sources ADD COLUMN status TEXT NOT NULL DEFAULT 'complete'",
        "ALTER TABLE sources ADD COLUMN root TEXT",
        "ALTER TABLE chunks ADD COLUMN hash TEXT"],
    # 3: a chunk's context (chunk_context), keyword-searched with its text
    3: ["ALTER TABLE chunks ADD COLUMN context TEXT NOT NULL DEFAULT ''",
        "DROP TRIGGER IF EXISTS chunks_ai", "DROP TRIGGER IF EXISTS chunks_ad",
        "DROP TABLE IF EXISTS chunks_fts", *fts("chunks", ("text", "context")),
        "INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')"],
    # 4: what each source stored (chunks, atoms, questions), so that `check` finds rows
    # lost since; a state id (set on open) replaces the generation counter
    4: ["ALTER TABLE sources ADD COLUMN counts TEXT",
        "DELETE FROM meta WHERE key = 'generation'"],
    # 5: vectors leave the tables for the vector indexes in vectors/ (stored once): the
    # log of what changed since each kind's saved index (vectors added, items removed),
    # written with the rows; the vectors held so far start the log
    5: ["CREATE TABLE IF NOT EXISTS vector_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
        "kind TEXT NOT NULL, item INTEGER NOT NULL, grp INTEGER, vector BLOB)",
        "CREATE INDEX IF NOT EXISTS vector_log_kind ON vector_log(kind, seq)",
        *(f"INSERT INTO vector_log(kind, item, grp, vector) SELECT '{t}', t.rowid, "
          f"{_CHUNK_OF[t]}, t.vector FROM {t} t ORDER BY t.rowid" for t in KINDS),
        *(f"UPDATE {t} SET vector = X''" for t in KINDS),
        *(f"CREATE TRIGGER IF NOT EXISTS {t}_vd AFTER DELETE ON {t} BEGIN INSERT INTO "
          f"vector_log(kind, item) VALUES ('{t}', old.rowid); END" for t in KINDS),
        ],
    # 6: questions as enrichment: a chunk stored before its questions are generated waits
    # (enriched = 0) until `isotope enrich` (or the ingest's second stage) adds them
    6: ["ALTER TABLE chunks ADD COLUMN enriched INTEGER NOT NULL DEFAULT 1",
        "CREATE INDEX IF NOT EXISTS chunks_pending ON chunks(source) WHERE enriched = 0"],
    # 7: the generated questions that selection dropped, with why (for `isotope
    # questions` and the chunk view; never searched)
    7: ["""CREATE TABLE IF NOT EXISTS dropped_questions (
        rowid INTEGER PRIMARY KEY,
        chunk_id TEXT NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
        atom_id TEXT NOT NULL, text TEXT NOT NULL, reason TEXT NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS dropped_questions_chunk ON dropped_questions(chunk_id)"],
    # 8: each source's access list (JSON: public, user:NAME, group:NAME; NULL: none), a
    # condition of every search (isotope.access); and the vectors' meta may name segments
    # (an older isotope would read those as damaged)
    8: ["ALTER TABLE sources ADD COLUMN access TEXT",
        # and, with the audit_log setting, who searched what (kept audit_days)
        """CREATE TABLE IF NOT EXISTS audit_log (rowid INTEGER PRIMARY KEY,
        at TEXT NOT NULL, principal TEXT NOT NULL, query TEXT NOT NULL, mode TEXT NOT NULL,
        chunk_ids TEXT NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS audit_log_at ON audit_log(at)"],
    # 9: learning from use. The audit log becomes the query log (each search with its id,
    # filters, scores, suggested action and latency); feedback on a search's results
    # (a not-useful mark keeps its query's vector); each question's origin (generated by
    # the model, manual, or user: a query confirmed useful); questions a changed chunk
    # could not carry (kept, never searched)
    9: [  # (an index made by a development build of step 8 may lack the audit log)
        """CREATE TABLE IF NOT EXISTS audit_log (rowid INTEGER PRIMARY KEY,
        at TEXT NOT NULL, principal TEXT NOT NULL, query TEXT NOT NULL, mode TEXT NOT NULL,
        chunk_ids TEXT NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS audit_log_at ON audit_log(at)",
        "ALTER TABLE audit_log RENAME TO query_log",
        "ALTER TABLE query_log ADD COLUMN query_id TEXT",
        "ALTER TABLE query_log ADD COLUMN filters TEXT",
        "ALTER TABLE query_log ADD COLUMN scores TEXT",
        "ALTER TABLE query_log ADD COLUMN action TEXT",
        "ALTER TABLE query_log ADD COLUMN latency_ms REAL",
        "CREATE UNIQUE INDEX IF NOT EXISTS query_log_id ON query_log(query_id)",
        """CREATE TABLE IF NOT EXISTS feedback (
        query_id TEXT NOT NULL, chunk_id TEXT NOT NULL, useful INTEGER NOT NULL,
        principal TEXT NOT NULL, at TEXT NOT NULL, query TEXT NOT NULL, source TEXT,
        learn TEXT, vector BLOB, PRIMARY KEY (query_id, chunk_id))""",
        "CREATE INDEX IF NOT EXISTS feedback_at ON feedback(at)",
        "CREATE INDEX IF NOT EXISTS feedback_marks ON feedback(useful, principal)",
        "ALTER TABLE questions ADD COLUMN origin TEXT NOT NULL DEFAULT 'generated'",
        "CREATE INDEX IF NOT EXISTS questions_kept ON questions(chunk_id) "
        "WHERE origin <> 'generated'",
        """CREATE TABLE IF NOT EXISTS orphaned_questions (rowid INTEGER PRIMARY KEY,
        source TEXT NOT NULL, chunk_text TEXT NOT NULL, text TEXT NOT NULL,
        origin TEXT NOT NULL, at TEXT NOT NULL)"""],
    # 10: the PostgreSQL store's per-term document frequencies; nothing changes here
    10: [],
    # 11: the PostgreSQL store's keyword engine (pg_textsearch or postings); nothing here
    11: [],
}
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
            for statement in STEPS[step]:
                conn.execute(statement)
            set_meta(conn, "schema_version", step)
            version = step
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return version
