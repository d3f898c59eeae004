"""The PostgreSQL store's location, connections, errors and schema.

A location is a libpq URL, ``postgresql://user:password@host:5432/db?schema=handbook``:
each index lives in its own schema (default ``isotope``), so several indexes can share a
database. The schema is built as numbered steps from nothing, in one transaction (DDL is
transactional in PostgreSQL: a failed migration leaves nothing half-created).
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from isotope.errors import InvalidIndex, IsotopeError, StoreError
from isotope.redaction import redact
from isotope.stores import KINDS, SCHEMA_VERSION, describe
from isotope.stores.schema_steps import spelled

if TYPE_CHECKING:
    import psycopg

    from isotope.stores.keywords import Tokenizer

log = logging.getLogger(__name__)

DEFAULT_SCHEMA = "isotope"
_NAME = re.compile(r"^(?!pg_)[a-z_][a-z0-9_]{0,62}$")
"""A schema name isotope accepts (always written quoted, so reserved words are fine)."""

KW_KINDS = KINDS
TEXT_CONFIG = "isotope"
"""The text search configuration of pg_textsearch's bm25 indexes, made in the index's
schema: PostgreSQL's English (Snowball) stemmer without its stop words, as near as the
server comes to the embedded store's FTS5 (the Porter stemmer, every word counted).
Measured on the 300 SQuAD passages (``benchmarks/postgres.py quality``): hybrid R@1 79.3
against FTS5's 79.7, BM25 top 10s agreeing at 0.93-0.96; with PostgreSQL's ``english``
(stop words dropped) 78.9 and 0.76-0.89."""
PUNCTUATION = r"[!-/:-@\[-`{-~]+"
"""ASCII punctuation, read as a space before PostgreSQL's parser sees the text: the
parser keeps ``config.yaml``, ``/docs/setup.md`` or ``a@b.org`` as one token, where FTS5
(the embedded store) finds each word of them."""
_KEYWORD_TEXT_11 = {"questions": "text", "atoms": "text",
                    "chunks": "text || E'\\n' || context"}
"""What each kind's bm25 index read as step 11 made it."""
KEYWORD_TEXT = {**_KEYWORD_TEXT_11,
                "chunks": "text || E'\\n' || context || E'\\n' || questions_text"}
"""What each kind's bm25 index reads, held in a generated column ``keywords`` (pg_textsearch
1.0 indexes no expression): a chunk is found by its text, its context and its questions'
text (step 13), as the embedded store's FTS5 table has all three."""


def _keyword_engine(conn: psycopg.Connection[Any], schema: str, new: bool) -> None:
    """Step 11: choose the index's keyword engine. A new index on a server where
    pg_textsearch can be used gets bm25 indexes, and isotope's postings (step 6 and 10's
    tables and triggers) are removed; an index made before keeps its postings (``isotope
    copy`` into a new schema moves it), as does one on a server without pg_textsearch (or
    where it is not loaded: everything it would make is tried, and undone on a refusal)."""
    import psycopg

    engine = "postings"
    if new:
        why = _textsearch(conn)
        if why is None:
            try:
                with conn.transaction():  # (a savepoint)
                    _to_textsearch(conn, schema)
                engine = "pg_textsearch"
            except psycopg.Error as exc:
                why = (f"pg_textsearch is there but refused to index ({_first_line(exc)}); "
                       "it must be in the server's shared_preload_libraries")
        if why is not None:
            log.info("keyword search of the new index in schema %s reads isotope's own "
                     "postings: %s", schema, why)
    if engine == "pg_textsearch":  # (whether its bm25 indexes reach read replicas)
        conn.execute("INSERT INTO meta(key, value) SELECT 'bm25_version', to_jsonb(extversion) "
                     "FROM pg_extension WHERE extname = 'pg_textsearch' ON CONFLICT (key) DO "
                     "NOTHING")
    conn.execute("INSERT INTO meta(key, value) VALUES ('keyword_engine', %s) ON CONFLICT "
                 "(key) DO NOTHING", (json.dumps(engine),))


