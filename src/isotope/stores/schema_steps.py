"""The schema of both SQL engines as one list of named steps (as simonw/llm names its
migrations), each spelled per dialect: :func:`spelled` gives an engine its numbered steps.

A new index applies steps 1..N, an index of schema k applies k+1..N, in one transaction
(each engine's ``upgrade``). A step is never edited once released; a change is a new step,
named here with both spellings. Where a step reads the same in both engines it is written
once, its column types named (``{id}``, ``{json}``, ``{bytes}``, ...) and filled in from
:data:`TYPES`. The PostgreSQL store began at the embedded store's schema 6, so its first
step is numbered 6 and holds what steps 1 to 6 made; steps 10 and 11 (its keyword engine)
change nothing in the embedded store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from isotope.stores.keywords import TOKENIZE
from isotope.stores.records import KINDS, Kind

Engine = Literal["sqlite", "postgres"]
Spelling = Sequence[str] | str | None
"""A step's statements in one dialect; a string names a function the engine gives
(:func:`spelled`'s ``functions``: a step that must look at the server); None: the engine
has no such step (it is part of another)."""


@dataclass(frozen=True)
class Step:
    number: int
    name: str
    """What the step makes, in a few words (tests and ``docs/architecture.md`` name it)."""
    sqlite: Spelling = None
    postgres: Spelling = None
    both: Sequence[str] | None = None
    """Statements written once for both engines, their column types named (``{id}``,
    ``{json}``, ...) and spelled per dialect from :data:`TYPES`."""


TYPES: dict[Engine, dict[str, str]] = {
    "sqlite": {"id": "rowid INTEGER PRIMARY KEY", "text": "TEXT", "json": "TEXT",
               "bytes": "BLOB", "bool": "INTEGER", "real": "REAL"},
    "postgres": {"id": "row bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "text": "text",
                 "json": "jsonb", "bytes": "bytea", "bool": "boolean",
                 "real": "double precision"},
}
"""How each dialect spells the column types a step written once names."""


# The embedded store's keyword indexes (FTS5), kept in step with their tables by triggers.
_FTS = """
CREATE VIRTUAL TABLE IF NOT EXISTS {t}_fts USING fts5(
    {cols}, content='{t}', content_rowid='rowid', tokenize='{tokenize}');
CREATE TRIGGER IF NOT EXISTS {t}_ai AFTER INSERT ON {t} BEGIN
    INSERT INTO {t}_fts(rowid, {cols}) VALUES (new.rowid, {new}); END;
CREATE TRIGGER IF NOT EXISTS {t}_ad AFTER DELETE ON {t} BEGIN
    INSERT INTO {t}_fts({t}_fts, rowid, {cols}) VALUES ('delete', old.rowid, {old}); END;
"""
FTS_COLUMNS: dict[Kind, tuple[str, ...]] = {
    "questions": ("text",), "atoms": ("text",),
    "chunks": ("text", "context", "questions_text"),
}
"""Columns of each keyword index: a chunk is found by its text, its context and the text
of its questions (document expansion, as doc2query does: step 13)."""
_QUESTIONS_TEXT_SQLITE = (
    "UPDATE chunks SET questions_text = coalesce((SELECT group_concat(t, char(10)) FROM "
    "(SELECT q.text AS t FROM atoms a JOIN questions q ON q.atom_id = a.id AND q.chunk_id = "
    "a.chunk_id WHERE a.chunk_id = chunks.id ORDER BY q.rowid)), '')")
"""Each chunk's questions' text, one a line in the order they were stored, read through
its atoms (step 13's backfill; as ``sql_dialect.SQLITE.chunk_questions`` reads it)."""


def fts(table: Kind, cols: tuple[str, ...] | None = None) -> list[str]:
    """The statements creating ``table``'s FTS5 keyword index over ``cols`` (default:
    today's) and the triggers keeping it in step."""
    cols = cols or FTS_COLUMNS[table]
    script = _FTS.format(t=table, tokenize=TOKENIZE, cols=", ".join(cols),
                         new=", ".join(f"new.{c}" for c in cols),
                         old=", ".join(f"old.{c}" for c in cols))
    return [part.strip() for part in script.split(";\n") if part.strip()]


_SQLITE_TABLES = [
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

_POSTGRES_TABLES = [
    "CREATE TABLE meta (key text PRIMARY KEY, value jsonb NOT NULL)",
    """CREATE TABLE sources (
    uri text PRIMARY KEY, content_hash text NOT NULL, size bigint NOT NULL,
    mtime double precision, loader text NOT NULL, ingested_at text NOT NULL,
    metadata jsonb NOT NULL, status text NOT NULL DEFAULT 'complete', root text,
    counts jsonb)""",
    """CREATE TABLE chunks (
    row bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id text NOT NULL UNIQUE,
    source text NOT NULL REFERENCES sources(uri) ON DELETE CASCADE,
    idx integer NOT NULL, start integer NOT NULL, "end" integer NOT NULL,
    text text NOT NULL, metadata jsonb NOT NULL, context text NOT NULL DEFAULT '',
    hash text, enriched boolean NOT NULL DEFAULT true, ntok integer NOT NULL,
    vector halfvec NOT NULL)""",
    "CREATE INDEX chunks_source ON chunks(source)",
    "CREATE INDEX chunks_pending ON chunks(source, id) WHERE NOT enriched",
    """CREATE TABLE atoms (
    row bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id text NOT NULL UNIQUE,
    chunk_id text NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    idx integer NOT NULL, start integer, "end" integer, text text NOT NULL,
    ntok integer NOT NULL, vector halfvec NOT NULL)""",
    "CREATE INDEX atoms_chunk ON atoms(chunk_id)",
    """CREATE TABLE questions (
    row bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id text NOT NULL UNIQUE,
    atom_id text NOT NULL REFERENCES atoms(id) ON DELETE CASCADE,
    chunk_id text NOT NULL, text text NOT NULL, ntok integer NOT NULL,
    vector halfvec NOT NULL)""",
    "CREATE INDEX questions_atom ON questions(atom_id)",
    "CREATE INDEX questions_chunk ON questions(chunk_id)",
    # row count and total length per kind, in 16 slots (each writing connection adds to
    # its own, so concurrent writers do not queue on one row); read as sums
    "CREATE TABLE kw_stats (kind text NOT NULL, slot integer NOT NULL, n bigint NOT "
    "NULL, total bigint NOT NULL, PRIMARY KEY (kind, slot))",
    *(s for k in KINDS for s in (
        # each posting carries its row's length: BM25 reads the postings alone (an
        # index-only scan), never the rows
        f"CREATE TABLE {k}_terms (term text NOT NULL, item bigint NOT NULL REFERENCES "
        f"{k}(row) ON DELETE CASCADE, tf integer NOT NULL, ntok integer NOT NULL, "
        f"PRIMARY KEY (term, item) INCLUDE (tf, ntok))",
        f"CREATE INDEX {k}_terms_item ON {k}_terms(item)",
        f"""CREATE FUNCTION {k}_stats_add() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO kw_stats AS s VALUES ('{k}', pg_backend_pid() % 16,
          (SELECT count(*) FROM added), (SELECT coalesce(sum(ntok), 0) FROM added))
          ON CONFLICT (kind, slot) DO UPDATE SET n = s.n + excluded.n,
          total = s.total + excluded.total; RETURN NULL; END $$""",
        f"""CREATE FUNCTION {k}_stats_remove() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO kw_stats AS s VALUES ('{k}', pg_backend_pid() % 16,
          -(SELECT count(*) FROM removed), -(SELECT coalesce(sum(ntok), 0) FROM removed))
          ON CONFLICT (kind, slot) DO UPDATE SET n = s.n + excluded.n,
          total = s.total + excluded.total; RETURN NULL; END $$""",
        f"CREATE TRIGGER {k}_ai AFTER INSERT ON {k} REFERENCING NEW TABLE AS added "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {k}_stats_add()",
        f"CREATE TRIGGER {k}_ad AFTER DELETE ON {k} REFERENCING OLD TABLE AS removed "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {k}_stats_remove()",
    )),
]
"""The PostgreSQL store's first schema: the embedded store's schema 6 (sources, chunks,
atoms, questions, chunks waiting for their questions), vectors in the rows (pgvector
halfvec), and BM25 postings per kind with their statistics, kept in step by triggers."""

_AUDIT_LOG = [
    """CREATE TABLE IF NOT EXISTS audit_log ({id},
    at {text} NOT NULL, principal {text} NOT NULL, query {text} NOT NULL,
    mode {text} NOT NULL, chunk_ids {json} NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS audit_log_at ON audit_log(at)",
]
"""Who searched what, with the audit_log setting (kept audit_days)."""

STEPS: tuple[Step, ...] = (
    Step(1, "sources, chunks, atoms and questions, with keyword indexes",
         sqlite=[*_SQLITE_TABLES, *(s for t in KINDS for s in fts(t, ("text",)))],
         postgres=None),
    Step(2, "a source's status and ingest root, a hash per chunk",
         sqlite=["ALTER TABLE sources ADD COLUMN status TEXT NOT NULL DEFAULT 'complete'",
                 "ALTER TABLE sources ADD COLUMN root TEXT",
                 "ALTER TABLE chunks ADD COLUMN hash TEXT"],
         postgres=None),
    Step(3, "a chunk's context, keyword-searched with its text",
         sqlite=["ALTER TABLE chunks ADD COLUMN context TEXT NOT NULL DEFAULT ''",
                 "DROP TRIGGER IF EXISTS chunks_ai", "DROP TRIGGER IF EXISTS chunks_ad",
                 "DROP TABLE IF EXISTS chunks_fts", *fts("chunks", ("text", "context")),
                 "INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')"],
         postgres=None),
    # what each source stored, so that `check` finds rows lost since; a state id (set on
    # open) replaces the generation counter
    Step(4, "each source's stored counts",
         sqlite=["ALTER TABLE sources ADD COLUMN counts TEXT",
                 "DELETE FROM meta WHERE key = 'generation'"],
         postgres=None),
    # vectors leave the tables for the vector indexes in vectors/ (stored once): the log
    # of what changed since each kind's saved index (vectors added, items removed),
    # written with the rows; the vectors held so far start the log
    Step(5, "vectors in their own indexes, with a log of changes",
         sqlite=[
             "CREATE TABLE IF NOT EXISTS vector_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
             "kind TEXT NOT NULL, item INTEGER NOT NULL, grp INTEGER, vector BLOB)",
             "CREATE INDEX IF NOT EXISTS vector_log_kind ON vector_log(kind, seq)",
             *(f"INSERT INTO vector_log(kind, item, grp, vector) SELECT '{t}', t.rowid, "
               f"{_CHUNK_OF[t]}, t.vector FROM {t} t ORDER BY t.rowid" for t in KINDS),
             *(f"UPDATE {t} SET vector = X''" for t in KINDS),
             *(f"CREATE TRIGGER IF NOT EXISTS {t}_vd AFTER DELETE ON {t} BEGIN INSERT INTO "
               f"vector_log(kind, item) VALUES ('{t}', old.rowid); END" for t in KINDS)],
         postgres=None),
    # a chunk stored before its questions are generated waits (enriched = 0) until
    # `isotope enrich` (or the ingest's second stage) adds them
    Step(6, "chunks waiting for their questions",
         sqlite=["ALTER TABLE chunks ADD COLUMN enriched INTEGER NOT NULL DEFAULT 1",
                 "CREATE INDEX IF NOT EXISTS chunks_pending ON chunks(source) "
                 "WHERE enriched = 0"],
         postgres=_POSTGRES_TABLES),
    Step(7, "the generated questions selection dropped, with why",
         both=[
             """CREATE TABLE IF NOT EXISTS dropped_questions ({id},
             chunk_id {text} NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
             atom_id {text} NOT NULL, text {text} NOT NULL, reason {text} NOT NULL)""",
             "CREATE INDEX IF NOT EXISTS dropped_questions_chunk ON "
             "dropped_questions(chunk_id)"]),
    # each source's access list (JSON: public, user:NAME, group:NAME; NULL: none), a
    # condition of every search (isotope.access); in the embedded store, the vectors'
    # meta may name segments from now on (an older isotope would read those as damaged)
    Step(8, "each source's access list, the audit log",
         both=["ALTER TABLE sources ADD COLUMN access {json}",
                                  *_AUDIT_LOG]),
    # learning from use. The audit log becomes the query log (each search with its id,
    # filters, scores, suggested action and latency); feedback on a search's results (a
    # not-useful mark keeps its query's vector); each question's origin (generated by the
    # model, manual, or user: a query confirmed useful); questions a changed chunk could
    # not carry (kept, never searched)
    Step(9, "the query log, feedback, each question's origin, orphaned questions",
         both=[
             *_AUDIT_LOG,  # (an index made by a development build of step 8 may lack it)
             "ALTER TABLE audit_log RENAME TO query_log",
             "ALTER TABLE query_log ADD COLUMN query_id {text}",
             "ALTER TABLE query_log ADD COLUMN filters {json}",
             "ALTER TABLE query_log ADD COLUMN scores {json}",
             "ALTER TABLE query_log ADD COLUMN action {text}",
             "ALTER TABLE query_log ADD COLUMN latency_ms {real}",
             "CREATE UNIQUE INDEX IF NOT EXISTS query_log_id ON query_log(query_id)",
             """CREATE TABLE IF NOT EXISTS feedback (
             query_id {text} NOT NULL, chunk_id {text} NOT NULL, useful {bool} NOT NULL,
             principal {text} NOT NULL, at {text} NOT NULL, query {text} NOT NULL,
             source {text}, learn {text}, vector {bytes}, PRIMARY KEY (query_id, chunk_id))""",
             "CREATE INDEX IF NOT EXISTS feedback_at ON feedback(at)",
             "CREATE INDEX IF NOT EXISTS feedback_marks ON feedback(useful, principal)",
             "ALTER TABLE questions ADD COLUMN origin {text} NOT NULL DEFAULT 'generated'",
             "CREATE INDEX IF NOT EXISTS questions_kept ON questions(chunk_id) "
             "WHERE origin <> 'generated'",
             """CREATE TABLE IF NOT EXISTS orphaned_questions ({id},
             source {text} NOT NULL, chunk_text {text} NOT NULL, text {text} NOT NULL,
             origin {text} NOT NULL, at {text} NOT NULL)"""]),
    # each term's document frequency per kind, kept by triggers on the postings in 16
    # slots (as kw_stats), so BM25 reads a query term's n instead of counting its
    # postings (a common term has hundreds of thousands at a million questions)
    Step(10, "document frequencies of the server's keyword postings",
         sqlite=[], postgres=[s for k in KINDS for s in (
             f"CREATE TABLE {k}_df (term text NOT NULL, slot integer NOT NULL, n bigint NOT "
             f"NULL, PRIMARY KEY (term, slot))",
             # (writers of an older isotope wait: no posting goes uncounted before the
             # trigger)
             f"LOCK TABLE {k}_terms IN SHARE ROW EXCLUSIVE MODE",
             f"INSERT INTO {k}_df SELECT term, 0, count(*) FROM {k}_terms GROUP BY term",
             # (each statement's terms in order: two writers lock a slot's rows alike)
             f"""CREATE FUNCTION {k}_df_add() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO {k}_df AS d SELECT term, pg_backend_pid() % 16, count(*)
               FROM added GROUP BY term ORDER BY term
               ON CONFLICT (term, slot) DO UPDATE SET n = d.n + excluded.n; RETURN NULL;
             END $$""",
             f"""CREATE FUNCTION {k}_df_remove() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO {k}_df AS d SELECT term, pg_backend_pid() % 16, -count(*)
               FROM removed GROUP BY term ORDER BY term
               ON CONFLICT (term, slot) DO UPDATE SET n = d.n + excluded.n; RETURN NULL;
             END $$""",
             f"CREATE TRIGGER {k}_terms_ai AFTER INSERT ON {k}_terms REFERENCING NEW TABLE "
             f"AS added FOR EACH STATEMENT EXECUTE FUNCTION {k}_df_add()",
             f"CREATE TRIGGER {k}_terms_ad AFTER DELETE ON {k}_terms REFERENCING OLD TABLE "
             f"AS removed FOR EACH STATEMENT EXECUTE FUNCTION {k}_df_remove()",
         )]),
    # pg_textsearch's bm25 indexes for a new index where the server has it (the postings
    # removed), else the postings: the engine looks at the server
    Step(11, "the server's keyword engine", sqlite=[], postgres="keyword_engine"),
    # the knowledge graph (setting graph): each entity named in an atom (its key merges
    # names, isotope.knowledge.facts.entity_key), each relation an atom states, and the
    # aliases the model named; rows of a chunk go with it, so access follows the chunk's
    # source and a relation seen in two sources stays while one holds it; an alias
    # is read only through the chunk that named it
    Step(12, "entities, relations and aliases named in the atoms",
         both=[
             """CREATE TABLE IF NOT EXISTS mentions ({id}, entity {text} NOT NULL,
             name {text} NOT NULL, type {text} NOT NULL, atom_id {text} NOT NULL,
             chunk_id {text} NOT NULL REFERENCES chunks(id) ON DELETE CASCADE)""",
             "CREATE INDEX IF NOT EXISTS mentions_entity ON mentions(entity, chunk_id)",
             "CREATE INDEX IF NOT EXISTS mentions_chunk ON mentions(chunk_id)",
             """CREATE TABLE IF NOT EXISTS relations ({id}, subject {text} NOT NULL,
             predicate {text} NOT NULL, object {text} NOT NULL, atom_id {text} NOT NULL,
             chunk_id {text} NOT NULL REFERENCES chunks(id) ON DELETE CASCADE)""",
             "CREATE INDEX IF NOT EXISTS relations_subject ON relations(subject)",
             "CREATE INDEX IF NOT EXISTS relations_object ON relations(object)",
             "CREATE INDEX IF NOT EXISTS relations_chunk ON relations(chunk_id)",
             """CREATE TABLE IF NOT EXISTS entity_aliases (alias {text} NOT NULL,
             entity {text} NOT NULL, chunk_id {text} NOT NULL REFERENCES chunks(id)
             ON DELETE CASCADE, PRIMARY KEY (alias, chunk_id))""",
             "CREATE INDEX IF NOT EXISTS entity_aliases_entity ON entity_aliases(entity)",
             "CREATE INDEX IF NOT EXISTS entity_aliases_chunk ON entity_aliases(chunk_id)"]),
    # a chunk's keyword text gains its questions' text (each question a line, kept in
    # step by the store whenever its questions change): a query in a user's words finds
    # the chunk whose questions use them (measured: chunks-bm25 R@1 72.8 -> 75.4 on the
    # dev passages). The embedded store's saved chunk postings are dropped (made again by
    # the next compaction; FTS5 answers meanwhile); the server's engine: a function
    Step(13, "the questions' text in their chunk's keyword index",
         sqlite=["ALTER TABLE chunks ADD COLUMN questions_text TEXT NOT NULL DEFAULT ''",
                 _QUESTIONS_TEXT_SQLITE,
                 "DROP TRIGGER IF EXISTS chunks_ai", "DROP TRIGGER IF EXISTS chunks_ad",
                 "DROP TABLE IF EXISTS chunks_fts",
                 *fts("chunks", ("text", "context", "questions_text")),
                 "CREATE TRIGGER IF NOT EXISTS chunks_au AFTER UPDATE OF questions_text ON "
                 "chunks BEGIN INSERT INTO chunks_fts(chunks_fts, rowid, text, context, "
                 "questions_text) VALUES ('delete', old.rowid, old.text, old.context, "
                 "old.questions_text); INSERT INTO chunks_fts(rowid, text, context, "
                 "questions_text) VALUES (new.rowid, new.text, new.context, "
                 "new.questions_text); END",
                 "INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')",
                 "UPDATE meta SET value = json_remove(value, '$.chunks.keywords') WHERE "
                 "key = 'vectors'"],
         postgres="questions_in_keywords"),
)
"""Every step, in order."""

SQLStep = list[str] | Callable[..., None]


def spelled(engine: Engine, functions: dict[str, Callable[..., None]] | None = None
            ) -> dict[int, SQLStep]:
    """The steps of ``engine`` by number, in its dialect; a step that is a function is
    taken from ``functions`` by its name."""
    steps: dict[int, SQLStep] = {}
    for step in STEPS:
        if step.both is not None:
            steps[step.number] = [s.format(**TYPES[engine]) for s in step.both]
            continue
        spelling: Spelling = getattr(step, engine)
        if isinstance(spelling, str):
            steps[step.number] = (functions or {})[spelling]
        elif spelling is not None:
            steps[step.number] = list(spelling)
    return steps


def named(engine: Engine) -> list[str]:
    """Each step of ``engine`` as ``N name`` (in order)."""
    return [f"{s.number} {s.name}" for s in STEPS
            if s.both is not None or getattr(s, engine) is not None]