def keywords_query(words: list[str]) -> str:
    """A keyword query's words as the bm25 indexes read text (punctuation as spaces)."""
    return re.sub(PUNCTUATION, " ", " ".join(words))


def _to_textsearch(conn: psycopg.Connection[Any], schema: str) -> None:
    """The postings removed; a generated ``keywords`` column per kind, the text search
    configuration and the bm25 indexes made."""
    for kind in KW_KINDS:
        conn.execute(f"DROP FUNCTION {kind}_stats_add, {kind}_stats_remove, "
                     f"{kind}_df_add, {kind}_df_remove CASCADE")
        conn.execute(f"DROP TABLE {kind}_terms, {kind}_df")
    conn.execute("DROP TABLE kw_stats")
    for kind in KW_KINDS:
        conn.execute(_keywords_column(kind, _KEYWORD_TEXT_11))
    # English stemming without stop words, as FTS5's porter tokenizer
    conn.execute(f'CREATE TEXT SEARCH DICTIONARY "{schema}".isotope_stem '
                 "(TEMPLATE = snowball, Language = english)")
    conn.execute(f'CREATE TEXT SEARCH CONFIGURATION "{schema}".{TEXT_CONFIG} '
                 "(COPY = pg_catalog.english)")
    conn.execute(f'ALTER TEXT SEARCH CONFIGURATION "{schema}".{TEXT_CONFIG} ALTER '
                 f'MAPPING REPLACE english_stem WITH "{schema}".isotope_stem')
    for statement in bm25_indexes(schema):
        conn.execute(statement)


def _keywords_column(kind: str, read: dict[str, str]) -> str:
    return (f"ALTER TABLE {kind} ADD COLUMN keywords text GENERATED ALWAYS AS "
            f"(regexp_replace({read[kind]}, '{PUNCTUATION}', ' ', 'g')) STORED")


def _questions_in_keywords(conn: psycopg.Connection[Any], schema: str, new: bool) -> None:
    """Step 13: each chunk's questions' text (one a line) in a column of its own, read by
    its keyword search: the bm25 index made again over it (pg_textsearch), or the
    postings of chunks that have questions made again (isotope's postings). On a large
    index this rewrites the chunks table once (searches wait: its lock)."""
    engine = conn.execute("SELECT value FROM meta WHERE key = 'keyword_engine'").fetchone()
    textsearch = engine is not None and engine[0] == "pg_textsearch"
    if textsearch:  # (first: the rows are written once, not once more for the old index)
        conn.execute(f'DROP INDEX IF EXISTS "{schema}".chunks_bm25')
        conn.execute("ALTER TABLE chunks DROP COLUMN keywords")
    conn.execute("ALTER TABLE chunks ADD COLUMN questions_text text NOT NULL DEFAULT ''")
    conn.execute("UPDATE chunks c SET questions_text = x.texts FROM (SELECT q.chunk_id, "
                 "string_agg(q.text, E'\\n' ORDER BY q.row) AS texts FROM questions q JOIN "
                 "atoms a ON a.id = q.atom_id AND a.chunk_id = q.chunk_id GROUP BY "
                 "q.chunk_id) x WHERE x.chunk_id = c.id")
    if textsearch:
        conn.execute(_keywords_column("chunks", KEYWORD_TEXT))
        for statement in bm25_indexes(schema, ("chunks",)):
            conn.execute(statement)
        return
    from isotope.stores.keywords import TOKENIZER

    after = 0
    while part := conn.execute(
            "SELECT row, text || E'\\n' || context || E'\\n' || questions_text FROM chunks "
            "WHERE row > %s AND questions_text <> '' ORDER BY row LIMIT 2000",
            (after,)).fetchall():
        chunk_postings(conn, [(int(r), t) for r, t in part], TOKENIZER)
        after = int(part[-1][0])


def chunk_postings(conn: psycopg.Connection[Any], changed: list[tuple[int, str]],
                   tokenizer: Tokenizer) -> None:
    """Make the postings of chunks ``(row, keyword text)`` again (the ``postings``
    engine): their terms, lengths and the chunks' total length (the document frequencies
    follow the postings by trigger)."""
    rows = [row for row, _ in changed]
    counts = tokenizer.texts([text for _, text in changed])
    lengths = [sum(c.values()) for c in counts]
    had = conn.execute("SELECT coalesce(sum(ntok), 0) FROM chunks WHERE row = ANY(%s)",
                       (rows,)).fetchone()
    conn.execute("DELETE FROM chunks_terms WHERE item = ANY(%s)", (rows,))
    with conn.cursor().copy("COPY chunks_terms (term, item, tf, ntok) FROM STDIN") as copy:
        for row, terms, length in zip(rows, counts, lengths, strict=True):
            for term, tf in terms.items():
                copy.write_row((term, row, tf, length))
    conn.cursor().executemany("UPDATE chunks SET ntok = %s WHERE row = %s",
                              list(zip(lengths, rows, strict=True)))
    conn.execute("INSERT INTO kw_stats AS s VALUES ('chunks', pg_backend_pid() %% 16, 0, %s) "
                 "ON CONFLICT (kind, slot) DO UPDATE SET total = s.total + excluded.total",
                 (sum(lengths) - int(had[0] if had else 0),))


def bm25_indexes(schema: str, kinds: tuple[str, ...] = KW_KINDS) -> list[str]:
    """The statements that make each kind's bm25 index (pg_textsearch)."""
    return [f'CREATE INDEX IF NOT EXISTS {kind}_bm25 ON "{schema}".{kind} USING bm25 '
            f"(keywords) WITH (text_config='{schema}.{TEXT_CONFIG}')"
            for kind in kinds]


def _textsearch(conn: psycopg.Connection[Any]) -> str | None:
    """None when pg_textsearch is in the database (made now if the server has it and the
    user may), else why not."""
    import psycopg

    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_textsearch'").fetchone():
        return None
    if not conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_textsearch'"
                        ).fetchone():
        return ("the server has no pg_textsearch extension (install it, add it to "
                "shared_preload_libraries, then copy the index into a new schema to use it)")
    try:
        with conn.transaction():  # (a savepoint: a refusal leaves the step going on)
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('isotope-extension'))")
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_textsearch SCHEMA public")
    except psycopg.Error as exc:
        return (f"pg_textsearch could not be created ({_first_line(exc)}); it must be in "
                "shared_preload_libraries and created by a superuser (CREATE EXTENSION "
                "pg_textsearch)")
    return None


STEPS = spelled("postgres", {"keyword_engine": _keyword_engine,
                             "questions_in_keywords": _questions_in_keywords})
"""The steps by number (:mod:`isotope.stores.schema_steps` names and spells them): the
first is 6, the embedded store's schema 6 at once."""
assert max(STEPS) == SCHEMA_VERSION, "a new step raises isotope.stores.SCHEMA_VERSION"


def split_location(location: str) -> tuple[str, str]:
    """(the connection URL without isotope's own ``schema`` parameter, the schema)."""
    try:
        parts = urlsplit(location)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:  # e.g. an unclosed [IPv6 address
        # the parser quotes the piece it choked on, which may be part of a password (one
        # holding a "?" is read as "PASSWORD-START" for a port): never its quotes
        reason = re.sub(r"(\s+as)?\s*'.*'", "", str(exc))
        raise InvalidIndex(redact(f"{describe(location)} is not a valid URL ({reason}); write "
                                  "postgresql://USER@HOST:PORT/DATABASE, an IPv6 host in "
                                  "brackets: [::1]", location)) from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    schema = schemas[-1] if schemas else DEFAULT_SCHEMA
    if not _NAME.match(schema):
        raise InvalidIndex(f"{describe(location)}: schema {schema!r} is not a plain name; "
                           "use lowercase letters, digits and _ (at most 63, "
                           "not starting with pg_), e.g. ?schema=handbook")
    scheme = "postgresql" if parts.scheme in ("postgres", "postgresql") else parts.scheme
    rest = urlencode([(k, v) for k, v in query if k not in ("schema", "replica")])
    return _joined(scheme, parts.netloc, parts.path, rest, parts.fragment), schema


def _joined(scheme: str, netloc: str, path: str, query: str, fragment: str) -> str:
    """A URL from its parts, keeping ``//`` where there is no host (``urlunsplit`` makes
    ``postgresql:///?service=NAME`` into ``postgresql:/?service=NAME``, which libpq does
    not read)."""
    joined = urlunsplit((scheme, netloc, path, query, fragment))
    if not netloc and not joined.startswith(f"{scheme}://"):
        joined = f"{scheme}://" + joined[len(scheme) + 1:]
    return joined


def replicas_in(location: str) -> list[str]:
    """The read replicas a location names (``?replica=HOST:PORT``, repeatable, or
    ``?replica=`` a whole URL-encoded ``postgresql://`` URL): a HOST:PORT replica is
    reached with the primary's user, password, database and parameters."""
    url, _ = split_location(location)
    parts = urlsplit(url)
    found = []
    for key, value in parse_qsl(urlsplit(location).query, keep_blank_values=True):
        if key != "replica" or not value.strip():
            continue
        if value.startswith(("postgresql://", "postgres://")):
            found.append(value)
            continue
        user = parts.netloc.rpartition("@")[0]
        kept = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                          if k not in ("host", "hostaddr", "port")])  # (the primary's)
        found.append(_joined(parts.scheme, f"{user}@{value}" if user else value,
                             parts.path, kept, parts.fragment))
    return found


def connect(url: str, schema: str, location: str, timeout: int = 10, **options: Any
            ) -> psycopg.Connection[Any]:
    """A connection (autocommit; transactions are explicit) whose search path is the
    index's schema (then pgvector's own schema, wherever it was installed), with
    pgvector's types registered; ``timeout``: seconds to wait for the server;
    ``options``: more libpq parameters (keepalives, ...)."""
    import psycopg

    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=timeout,
                               application_name="isotope", **options)
    except psycopg.OperationalError as exc:
        refused = InvalidIndex(_connect_error(location, exc))
        refused.unreachable = True
        raise refused from None
    except psycopg.Error as exc:  # e.g. an unknown parameter in the URL
        raise InvalidIndex(redact(f"cannot connect to {describe(location)}: "
                                  f"{_first_line(exc)}; check the URL's parameters",
                                  location)) from None
    try:
        search_path(conn, schema)
        if _has_vector(conn):
            _register(conn)
    except psycopg.Error as exc:
        conn.close()
        raise store_error(location, exc) from None
    return conn


def close_quietly(conn: psycopg.Connection[Any]) -> None:
    """Close ``conn``; a connection that is already broken or gone is no error."""
    try:
        conn.close()
    except Exception:
        log.debug("closing a connection failed", exc_info=True)


def search_path(conn: psycopg.Connection[Any], schema: str) -> None:
    """The index's schema first, then the schemas holding the extensions isotope calls
    (vector, pg_textsearch, vectorscale: public, or elsewhere as some hosted services
    install them)."""
    found = [r[0] for r in conn.execute(
        "SELECT DISTINCT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = "
        "e.extnamespace WHERE e.extname IN ('vector', 'pg_textsearch', 'vectorscale') AND "
        "n.nspname <> 'public' ORDER BY 1").fetchall()]
    named = ", ".join(f'"{s}"' for s in [schema, *(s for s in found if s != schema), "public"])
    conn.execute(f"SET search_path TO {named}")


def _has_vector(conn: psycopg.Connection[Any]) -> bool:
    return conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'"
                        ).fetchone() is not None


def _register(conn: psycopg.Connection[Any]) -> None:
    from pgvector.psycopg import register_vector

    register_vector(conn)


def _connect_error(location: str, exc: Exception) -> str:
    text = str(exc).strip().splitlines()[-1].strip() if str(exc).strip() else type(exc).__name__
    where = describe(location)
    lowered = str(exc).lower()
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        fix = "check the user and password in the URL (or PGPASSWORD / ~/.pgpass)"
    elif "does not exist" in lowered and "database" in lowered:
        fix = "create the database first (createdb NAME) or name an existing one"
    elif "shutting down" in lowered or "starting up" in lowered or "recovery mode" in lowered:
        fix = "the server is stopping or starting; try again when it is up"
    elif "connection refused" in lowered or "could not connect" in lowered or \
            "no such file" in lowered or "timeout" in lowered:
        fix = "is the server running and reachable at that host and port?"
    else:
        fix = "check the URL, the server and your credentials"
    if "is the server running" in text.lower():  # (libpq asked it already: once is enough)
        fix = "start it, or check the host and port in the URL"
    return redact(f"cannot connect to {where}: {text}; {fix}", location)


def schema_version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The schema an index is at (None: no isotope tables in that schema)."""
    found = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".meta',)).fetchone()
    if found is None or found[0] is None:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else None


def upgrade(conn: psycopg.Connection[Any], schema: str, location: str) -> int:
    """Create the ``vector`` extension if needed and apply the steps after the schema's
    version, in one transaction under an advisory lock (two processes opening a new index
    at once: one builds it, the other then sees it built)."""
    import psycopg

    where = describe(location)
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                         (f"isotope-schema:{schema}",))
            if not _has_vector(conn):  # in public (never in an index's own schema, where
                # dropping that index would take every index's vectors): one database-wide
                # lock, as two first opens of different schemas may race here
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('isotope-extension'))")
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            version = schema_version(conn, schema) or 0
            new = version == 0
            for step in sorted(s for s in STEPS if s > version):
                statements = STEPS[step]
                if callable(statements):
                    statements(conn, schema, new)
                    statements = []
                for statement in statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES ('schema_version', %s) ON CONFLICT "
                    "(key) DO UPDATE SET value = excluded.value", (json.dumps(step),))
                version = step
    except psycopg.errors.InsufficientPrivilege as exc:
        raise InvalidIndex(
            f"{where}: the user may not create what the index needs ({_first_line(exc)}); "
            f"GRANT CREATE ON DATABASE to the user, or have an administrator run "
            f"`CREATE EXTENSION vector; CREATE SCHEMA {schema} AUTHORIZATION <user>` once"
        ) from None
    except (psycopg.errors.FeatureNotSupported, psycopg.errors.UndefinedFile) as exc:
        raise InvalidIndex(
            f"{where}: the server has no pgvector extension ({_first_line(exc)}); install "
            "pgvector 0.8 or newer on the server (e.g. the postgresql-NN-pgvector package) "
            "and run `CREATE EXTENSION vector` as a superuser") from None
    except psycopg.Error as exc:
        raise store_error(location, exc) from None
    try:
        search_path(conn, schema)  # the extension may have just been created
        _register(conn)
    except psycopg.Error as exc:
        raise store_error(location, exc, writing=False) from None
    return version


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def store_error(location: str, exc: Exception, *, writing: bool = True) -> IsotopeError:
    """A database error during a read or write, as one line naming the index (by its
    SQLSTATE: a lost connection, a deadlock or serialization failure, anything else)."""
    import psycopg

    where = describe(location)
    lost = "" if not writing else "; nothing of that write was stored"
    state = getattr(exc, "sqlstate", None) or ""
    said = redact(_first_line(exc), location)
    if isinstance(exc, psycopg.OperationalError) and state in ("", "57P01", "57P02",
                                                               "57P03", "08006", "08003"):
        error = StoreError(f"{where}: the connection to the server was lost "
                           f"({said}){lost}; try again")
        error.unreachable = True
        return error
    if state in ("40P01", "40001"):  # deadlock, serialization failure
        error = StoreError(f"{where}: the server aborted the transaction to resolve a "
                           f"conflict with another writer ({said}){lost}; try again")
        error.retry = True
        return error
    return StoreError(f"{where}: {said}{lost}")
